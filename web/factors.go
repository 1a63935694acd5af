package web

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/workspaces"
)

type capabilityFailure struct {
	status    int
	code, msg string
}

// capabilityJSON maps a capability error to a JSON answer; nil for an
// internal one.
func capabilityJSON(err error) *capabilityFailure {
	e, ok := errors.AsType[*capabilities.Error](err)
	if !ok || e.Code == capabilities.CodeInternal {
		return nil
	}
	return &capabilityFailure{status: capabilities.HTTPStatus(e.Code), code: string(e.Code), msg: pageMessage(e.Message)}
}

// Second-factor paths.
const (
	pathLogin2FA                = "/login/two-factor"
	pathLogin2FAPasskeyOptions  = "/login/two-factor/passkey/options"
	pathLogin2FAPasskey         = "/login/two-factor/passkey"
	pathLoginPasskeyOptions     = "/login/passkey/options"
	pathLoginPasskey            = "/login/passkey"
	pathSecurity                = mail.LinkSecurity
	pathSecurityTOTP            = "/account/security/totp"
	pathSecurityTOTPQR          = "/account/security/totp/qr.png"
	pathSecurityTOTPConfirm     = "/account/security/totp/confirm"
	pathSecurityTOTPDisable     = "/account/security/totp/disable"
	pathSecurityRecovery        = "/account/security/recovery-codes"
	pathSecurityPasskeys        = "/account/security/passkeys"
	pathSecurityPasskeyOptions  = "/account/security/passkeys/options"
	pathSecurityPasskeyProof    = "/account/security/passkey-proof/options"
	pathSecurityWorkspaceKeys   = "/account/security/workspace-keys"
	maxPasskeyJSONBody          = 64 << 10
	passkeyScriptPath           = "/static/passkey.js"
	secondFactorRequiredNotice  = "admin-2fa"
	secondFactorRequiredMessage = "This server requires admins to use a second factor. Set up an authenticator app or a passkey below before using the admin pages."
)

//go:embed static/passkey.js
var passkeyScript []byte

var passkeyScriptVersion = func() string {
	sum := sha256.Sum256(passkeyScript)
	return hex.EncodeToString(sum[:6])
}()

// servePasskeyScript serves the embedded passkey script.
func (h *Handler) servePasskeyScript(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	h.setSecurityHeaders(hdr, r)
	hdr.Set("Content-Type", "text/javascript; charset=utf-8")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("ETag", `"`+passkeyScriptVersion+`"`)
	if r.URL.Query().Get("v") == passkeyScriptVersion {
		hdr.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		hdr.Set("Cache-Control", "public, max-age=300")
	}
	http.ServeContent(w, r, "passkey.js", time.Time{}, bytes.NewReader(passkeyScript))
}

// secondFactorForm is the state of the second step of a sign-in.
type secondFactorForm struct {
	Action     string // where the code form posts
	Pending    string // the token naming the server-side pending sign-in
	RedirectTo string
	ClientName string
	Passkeys   bool   // the account has passkeys: offer them
	Next       string // where a passkey step goes on success
	Error      string
}

// securityView is what the security page shows.
type securityView struct {
	Factors   accounts.Factors
	Enrolment *accounts.TOTPEnrolment
	NewCodes  []string
	Error     string
	// Keys lists the person's live workspace API keys; ShowKeys is set
	// when the server has workspaces.
	Keys     []workspaces.OwnKey
	ShowKeys bool
	// Identities are the linked sign-in identities (identityList);
	// ShowIdentities is set when the server has the capability.
	Identities     []federation.Identity
	ShowIdentities bool
	LinkButtons    []externalButton
}

func (h *Handler) factorRoutes(handle func(string, http.HandlerFunc)) {
	limit := func(fn http.HandlerFunc) http.HandlerFunc { return h.LimitCredentials(fn).ServeHTTP }
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	handle("GET "+passkeyScriptPath, h.servePasskeyScript)
	handle("POST "+pathLogin2FA, limit(h.loginSecondFactor))
	handle("POST "+pathLogin2FAPasskeyOptions, limit(h.pendingPasskeyOptions))
	handle("POST "+pathLogin2FAPasskey, limit(h.pendingPasskey))
	handle("POST "+pathLoginPasskeyOptions, limit(h.passkeyLoginOptions))
	handle("POST "+pathLoginPasskey, limit(h.passkeyLogin))
	handle("GET "+pathSecurity, user(h.security))
	handle("GET "+pathSecurityTOTPQR, user(h.totpQR))
	handle("POST "+pathSecurityTOTP, limit(user(h.totpBegin)))
	handle("POST "+pathSecurityTOTPConfirm, limit(user(h.totpConfirm)))
	handle("POST "+pathSecurityTOTPDisable, limit(user(h.totpDisable)))
	handle("POST "+pathSecurityRecovery, limit(user(h.recoveryReset)))
	handle("POST "+pathSecurityPasskeyOptions, limit(user(h.passkeyRegisterOptions)))
	handle("POST "+pathSecurityPasskeys, user(h.passkeyRegister))
	handle("POST "+pathSecurityPasskeys+"/{id}/rename", user(h.passkeyRename))
	handle("POST "+pathSecurityPasskeys+"/{id}/remove", limit(user(h.passkeyRemove)))
	handle("POST "+pathSecurityPasskeyProof, limit(user(h.passkeyProofOptions)))
	handle("POST "+pathSecurityWorkspaceKeys+"/{kid}/revoke", user(h.ownWorkspaceKeyRevoke))
}

// ---- sign-in, second step ----

// beginSecondFactor is called by signIn once the password is right: when
// the account has a second factor it records a pending sign-in and
// returns its form (ok false: no session yet).
func (h *Handler) beginSecondFactor(r *http.Request, u accounts.User, remember bool) (*secondFactorForm, error) {
	f, err := h.opts.Accounts.SecondFactors.FactorsOf(r.Context(), u.ID)
	if err != nil {
		return nil, err
	}
	if !f.Any() {
		return nil, nil
	}
	token, err := h.opts.Accounts.SecondFactors.BeginPendingLogin(r.Context(), u, remember)
	if err != nil {
		return nil, err
	}
	return &secondFactorForm{Pending: token, Passkeys: len(f.Passkeys) > 0}, nil
}

// renderSecondFactor shows the second step with the status of an error.
func (h *Handler) renderSecondFactor(w http.ResponseWriter, r *http.Request, status int, f secondFactorForm, csp string) {
	p := h.page(r, "Two-step sign-in")
	p.Script = f.Passkeys
	h.renderCSP(w, r, status, secondFactorPage(p, f), csp)
}

// completeSecondFactor checks the posted code of a pending sign-in and
// starts the session. On failure it fills f.Error and returns a status.
func (h *Handler) completeSecondFactor(w http.ResponseWriter, r *http.Request, f *secondFactorForm) (accounts.User, int) {
	ctx := r.Context()
	if status := h.allowSecondFactor(w, r, f); status != 0 {
		return accounts.User{}, status
	}
	p, err := h.opts.Accounts.SecondFactors.CompletePendingLogin(ctx, f.Pending, r.PostFormValue("code"))
	return h.finishSecondFactor(w, r, p, err, f, "totp")
}

func (h *Handler) finishSecondFactor(w http.ResponseWriter, r *http.Request, p accounts.PendingLogin, err error, f *secondFactorForm, method string) (accounts.User, int) {
	if err == nil {
		if _, err = h.opts.Accounts.Credentials.StartSession(w, r, p.User, p.RememberMe); err == nil {
			h.audit(r, audit.CategoryAuth, "login_second_factor", audit.ResultSuccess, method, &p.User)
			return p.User, 0
		}
	}
	var who *accounts.User
	if pl, perr := h.opts.Accounts.SecondFactors.PeekPendingLogin(r.Context(), f.Pending); perr == nil {
		who = &pl.User
	}
	h.audit(r, audit.CategoryAuth, "login_second_factor", audit.ResultFailure, factorReason(err), who)
	switch {
	case errors.Is(err, accounts.ErrSecondFactorInvalid), errors.Is(err, accounts.ErrPasskeyInvalid):
		f.Error = accounts.MessageOf(err)
		if who == nil { // out of attempts: the pending sign-in is gone
			f.Error, f.Pending = accounts.ErrPendingLoginInvalid.Error(), ""
		}
		return accounts.User{}, http.StatusUnauthorized
	case errors.Is(err, accounts.ErrPendingLoginInvalid):
		f.Error, f.Pending = accounts.ErrPendingLoginInvalid.Error(), ""
		return accounts.User{}, http.StatusBadRequest
	}
	if status, msg, ok := userError(err); ok {
		f.Error, f.Pending = msg, ""
		return accounts.User{}, status
	}
	h.log.ErrorContext(r.Context(), "web: second factor", "err", err)
	f.Error = "Something went wrong on our side. Please try again."
	return accounts.User{}, http.StatusInternalServerError
}

// Per-account bucket of second-factor attempts. The credential bucket is
// per client and each pending sign-in takes only a few codes, but whoever
// knows the password can start pending sign-ins at will, from as many
// addresses as they have: without a bound per account, six-digit codes
// would fall to a distributed guesser. Every attempt on an account's
// pending sign-ins (a code or a passkey) counts here.
const (
	secondFactorBucketPrefix = "second-factor:user:"
	// SecondFactorAccountRequests attempts per SecondFactorAccountWindow
	// are allowed on the pending sign-ins of one account.
	SecondFactorAccountRequests = 10
	SecondFactorAccountWindow   = 15 * time.Minute
	secondFactorLockedMessage   = "Too many attempts for this account. Wait a few minutes, then try again."
)

// allowSecondFactor counts one second-factor attempt against the bucket of
// the account of f's pending sign-in. It returns 0 when the attempt may go
// on (also for an unknown pending sign-in: completing it fails anyway);
// otherwise it fills f.Error, sets Retry-After and returns the status (429,
// or 503 when the limiter fails: fail closed).
func (h *Handler) allowSecondFactor(w http.ResponseWriter, r *http.Request, f *secondFactorForm) int {
	p, err := h.opts.Accounts.SecondFactors.PeekPendingLogin(r.Context(), f.Pending)
	if err != nil {
		return 0
	}
	d, err := h.limiter.Allow(r.Context(), secondFactorBucketPrefix+strconv.FormatInt(p.User.ID, 10),
		Limit{Requests: SecondFactorAccountRequests, Window: SecondFactorAccountWindow})
	if err != nil {
		h.log.ErrorContext(r.Context(), "web: second-factor rate limit check failed", "err", err)
		w.Header().Set("Retry-After", "5")
		f.Error = "The service is briefly unavailable. Please try again in a moment."
		return http.StatusServiceUnavailable
	}
	if !d.Allowed {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(d.RetryAfter.Seconds())), 10))
		h.audit(r, audit.CategoryAuth, "login_second_factor", audit.ResultFailure, "account_rate_limited", &p.User)
		f.Error = secondFactorLockedMessage
		return http.StatusTooManyRequests
	}
	return 0
}

func factorReason(err error) string {
	switch {
	case errors.Is(err, accounts.ErrSecondFactorInvalid):
		return "invalid_code"
	case errors.Is(err, accounts.ErrPasskeyInvalid):
		return "invalid_passkey"
	case errors.Is(err, accounts.ErrPendingLoginInvalid):
		return "pending_invalid"
	}
	return auditReason(err)
}

// loginSecondFactor is the second step of the /login form.
func (h *Handler) loginSecondFactor(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	f := secondFactorForm{Action: h.prefix + pathLogin2FA, Pending: r.PostFormValue("pending"), RedirectTo: redirectParam(r.PostFormValue("redirectTo"))}
	f.Next = h.loginTarget(f.RedirectTo)
	if _, status := h.completeSecondFactor(w, r, &f); status != 0 {
		if f.Pending == "" {
			h.render(w, r, status, loginPage(h.loginFramePage(r), authForm{Action: h.prefix + pathLogin, RedirectTo: f.RedirectTo, Error: f.Error, errStatus: status}))
			return
		}
		if pl, err := h.opts.Accounts.SecondFactors.FactorsOfPending(r.Context(), f.Pending); err == nil {
			f.Passkeys = pl
		}
		h.renderSecondFactor(w, r, status, f, ContentSecurityPolicy)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, f.Next, http.StatusSeeOther)
}

// loginTarget is where a sign-in from /login goes: redirectTo, or the
// account page.
func (h *Handler) loginTarget(redirectTo string) string {
	if redirectTo != "" {
		return redirectTo
	}
	return h.prefix + pathAccount
}

// loginFramePage is the frame of the /login page (with the passkey script).
func (h *Handler) loginFramePage(r *http.Request) page {
	p := h.page(r, "Sign in")
	p.Script = true
	return p
}

// ---- passkey JSON endpoints ----

// readJSON decodes a small JSON body into v; on failure it answers 400.
func (h *Handler) readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPasskeyJSONBody+1))
	if err != nil || len(body) > maxPasskeyJSONBody || json.Unmarshal(body, v) != nil {
		h.writeJSON(w, r, http.StatusBadRequest, jsonError{Error: "invalid_request", Message: "The request could not be read."})
		return false
	}
	return true
}

// jsonFail answers a failed passkey request.
func (h *Handler) jsonFail(w http.ResponseWriter, r *http.Request, what string, err error) {
	if status, msg, ok := userError(err); ok {
		h.writeJSON(w, r, status, jsonError{Error: string(accounts.CodeOf(err)), Message: msg})
		return
	}
	if ce := capabilityJSON(err); ce != nil {
		h.writeJSON(w, r, ce.status, jsonError{Error: ce.code, Message: ce.msg})
		return
	}
	h.log.ErrorContext(r.Context(), "web: "+what, "err", err)
	h.writeJSON(w, r, http.StatusInternalServerError, jsonError{Error: "internal_error", Message: "Something went wrong on our side. Please try again."})
}

func (h *Handler) passkeyLoginOptions(w http.ResponseWriter, r *http.Request) {
	c, err := h.opts.Accounts.SecondFactors.BeginPasskeyLogin(r.Context())
	if err != nil {
		h.jsonFail(w, r, "passkey login options", err)
		return
	}
	h.writeJSON(w, r, http.StatusOK, c)
}

// passkeyLogin signs in with a passkey instead of a password (the sign-in
// page and the OAuth sign-in page use it; the latter sends the browser
// back to the authorization request, which now finds the session).
func (h *Handler) passkeyLogin(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Token      string          `json:"token"`
		Credential json.RawMessage `json:"credential"`
		Redirect   string          `json:"redirect"`
	}
	if !h.readJSON(w, r, &in) {
		return
	}
	u, err := h.opts.Accounts.SecondFactors.FinishPasskeyLogin(r.Context(), in.Token, in.Credential)
	if err == nil {
		_, err = h.opts.Accounts.Credentials.StartSession(w, r, u, false)
	}
	if err != nil {
		h.audit(r, audit.CategoryAuth, "login_passkey", audit.ResultFailure, factorReason(err), nil)
		h.jsonFail(w, r, "passkey login", err)
		return
	}
	h.audit(r, audit.CategoryAuth, "login_passkey", audit.ResultSuccess, "", &u)
	next := h.prefix + pathAccount
	if in.Redirect != "" && SafeRedirectPath(in.Redirect) == in.Redirect {
		next = in.Redirect
	}
	h.writeJSON(w, r, http.StatusOK, map[string]string{"redirect": next})
}

func (h *Handler) pendingPasskeyOptions(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Pending string `json:"pending"`
	}
	if !h.readJSON(w, r, &in) {
		return
	}
	c, err := h.opts.Accounts.SecondFactors.BeginPendingPasskey(r.Context(), in.Pending)
	if err != nil {
		h.jsonFail(w, r, "passkey step options", err)
		return
	}
	h.writeJSON(w, r, http.StatusOK, c)
}

func (h *Handler) pendingPasskey(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Pending    string          `json:"pending"`
		Token      string          `json:"token"`
		Credential json.RawMessage `json:"credential"`
		Redirect   string          `json:"redirect"`
	}
	if !h.readJSON(w, r, &in) {
		return
	}
	f := secondFactorForm{Pending: in.Pending}
	if status := h.allowSecondFactor(w, r, &f); status != 0 {
		h.writeJSON(w, r, status, jsonError{Error: "second_factor_failed", Message: f.Error})
		return
	}
	p, err := h.opts.Accounts.SecondFactors.CompletePendingLoginPasskey(r.Context(), in.Pending, in.Token, in.Credential)
	if _, status := h.finishSecondFactor(w, r, p, err, &f, "passkey"); status != 0 {
		h.writeJSON(w, r, status, jsonError{Error: "second_factor_failed", Message: f.Error})
		return
	}
	next := h.prefix + pathAccount
	if in.Redirect != "" && SafeRedirectPath(in.Redirect) == in.Redirect {
		next = in.Redirect
	}
	h.writeJSON(w, r, http.StatusOK, map[string]string{"redirect": next})
}

// ---- the security page ----

func (h *Handler) security(w http.ResponseWriter, r *http.Request) {
	h.renderSecurity(w, r, http.StatusOK, securityView{})
}

func (h *Handler) renderSecurity(w http.ResponseWriter, r *http.Request, status int, v securityView) {
	if err := h.invoke(r, "accountFactors", struct{}{}, &v.Factors); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	if !v.Factors.TOTP && v.Factors.TOTPPending {
		if e, err := h.opts.Accounts.SecondFactors.PendingTOTP(r.Context(), PrincipalFrom(r.Context()).Session.User); err == nil {
			v.Enrolment = &e
		}
	}
	if h.opts.Registry.Has("workspaceKeyListOwn") {
		var out workspaces.OwnKeysOutput
		if err := h.invoke(r, "workspaceKeyListOwn", struct{}{}, &out); err != nil {
			h.renderCapabilityError(w, r, err)
			return
		}
		v.Keys, v.ShowKeys = out.Keys, true
	}
	if h.opts.Registry.Has("identityList") {
		var out federation.IdentityListOutput
		if err := h.invoke(r, "identityList", struct{}{}, &out); err != nil {
			h.renderCapabilityError(w, r, err)
			return
		}
		v.Identities, v.ShowIdentities = out.Identities, h.externalOn() || len(out.Identities) > 0
		v.LinkButtons = h.externalButtons("")
	}
	p := h.withNotice(r, h.page(r, "Sign-in security"))
	p.Script = true
	h.render(w, r, status, securityPage(p, v))
}

// totpQR serves the QR code of the pending authenticator-app set-up, from
// this origin (the policy allows images from 'self' only).
func (h *Handler) totpQR(w http.ResponseWriter, r *http.Request) {
	e, err := h.opts.Accounts.SecondFactors.PendingTOTP(r.Context(), PrincipalFrom(r.Context()).Session.User)
	if err != nil {
		h.notFound(w, r)
		return
	}
	img, err := e.QRCodePNG(240)
	if err != nil {
		h.internalError(w, r, "totp qr", err)
		return
	}
	h.setSecurityHeaders(w.Header(), r)
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(img)))
	_, _ = w.Write(img)
}

// factorAction runs a factor capability from a form and audits it.
func (h *Handler) factorAction(w http.ResponseWriter, r *http.Request, name, action string, in, out any) bool {
	p := PrincipalFrom(r.Context())
	err := h.invoke(r, name, in, out)
	h.audit(r, audit.CategoryAccount, action, resultOf(err), factorReason(err), &p.Session.User)
	if err == nil {
		return true
	}
	if _, msg, ok := userError(err); ok {
		if errors.Is(err, accounts.ErrInvalidCredentials) {
			msg = "Your current password is not correct."
		}
		h.renderSecurity(w, r, statusOf(err), securityView{Error: msg})
		return false
	}
	if status, ok := factorProofStatus(err); ok {
		h.renderSecurity(w, r, status, securityView{Error: accounts.MessageOf(err)})
		return false
	}
	h.renderCapabilityError(w, r, err)
	return false
}

// factorProofStatus is the status of a refused second factor (a wrong or
// used code, a passkey that did not verify, a proof that was asked for and
// missing), answered on the page that asked for it.
func factorProofStatus(err error) (int, bool) {
	switch accounts.CodeOf(err) {
	case accounts.CodeSecondFactorInvalid, accounts.CodePasskeyInvalid, accounts.CodeFactorProofRequired:
		return http.StatusUnauthorized, true
	}
	return 0, false
}

// passwordInput reads the current password and a factor proof from a
// posted form: code, or passkeyToken with passkeyCredential (the
// assertion's JSON, which the passkey script puts in a hidden field).
func passwordInput(r *http.Request) accounts.PasswordInput {
	in := accounts.PasswordInput{Password: r.PostFormValue("password"), Code: strings.TrimSpace(r.PostFormValue("code"))}
	in.PasskeyToken, in.PasskeyCredential = passkeyProofOf(r)
	return in
}

// passkeyProofOf reads the passkey proof fields of a posted form. An
// unreadable assertion is kept as an empty one (it does not verify).
func passkeyProofOf(r *http.Request) (string, map[string]any) {
	token := strings.TrimSpace(r.PostFormValue("passkeyToken"))
	if token == "" {
		return "", nil
	}
	cred := map[string]any{}
	if raw := r.PostFormValue("passkeyCredential"); len(raw) <= maxPasskeyJSONBody {
		_ = json.Unmarshal([]byte(raw), &cred)
	}
	return token, cred
}

// allowFactorCode counts a second-factor code typed for an action of the
// signed-in person in the account's bucket of second-factor attempts (the
// one pending sign-ins count in): whoever holds a session and the
// password must not guess the app's codes from many addresses. It returns
// 0 when the action may go on (always when no code was given), else the
// status (429, or 503 when the limiter fails: fail closed) with a message,
// and sets Retry-After.
func (h *Handler) allowFactorCode(w http.ResponseWriter, r *http.Request, code string) (int, string) {
	if code == "" {
		return 0, ""
	}
	p := PrincipalFrom(r.Context())
	d, err := h.limiter.Allow(r.Context(), secondFactorBucketPrefix+strconv.FormatInt(p.Session.User.ID, 10),
		Limit{Requests: SecondFactorAccountRequests, Window: SecondFactorAccountWindow})
	if err != nil {
		h.log.ErrorContext(r.Context(), "web: second-factor rate limit check failed", "err", err)
		w.Header().Set("Retry-After", "5")
		return http.StatusServiceUnavailable, "The service is briefly unavailable. Please try again in a moment."
	}
	if !d.Allowed {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(d.RetryAfter.Seconds())), 10))
		h.audit(r, audit.CategoryAccount, "second_factor_proof", audit.ResultFailure, "account_rate_limited", &p.Session.User)
		return http.StatusTooManyRequests, secondFactorLockedMessage
	}
	return 0, ""
}

// passkeyProofOptions starts a passkey assertion that proves the factor to
// an action of the signed-in person (accountPasskeyProofBegin).
func (h *Handler) passkeyProofOptions(w http.ResponseWriter, r *http.Request) {
	var c accounts.PasskeyCeremony
	if err := h.invoke(r, "accountPasskeyProofBegin", struct{}{}, &c); err != nil {
		h.jsonFail(w, r, "passkey proof options", err)
		return
	}
	h.writeJSON(w, r, http.StatusOK, c)
}

// ownWorkspaceKeyRevoke revokes one of the person's workspace API keys
// from the security page.
func (h *Handler) ownWorkspaceKeyRevoke(w http.ResponseWriter, r *http.Request) {
	if !h.opts.Registry.Has("workspaceKeyRevoke") {
		h.notFound(w, r)
		return
	}
	if !h.parseForm(w, r) {
		return
	}
	kid, err := strconv.ParseInt(r.PathValue("kid"), 10, 64)
	if err != nil || kid <= 0 {
		h.notFound(w, r)
		return
	}
	if err := h.invoke(r, "workspaceKeyRevoke", map[string]any{"workspaceId": r.PostFormValue("workspaceId"), "keyId": kid}, nil); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, pathSecurity+"?notice=workspace-key-revoked")
}

// renewSession gives this browser a new session after a change that ended
// every session issued before it.
func (h *Handler) renewSession(w http.ResponseWriter, r *http.Request) bool {
	p := PrincipalFrom(r.Context())
	u, err := h.opts.Accounts.Identity.UserByID(r.Context(), p.Session.User.ID)
	if err == nil {
		_, err = h.opts.Accounts.Credentials.StartSession(w, r, u, p.Session.RememberMe)
	}
	if err != nil {
		h.log.ErrorContext(r.Context(), "web: new session after factor change", "err", err)
		h.redirect(w, r, pathLogin)
		return false
	}
	return true
}

func (h *Handler) totpBegin(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	in := passwordInput(r)
	if status, msg := h.allowFactorCode(w, r, in.Code); status != 0 {
		h.renderSecurity(w, r, status, securityView{Error: msg})
		return
	}
	if h.factorAction(w, r, "accountTOTPBegin", "totp_begin", in, nil) {
		h.redirect(w, r, pathSecurity+"?notice=totp-started")
	}
}

func (h *Handler) totpConfirm(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	var out accounts.RecoveryCodesOutput
	if !h.factorAction(w, r, "accountTOTPConfirm", "totp_enable", accounts.TOTPConfirmInput{Code: r.PostFormValue("code")}, &out) {
		return
	}
	// The recovery codes are shown on this answer only.
	r.URL.RawQuery = "notice=totp-enabled"
	h.renderSecurity(w, r, http.StatusOK, securityView{NewCodes: out.RecoveryCodes})
}

func (h *Handler) totpDisable(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	in := accounts.TOTPDisableInput{Password: r.PostFormValue("password"), Code: r.PostFormValue("code")}
	if status, msg := h.allowFactorCode(w, r, strings.TrimSpace(in.Code)); status != 0 {
		h.renderSecurity(w, r, status, securityView{Error: msg})
		return
	}
	if h.factorAction(w, r, "accountTOTPDisable", "totp_disable", in, nil) && h.renewSession(w, r) {
		h.redirect(w, r, pathSecurity+"?notice=totp-disabled")
	}
}

func (h *Handler) recoveryReset(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	in := passwordInput(r)
	if status, msg := h.allowFactorCode(w, r, in.Code); status != 0 {
		h.renderSecurity(w, r, status, securityView{Error: msg})
		return
	}
	var out accounts.RecoveryCodesOutput
	if !h.factorAction(w, r, "accountRecoveryCodesReset", "recovery_codes_reset", in, &out) {
		return
	}
	if !h.renewSession(w, r) {
		return
	}
	r.URL.RawQuery = "notice=recovery-reset"
	h.renderSecurity(w, r, http.StatusOK, securityView{NewCodes: out.RecoveryCodes})
}

func (h *Handler) passkeyRegisterOptions(w http.ResponseWriter, r *http.Request) {
	var in accounts.PasswordInput
	if !h.readJSON(w, r, &in) {
		return
	}
	in.Code = strings.TrimSpace(in.Code)
	if status, msg := h.allowFactorCode(w, r, in.Code); status != 0 {
		h.writeJSON(w, r, status, jsonError{Error: "second_factor_failed", Message: msg})
		return
	}
	var c accounts.PasskeyCeremony
	if err := h.invoke(r, "accountPasskeyRegisterBegin", in, &c); err != nil {
		if errors.Is(err, accounts.ErrInvalidCredentials) {
			h.writeJSON(w, r, http.StatusUnauthorized, jsonError{Error: "invalid_credentials", Message: "Your current password is not correct."})
			return
		}
		if status, ok := factorProofStatus(err); ok {
			h.writeJSON(w, r, status, jsonError{Error: string(accounts.CodeOf(err)), Message: accounts.MessageOf(err)})
			return
		}
		h.jsonFail(w, r, "passkey registration options", err)
		return
	}
	h.writeJSON(w, r, http.StatusOK, c)
}

func (h *Handler) passkeyRegister(w http.ResponseWriter, r *http.Request) {
	var in accounts.PasskeyRegisterInput
	if !h.readJSON(w, r, &in) {
		return
	}
	p := PrincipalFrom(r.Context())
	var out accounts.Passkey
	err := h.invoke(r, "accountPasskeyRegister", in, &out)
	h.audit(r, audit.CategoryAccount, "passkey_add", resultOf(err), factorReason(err), &p.Session.User)
	if err != nil {
		h.jsonFail(w, r, "passkey registration", err)
		return
	}
	h.writeJSON(w, r, http.StatusOK, out)
}

func passkeyID(r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	return id, err == nil && id > 0
}

func (h *Handler) passkeyRename(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	id, ok := passkeyID(r)
	if !ok {
		h.notFound(w, r)
		return
	}
	in := accounts.PasskeyRenameInput{ID: id, Name: strings.TrimSpace(r.PostFormValue("name"))}
	if h.factorAction(w, r, "accountPasskeyRename", "passkey_rename", in, nil) {
		h.redirect(w, r, pathSecurity+"?notice=passkey-renamed")
	}
}

func (h *Handler) passkeyRemove(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	id, ok := passkeyID(r)
	if !ok {
		h.notFound(w, r)
		return
	}
	in := accounts.PasskeyRemoveInput{ID: id, Password: r.PostFormValue("password")}
	if h.factorAction(w, r, "accountPasskeyRemove", "passkey_remove", in, nil) && h.renewSession(w, r) {
		h.redirect(w, r, pathSecurity+"?notice=passkey-removed")
	}
}

// requireAdminFactor sends an admin without a second factor to enrolment
// before any admin page answers, when the server requires one
// (accounts.Config.RequireAdminSecondFactor). It fails closed.
func (h *Handler) requireAdminFactor(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.opts.Accounts.SecondFactors.RequiresAdminSecondFactor() {
			next(w, r)
			return
		}
		p := PrincipalFrom(r.Context())
		ok, err := h.opts.Accounts.SecondFactors.AdminHasRequiredFactor(r.Context(), p.Session.User.ID, "")
		if err != nil {
			h.internalError(w, r, "admin second factor", err)
			return
		}
		if !ok {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				h.redirect(w, r, pathSecurity+"?notice="+secondFactorRequiredNotice)
				return
			}
			h.renderError(w, r, http.StatusForbidden, secondFactorRequiredMessage)
			return
		}
		next(w, r)
	})
}
