package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/federation"
)

// Sign-in with external identity providers (package federation).
const (
	pathExternalPrefix = "/auth/external/"
	pathExternalLink   = "/auth/external/link"
	// pathExternalLinkPasskey starts the passkey proof of a held link.
	pathExternalLinkPasskey = "/auth/external/link/passkey/options"
	externalCookie          = "enclave_federation"
	// externalInviteCookie carries the invite code of an external sign-up
	// (--signup invite) from the start to the callback, in this browser.
	externalInviteCookie = "enclave_federation_invite"
	maxInviteCodeLength  = 128
	// ExternalLinkRecentSignIn is how recent a signed-in person's sign-in
	// must be to link a new identity to their account: a stolen session
	// must not add a lasting way in.
	ExternalLinkRecentSignIn = 15 * time.Minute
)

// externalButton is a "Sign in with ..." link.
type externalButton struct {
	Name  string
	Label string
	Href  string
}

// externalLinkView is the page asking a person to prove the account an
// external identity's verified email belongs to.
type externalLinkView struct {
	Provider string
	Email    string
	Token    string
	Error    string
	// Passkeys: the account has passkeys; offer one as the proof.
	Passkeys bool
}

func (h *Handler) externalOn() bool {
	return h.opts.Federation != nil && len(h.opts.Federation.Providers()) > 0
}

func (h *Handler) externalRoutes(handle func(string, http.HandlerFunc)) {
	if !h.externalOn() {
		return
	}
	limit := func(fn http.HandlerFunc) http.HandlerFunc { return h.LimitCredentials(fn).ServeHTTP }
	handle("GET "+pathExternalPrefix+"{name}/start", h.externalStart)
	handle("GET "+pathExternalPrefix+"{name}/callback", limit(h.externalCallback))
	handle("POST "+pathExternalLink, limit(h.externalLink))
	handle("GET "+pathExternalLinkFinish, h.externalLinkFinish)
	handle("POST "+pathExternalLinkPasskey, limit(h.externalLinkPasskeyOptions))
}

// externalButtons returns the buttons of the configured providers, each
// returning to returnTo (a local path with the prefix, or "").
func (h *Handler) externalButtons(returnTo string) []externalButton {
	if !h.externalOn() {
		return nil
	}
	var out []externalButton
	for _, p := range h.opts.Federation.Providers() {
		href := h.prefix + pathExternalPrefix + p.Name + "/start"
		if returnTo != "" && federation.LocalPath(returnTo) {
			href += "?" + url.Values{"redirectTo": {returnTo}}.Encode()
		}
		out = append(out, externalButton{Name: p.Name, Label: p.Label, Href: href})
	}
	return out
}

// signupExternalButtons are the sign-up page's buttons: with sign-up by
// invitation and the page's invite code (an invite link's ?invite=), each
// carries the code to the account the external sign-up opens.
func (h *Handler) signupExternalButtons(invite string) []externalButton {
	buttons := h.externalButtons("")
	invite = strings.TrimSpace(invite)
	if invite == "" || len(invite) > maxInviteCodeLength || h.opts.Accounts.Identity.SignupMode() != accounts.SignupInvite {
		return buttons
	}
	for i := range buttons {
		sep := "?"
		if strings.Contains(buttons[i].Href, "?") {
			sep = "&"
		}
		buttons[i].Href += sep + url.Values{"invite": {invite}}.Encode()
	}
	return buttons
}

// inviteCookie holds value (an invite code) for the external sign-in
// paths; maxAge -1 removes it.
func (h *Handler) inviteCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	c := h.externalCookie(r, value, maxAge)
	c.Name = externalInviteCookie
	return c
}

// externalInvite is the invite code this browser brought to an external
// sign-up, or "".
func externalInvite(r *http.Request) string {
	if c, err := r.Cookie(externalInviteCookie); err == nil && len(c.Value) <= maxInviteCodeLength {
		return c.Value
	}
	return ""
}

func (h *Handler) providerKnown(name string) bool {
	for _, p := range h.opts.Federation.Providers() {
		if p.Name == name {
			return true
		}
	}
	return false
}

func (h *Handler) providerLabel(name string) string {
	for _, p := range h.opts.Federation.Providers() {
		if p.Name == name {
			return p.Label
		}
	}
	return name
}

func (h *Handler) externalCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: externalCookie, Value: value, Path: h.prefix + pathExternalPrefix, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil || strings.HasPrefix(h.opts.BaseURL, "https://")}
}

func externalBinding(r *http.Request) string {
	if c, err := r.Cookie(externalCookie); err == nil && len(c.Value) >= 32 && len(c.Value) <= 128 {
		return c.Value
	}
	return ""
}

// externalStart sends the browser to the provider. It is a link, not a
// form: form-action 'self' would stop a form's redirect to the provider.
// A signed-in person links the identity to their account instead of
// signing in. The state is bound to this browser by a cookie, so a
// started link is useless in another browser.
func (h *Handler) externalStart(w http.ResponseWriter, r *http.Request) {
	// Each start records a state row for StateTTL: a bounded number per
	// client network.
	d, err := h.limiter.Allow(r.Context(), externalStartBucketPrefix+clientBucket(h.ipOf.Addr(r)), externalStartLimit)
	if err != nil {
		h.log.ErrorContext(r.Context(), "web: rate limit check failed", "err", err)
		w.Header().Set("Retry-After", "5")
		h.renderError(w, r, http.StatusServiceUnavailable, "The service is briefly unavailable. Please try again in a moment.")
		return
	}
	if !d.Allowed {
		secs := max(int64(math.Ceil(d.RetryAfter.Seconds())), 1)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		h.renderError(w, r, http.StatusTooManyRequests, fmt.Sprintf("Too many sign-ins started from your network. Try again in %s.", humanSeconds(secs)))
		return
	}
	returnTo := redirectParam(r.URL.Query().Get("redirectTo"))
	var userID int64
	if p := PrincipalFrom(r.Context()); p != nil {
		if !h.providerKnown(r.PathValue("name")) {
			h.notFound(w, r)
			return
		}
		// A link adds a lasting way into the account: only from this
		// server's own pages (the start is a GET any site can send a
		// signed-in browser to, with the provider's session the
		// attacker's), and only soon after the person signed in (a session
		// cookie alone does not add one).
		if !h.sameOriginNavigation(r) {
			h.audit(r, audit.CategoryAuth, "identity_link", audit.ResultFailure, "cross_site", &p.Session.User)
			h.renderError(w, r, http.StatusForbidden, "Linking a sign-in identity starts from the security page of your account. Open it and choose the provider there.")
			return
		}
		if h.opts.Now().Sub(p.Session.IssuedAt) > ExternalLinkRecentSignIn {
			// Linking adds a lasting way in: a session signed in long ago
			// (perhaps left open, perhaps stolen) is not enough.
			h.audit(r, audit.CategoryAuth, "identity_link", audit.ResultFailure, "sign_in_not_recent", &p.Session.User)
			w.Header().Set("Cache-Control", "no-store")
			h.render(w, r, http.StatusForbidden, externalRecentPage(h.page(r, "Sign in again to link"), h.providerLabel(r.PathValue("name")),
				int(ExternalLinkRecentSignIn/time.Minute)))
			return
		}
		userID = p.Session.User.ID
		if returnTo == "" {
			returnTo = h.prefix + pathSecurity
		}
	}
	if returnTo == "" {
		returnTo = h.prefix + pathAccount
	}
	binding := externalBinding(r)
	if binding == "" {
		binding = federation.NewBinding()
	}
	target, err := h.opts.Federation.Begin(r.Context(), r.PathValue("name"), binding, returnTo, userID)
	switch {
	case errors.Is(err, federation.ErrUnknownProvider):
		h.notFound(w, r)
		return
	case err != nil:
		h.log.WarnContext(r.Context(), "web: external sign-in start", "provider", r.PathValue("name"), "err", err)
		h.renderError(w, r, http.StatusBadGateway, "The sign-in provider cannot be reached right now. Try again later, or sign in another way.")
		return
	}
	http.SetCookie(w, h.externalCookie(r, binding, 15*60))
	if invite := strings.TrimSpace(r.URL.Query().Get("invite")); userID == 0 && invite != "" && len(invite) <= maxInviteCodeLength &&
		h.opts.Accounts.Identity.SignupMode() == accounts.SignupInvite {
		http.SetCookie(w, h.inviteCookie(r, url.QueryEscape(invite), 15*60))
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// externalStartLimit bounds the sign-ins one client network starts (each
// keeps a state row until it expires).
var externalStartLimit = Limit{Requests: 30, Window: time.Minute}

const externalStartBucketPrefix = "federation:start:ip:"

// sameOriginNavigation reports whether r comes from one of this server's
// pages: its Fetch Metadata says same-origin or, from a browser that
// sends none, its Referer is on this server.
func (h *Handler) sameOriginNavigation(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	ref, err := url.Parse(r.Referer())
	if err != nil || ref.Host == "" {
		return false
	}
	if base, err := url.Parse(h.opts.BaseURL); err == nil && base.Host != "" {
		return ref.Scheme == base.Scheme && ref.Host == base.Host
	}
	return ref.Host == r.Host
}

// externalError answers a failed external sign-in with the package's
// sentence (never the provider's detail, which is logged).
func (h *Handler) externalError(w http.ResponseWriter, r *http.Request, err error) {
	for _, known := range []error{federation.ErrUnknownProvider, federation.ErrBadState, federation.ErrDenied, federation.ErrUnverifiedEmail,
		federation.ErrNoEmail, federation.ErrLinkedElsewhere} {
		if errors.Is(err, known) {
			status := http.StatusBadRequest
			if errors.Is(err, federation.ErrUnverifiedEmail) || errors.Is(err, federation.ErrLinkedElsewhere) || errors.Is(err, federation.ErrDenied) {
				status = http.StatusForbidden
			}
			h.audit(r, audit.CategoryAuth, "login_external", audit.ResultFailure, auditReason(known), nil)
			h.renderError(w, r, status, known.Error()+".")
			return
		}
	}
	if errors.Is(err, federation.ErrProvider) {
		h.log.WarnContext(r.Context(), "web: external sign-in", "err", err)
		h.audit(r, audit.CategoryAuth, "login_external", audit.ResultFailure, "provider", nil)
		h.renderError(w, r, http.StatusBadGateway, federation.ErrProvider.Error()+".")
		return
	}
	h.internalError(w, r, "external sign-in", err)
}

// externalCallback finishes the provider's answer and applies the linking
// rules: a linked identity signs in (its second factor still applies
// unless the provider is trusted for it and reports one), a signed-in
// person's identity is linked, a verified email of an existing account
// asks for that account's password first, and a new identity opens an
// account when sign-up allows it.
func (h *Handler) externalCallback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	binding := externalBinding(r)
	res, err := h.opts.Federation.Finish(ctx, r.PathValue("name"), binding, r.URL.Query())
	if err != nil {
		h.externalError(w, r, err)
		return
	}
	if res.UserID != 0 {
		// A link is finished only for the person who started it, still
		// signed in on this browser: whoever signed out or in since then,
		// the identity the provider answers with is not theirs to link.
		if p := PrincipalFrom(ctx); p == nil || p.Session.User.ID != res.UserID {
			h.audit(r, audit.CategoryAuth, "identity_link", audit.ResultFailure, "session_changed", &accounts.User{ID: res.UserID})
			h.renderError(w, r, http.StatusForbidden, "This link was started by an account that is no longer signed in on this browser, so nothing was linked. Sign in, then link the identity from the security page.")
			return
		}
	}
	d, err := h.opts.Federation.Resolve(ctx, res)
	if err != nil {
		h.externalError(w, r, err)
		return
	}
	switch d.Outcome {
	case federation.Linked:
		u, _ := h.opts.Accounts.Identity.UserByID(ctx, d.UserID)
		h.audit(r, audit.CategoryAuth, "identity_linked", audit.ResultSuccess, res.Provider, &u)
		http.Redirect(w, r, res.ReturnTo, http.StatusSeeOther)
	case federation.SignIn:
		u, err := h.opts.Accounts.Identity.UserByID(ctx, d.UserID)
		if err != nil {
			h.internalError(w, r, "external sign-in: account", err)
			return
		}
		h.externalSignIn(w, r, u, res.MFA, res.ReturnTo)
	case federation.Prove:
		token, err := h.opts.Federation.HoldLink(ctx, binding, res, d.UserID)
		if err != nil {
			h.internalError(w, r, "external sign-in: hold link", err)
			return
		}
		h.renderExternalLink(w, r, http.StatusOK, externalLinkView{Provider: h.providerLabel(res.Provider), Email: res.Email, Token: token,
			Passkeys: h.hasPasskeys(ctx, d.UserID)})
	case federation.Create:
		invite, _ := url.QueryUnescape(externalInvite(r))
		u, err := h.opts.Accounts.Identity.SignupExternal(ctx, accounts.ExternalSignupInput{Email: res.Email, InviteCode: invite,
			OnCreated: h.opts.Federation.LinkOnCreate(res)})
		switch {
		case errors.Is(err, accounts.ErrSignupClosed):
			h.audit(r, audit.CategoryAuth, "signup_external", audit.ResultFailure, "signup_closed", nil)
			h.renderError(w, r, http.StatusForbidden, "No account here uses this identity, and sign-up is closed on this server. Ask its administrator for an account.")
			return
		case errors.Is(err, accounts.ErrInviteInvalid) && invite != "":
			http.SetCookie(w, h.inviteCookie(r, "", -1))
			h.audit(r, audit.CategoryAuth, "signup_external", audit.ResultFailure, "invite_invalid", nil)
			h.renderError(w, r, http.StatusForbidden, "No account here uses this identity, and the invite code is unknown, already used or expired. Ask for a new invite.")
			return
		case errors.Is(err, accounts.ErrInviteInvalid):
			h.audit(r, audit.CategoryAuth, "signup_external", audit.ResultFailure, "invite_required", nil)
			h.renderError(w, r, http.StatusForbidden, "No account here uses this identity, and sign-up on this server is by invitation. Open your invite link and sign up from its page with this provider, or create your account with the invite code, then link this identity on the security page.")
			return
		case errors.Is(err, accounts.ErrEmailClaimed), errors.Is(err, accounts.ErrEmailTaken):
			h.audit(r, audit.CategoryAuth, "signup_external", audit.ResultFailure, auditReason(err), nil)
			h.renderError(w, r, http.StatusConflict, "This email address belonged to another account here and cannot open a new one yet. Sign in another way.")
			return
		case errors.Is(err, federation.ErrLinkedElsewhere):
			h.externalError(w, r, err)
			return
		case err != nil:
			h.internalError(w, r, "external sign-up", err)
			return
		}
		if invite != "" {
			http.SetCookie(w, h.inviteCookie(r, "", -1))
		}
		h.audit(r, audit.CategoryAuth, "signup_external", audit.ResultSuccess, res.Provider, &u)
		h.externalSignIn(w, r, u, res.MFA, res.ReturnTo)
	default:
		h.internalError(w, r, "external sign-in", errors.New("web: unknown outcome"))
	}
}

// externalSignIn starts the session of u after an external sign-in, or
// asks for the account's second factor first unless mfa (the provider is
// trusted for it and reported one).
func (h *Handler) externalSignIn(w http.ResponseWriter, r *http.Request, u accounts.User, mfa bool, returnTo string) {
	if err := u.CheckActive(); err != nil {
		h.audit(r, audit.CategoryAuth, "login_external", audit.ResultFailure, auditReason(err), &u)
		_, msg, _ := userError(err)
		h.renderError(w, r, statusOf(err), msg)
		return
	}
	if !federation.LocalPath(returnTo) {
		returnTo = h.prefix + pathAccount
	}
	if !mfa {
		sf, err := h.beginSecondFactor(r, u, false)
		if err != nil {
			h.internalError(w, r, "external sign-in: second factor", err)
			return
		}
		if sf != nil {
			h.audit(r, audit.CategoryAuth, "login_external", audit.ResultSuccess, "second_factor_required", &u)
			sf.Action, sf.RedirectTo, sf.Next = h.prefix+pathLogin2FA, returnTo, returnTo
			h.renderSecondFactor(w, r, http.StatusOK, *sf, ContentSecurityPolicy)
			return
		}
	}
	if _, err := h.opts.Accounts.Credentials.StartSession(w, r, u, false); err != nil {
		h.internalError(w, r, "external sign-in: session", err)
		return
	}
	h.audit(r, audit.CategoryAuth, "login_external", audit.ResultSuccess, "", &u)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, returnTo, http.StatusSeeOther)
}

func (h *Handler) renderExternalLink(w http.ResponseWriter, r *http.Request, status int, v externalLinkView) {
	w.Header().Set("Cache-Control", "no-store")
	p := h.page(r, "Link your account")
	p.Script = v.Passkeys
	h.render(w, r, status, externalLinkPage(p, v))
}

// hasPasskeys reports whether the account has passkeys (the link page
// offers one as the proof); a failure to tell offers none.
func (h *Handler) hasPasskeys(ctx context.Context, userID int64) bool {
	keys, err := h.opts.Accounts.SecondFactors.Passkeys(ctx, userID)
	return err == nil && len(keys) > 0
}

// externalLinkPasskeyOptions starts the passkey proof of a held link: an
// assertion limited to the passkeys of the account the link waits for
// (user verification required), for the browser holding the link.
func (h *Handler) externalLinkPasskeyOptions(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Token string `json:"token"`
	}
	if !h.readJSON(w, r, &in) {
		return
	}
	ctx := r.Context()
	pending, err := h.opts.Federation.PeekLink(ctx, externalBinding(r), in.Token)
	if err != nil {
		h.writeJSON(w, r, http.StatusBadRequest, jsonError{Error: "bad_state", Message: federation.ErrBadState.Error() + "."})
		return
	}
	u, err := h.opts.Accounts.Identity.UserByID(ctx, pending.UserID)
	if err != nil {
		h.jsonFail(w, r, "external link: account", err)
		return
	}
	c, err := h.opts.Accounts.SecondFactors.BeginPasskeyProof(ctx, u)
	if err != nil {
		h.jsonFail(w, r, "external link: passkey options", err)
		return
	}
	h.writeJSON(w, r, http.StatusOK, c)
}

// externalLink completes a held link once the person proved the existing
// account with its password or one of its passkeys, then signs them in.
// After the password the account's second factor still applies; a
// passkey (user verification required) is a sign-in of its own, as on the
// sign-in page.
func (h *Handler) externalLink(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	ctx := r.Context()
	binding, token := externalBinding(r), r.PostFormValue("token")
	pending, err := h.opts.Federation.PeekLink(ctx, binding, token)
	if err != nil {
		h.externalError(w, r, err)
		return
	}
	if pk := strings.TrimSpace(r.PostFormValue("passkeyToken")); pk != "" {
		h.externalLinkWithPasskey(w, r, pending, binding, token, pk)
		return
	}
	u, err := h.opts.Accounts.Credentials.VerifyPassword(ctx, pending.UserID, r.PostFormValue("password"))
	if err != nil {
		if errors.Is(err, accounts.ErrInvalidCredentials) {
			h.audit(r, audit.CategoryAuth, "identity_link", audit.ResultFailure, "invalid_credentials", &accounts.User{ID: pending.UserID})
			h.renderExternalLink(w, r, http.StatusUnauthorized, externalLinkView{Provider: h.providerLabel(pending.Provider), Token: token,
				Passkeys: h.hasPasskeys(ctx, pending.UserID), Error: "That password is not this account's. Try again, or sign in another way."})
			return
		}
		h.internalError(w, r, "external link: password", err)
		return
	}
	if err := u.CheckActive(); err != nil { // a suspended or closing account gains no way in
		h.audit(r, audit.CategoryAuth, "identity_link", audit.ResultFailure, auditReason(err), &u)
		_, msg, _ := userError(err)
		h.renderError(w, r, statusOf(err), msg)
		return
	}
	// With a second factor the proof is the password and the second
	// factor: the link is completed after it (externalLinkFinish), never
	// on the password alone.
	sf, err := h.beginSecondFactor(r, u, false)
	if err != nil {
		h.internalError(w, r, "external link: second factor", err)
		return
	}
	if sf != nil {
		finish := h.prefix + pathExternalLinkFinish + "?" + url.Values{"token": {token}}.Encode()
		h.audit(r, audit.CategoryAuth, "identity_link", audit.ResultSuccess, "second_factor_required", &u)
		sf.Action, sf.RedirectTo, sf.Next = h.prefix+pathLogin2FA, finish, finish
		h.renderSecondFactor(w, r, http.StatusOK, *sf, ContentSecurityPolicy)
		return
	}
	h.completeExternalLink(w, r, u, binding, token, false)
}

// externalLinkWithPasskey is externalLink with the assertion of a passkey
// proof ceremony (externalLinkPasskeyOptions) instead of the password.
func (h *Handler) externalLinkWithPasskey(w http.ResponseWriter, r *http.Request, pending *federation.PendingLink, binding, token, ceremony string) {
	ctx := r.Context()
	u, err := h.opts.Accounts.Identity.UserByID(ctx, pending.UserID)
	if err != nil {
		h.internalError(w, r, "external link: account", err)
		return
	}
	var cred json.RawMessage
	if raw := r.PostFormValue("passkeyCredential"); len(raw) <= maxPasskeyJSONBody && json.Valid([]byte(raw)) {
		cred = json.RawMessage(raw)
	}
	if err := h.opts.Accounts.SecondFactors.ProvePasskey(ctx, u, ceremony, cred); err != nil {
		if accounts.CodeOf(err) == accounts.CodePasskeyInvalid {
			h.audit(r, audit.CategoryAuth, "identity_link", audit.ResultFailure, "passkey_invalid", &accounts.User{ID: pending.UserID})
			h.renderExternalLink(w, r, http.StatusUnauthorized, externalLinkView{Provider: h.providerLabel(pending.Provider), Token: token,
				Passkeys: h.hasPasskeys(ctx, pending.UserID), Error: "That passkey could not be verified for this account. Try again, or use the password."})
			return
		}
		if errors.Is(err, accounts.ErrSuspended) || errors.Is(err, accounts.ErrDeleting) {
			h.externalSignIn(w, r, u, true, pending.ReturnTo) // refuses with the account's state
			return
		}
		h.internalError(w, r, "external link: passkey", err)
		return
	}
	h.completeExternalLink(w, r, u, binding, token, true)
}

// completeExternalLink links the held identity of token to u, whom the
// person just proved, and signs them in (mfa: the proof was a passkey).
func (h *Handler) completeExternalLink(w http.ResponseWriter, r *http.Request, u accounts.User, binding, token string, mfa bool) {
	done, err := h.opts.Federation.CompleteLink(r.Context(), binding, token, u.ID)
	if err != nil {
		h.externalError(w, r, err)
		return
	}
	h.audit(r, audit.CategoryAuth, "identity_linked", audit.ResultSuccess, done.Provider, &u)
	h.externalSignIn(w, r, u, mfa, done.ReturnTo)
}

// pathExternalLinkFinish completes a held link after the account's
// second factor (the second step's redirect comes here).
const pathExternalLinkFinish = pathExternalLink + "/finish"

// externalLinkFinish links the held identity of the token once the
// person passed the password and the second factor: the browser (holding
// the binding) is signed in to the held link's account, recently, as
// for a link from the security page.
func (h *Handler) externalLinkFinish(w http.ResponseWriter, r *http.Request) {
	p := PrincipalFrom(r.Context())
	if p == nil || h.opts.Now().Sub(p.Session.IssuedAt) > ExternalLinkRecentSignIn {
		h.externalError(w, r, federation.ErrBadState)
		return
	}
	u := p.Session.User
	done, err := h.opts.Federation.CompleteLink(r.Context(), externalBinding(r), r.URL.Query().Get("token"), u.ID)
	if err != nil {
		h.externalError(w, r, err)
		return
	}
	h.audit(r, audit.CategoryAuth, "identity_linked", audit.ResultSuccess, done.Provider, &u)
	returnTo := done.ReturnTo
	if !federation.LocalPath(returnTo) {
		returnTo = h.prefix + pathAccount
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, returnTo, http.StatusSeeOther)
}

// pathSecurityIdentities is where a linked identity is removed.
const pathSecurityIdentities = "/account/security/identities"

func (h *Handler) identityRoutes(handle func(string, http.HandlerFunc)) {
	if h.opts.Federation == nil {
		return
	}
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	handle("POST "+pathSecurityIdentities+"/{id}/remove", user(h.removeIdentity))
}

// removeIdentity unlinks one of the person's identities (identityUnlink).
func (h *Handler) removeIdentity(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		h.notFound(w, r)
		return
	}
	var out federation.IdentityUnlinkOutput
	if err := h.invoke(r, "identityUnlink", federation.IdentityUnlinkInput{ID: id}, &out); err != nil {
		if status, msg, ok := formRefusal(w, err, capabilities.CodeConflict); ok {
			h.renderSecurity(w, r, status, securityView{Error: msg})
			return
		}
		h.invokeFailed(w, r, "identity unlink", err)
		return
	}
	h.redirect(w, r, pathSecurity+"?notice=identity-removed")
}
