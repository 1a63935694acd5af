package web

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/mail"
)

// Account page paths.
const (
	pathLogin         = mail.LinkLogin
	pathSignup        = "/signup"
	pathLogout        = "/logout"
	pathVerifyEmail   = mail.LinkVerifyEmail
	pathResetRequest  = "/password-reset"
	pathResetConfirm  = mail.LinkResetConfirm
	pathAccount       = mail.LinkAccount
	pathAccountPass   = "/account/password"
	pathAccountEmail  = "/account/email"
	pathAccountVerify = "/account/verify-email"
	pathConfirmEmail  = mail.LinkConfirmEmail
	pathAccountDelete = "/account/delete"
)

// notices are the messages a redirect can ask a page to show, by code, so
// no text from the URL is ever echoed.
var notices = map[string]string{
	"signed-out":            "You are signed out.",
	"identity-removed":      "The linked identity is removed: it no longer signs in to this account.",
	"password-changed":      "Your password is changed. Every other browser and connected app was signed out.",
	"password-set":          "Your password is set. Sign in with it.",
	"email-change-sent":     "We sent a confirmation link to the new address. Your email changes when you open it.",
	"verify-sent":           "We sent a new verification link.",
	"verified":              "Your email address is verified.",
	"signed-in":             "You are signed in.",
	"role-assigned":         "The role is assigned.",
	"role-removed":          "The role is removed.",
	"suspended":             "The account is suspended. It is refused everywhere until unsuspended.",
	"unsuspended":           "The account is active again.",
	"marked-verified":       "The email address is marked verified.",
	"app-revoked":           "The app is disconnected. Its tokens no longer work.",
	"client_blocked":        "The client is blocked. Its tokens stopped working.",
	"client_unblocked":      "The client is unblocked.",
	"client_host_blocked":   "Every client of that host is blocked. Their tokens stopped working.",
	"client_host_unblocked": "The host is unblocked.",
	"invite_revoked":        "The invite code is revoked.",
	"webhook_deleted":       "The webhook subscription is deleted.",
	"feedback_sent":         "Thank you: your feedback is sent.",
	"feedback_updated":      "The feedback is updated.",

	// Second factors (factors.go).
	"totp-started":             "Scan the code with your authenticator app, then type the code it shows.",
	"totp-enabled":             "The authenticator app is on. Save your recovery codes.",
	"totp-disabled":            "The authenticator app is off. Every other browser and connected app was signed out.",
	"recovery-reset":           "New recovery codes are made; the old ones no longer work. Every other browser and connected app was signed out.",
	"passkey-added":            "The passkey is added.",
	"passkey-renamed":          "The passkey is renamed.",
	"passkey-removed":          "The passkey is removed. Every other browser and connected app was signed out.",
	"workspace-key-revoked":    "The workspace API key is revoked. It no longer works.",
	secondFactorRequiredNotice: secondFactorRequiredMessage,

	// Username and former addresses (account_identity.go).
	"username-changed":   "Your username is changed. The previous one stays held for your account for a while.",
	"username-unchanged": "That is already your username.",
	"release-sent":       "We sent a link to that address. The address is released when you open it.",
}

func (h *Handler) withNotice(r *http.Request, p page) page {
	p.Notice = notices[r.URL.Query().Get("notice")]
	return p
}

// redirect answers a form post with 303 to a path on this site.
func (h *Handler) redirect(w http.ResponseWriter, r *http.Request, path string) {
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, h.prefix+path, http.StatusSeeOther)
}

// parseForm parses a posted form; on failure it answers 400 and returns
// false.
func (h *Handler) parseForm(w http.ResponseWriter, r *http.Request) bool {
	if err := r.ParseForm(); err != nil {
		h.renderError(w, r, http.StatusBadRequest, "The form could not be read. Go back and try again.")
		return false
	}
	if !formStorable(r) {
		h.renderError(w, r, http.StatusBadRequest, "The form contains characters that are not allowed. Go back and try again.")
		return false
	}
	return true
}

// formStorable reports whether every field of r's parsed form is valid
// UTF-8 without NUL bytes. No field of any form takes those, and neither
// database stores them in text (PostgreSQL refuses them; SQLite cuts the
// statement): forms are refused with 400 rather than failing with a 500.
func formStorable(r *http.Request) bool {
	for _, vs := range r.Form {
		for _, v := range vs {
			if !textStorable(v) {
				return false
			}
		}
	}
	return true
}

// textStorable reports whether v is valid UTF-8 without NUL bytes: text
// both databases can store and compare.
func textStorable(v string) bool {
	return utf8.ValidString(v) && !strings.ContainsRune(v, 0)
}

// internalError logs err and answers 500 without detail.
func (h *Handler) internalError(w http.ResponseWriter, r *http.Request, what string, err error) {
	h.log.ErrorContext(r.Context(), "web: "+what, "err", err)
	h.renderError(w, r, http.StatusInternalServerError, "Something went wrong on our side. Please try again.")
}

// userError maps an accounts domain error that a page shows to the
// person (userErrors) to a status and a message fit for them; ok is false
// for other errors. The status is the one capabilities' table gives the
// error's capabilities code (accounts.CapabilityCode, then
// capabilities.HTTPStatus), unless the entry names a more exact one.
func userError(err error) (status int, msg string, ok bool) {
	code := accounts.CodeOf(err)
	m, ok := userErrors[code]
	if !ok {
		return 0, "", false
	}
	status = m.status
	if status == 0 {
		cc, mapped := accounts.CapabilityCode(code)
		if !mapped {
			return 0, "", false
		}
		status = capabilities.HTTPStatus(cc)
	}
	if m.msg == "" {
		return status, domainMessage(err), true
	}
	return status, m.msg, true
}

// userErrors are the accounts errors the account pages show to the
// person, with the message when it is not the domain's own. Their status
// comes from capabilities' one table (userError); status is set only where
// a page says it more exactly than the shared codes: 422 for a field the
// person typed (capabilities: invalid input, 400), 401 for a wrong
// password (invalid input), and 403 where the person's own account or the
// server's settings refuse (capabilities: conflict, 409).
var userErrors = map[accounts.Code]struct {
	status int
	msg    string
}{
	accounts.CodeInvalidEmail:       {http.StatusUnprocessableEntity, ""},
	accounts.CodeInvalidUsername:    {http.StatusUnprocessableEntity, ""},
	accounts.CodeUsernameReserved:   {http.StatusUnprocessableEntity, ""},
	accounts.CodeWeakPassword:       {http.StatusUnprocessableEntity, ""}, // the policy's reason
	accounts.CodeUnknownRole:        {http.StatusUnprocessableEntity, ""},
	accounts.CodeUsernameTaken:      {},
	accounts.CodeEmailTaken:         {},
	accounts.CodeEmailClaimed:       {},
	accounts.CodeLastAdmin:          {},
	accounts.CodeAdminRoleReserved:  {},
	accounts.CodeInvalidCredentials: {http.StatusUnauthorized, ""},
	accounts.CodeSuspended:          {},
	accounts.CodeDeleting:           {http.StatusForbidden, ""},
	accounts.CodeEmailUnverified:    {http.StatusForbidden, ""},
	accounts.CodeNotFound:           {},
	accounts.CodeInvalidToken:       {},
	accounts.CodeInviteInvalid:      {0, "That invite code is unknown, already used or expired."},
	accounts.CodeSignupClosed:       {http.StatusForbidden, "Sign-up is closed on this server."},
}

// domainMessage returns the sentence of the accounts error inside err
// (accounts wraps its domain errors with a lowercase prefix).
func domainMessage(err error) string {
	if msg := accounts.MessageOf(err); msg != "" {
		return msg
	}
	return "That did not work."
}

func (h *Handler) minPassword() string { return strconv.Itoa(h.opts.MinPasswordLength) }

// ---- sign up ----

// signupClosed answers the sign-up pages when the operator closed sign-up.
func (h *Handler) signupClosed(w http.ResponseWriter, r *http.Request) bool {
	if h.opts.Accounts.Identity.SignupMode() != accounts.SignupClosed {
		return false
	}
	h.renderError(w, r, http.StatusForbidden, "Sign-up is closed on this server. Ask its administrator for an account.")
	return true
}

func (h *Handler) signupForm(w http.ResponseWriter, r *http.Request) {
	if h.signupClosed(w, r) {
		return
	}
	h.render(w, r, http.StatusOK, signupPage(h.page(r, "Create an account"), authForm{MinPassword: h.minPassword(),
		Invite: h.opts.Accounts.Identity.SignupMode() == accounts.SignupInvite, InviteCode: r.URL.Query().Get("invite"), External: h.signupExternalButtons(r.URL.Query().Get("invite"))}))
}

func (h *Handler) signup(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	if h.signupClosed(w, r) {
		return
	}
	f := authForm{Email: strings.TrimSpace(r.PostFormValue("email")), Username: strings.TrimSpace(r.PostFormValue("username")), MinPassword: h.minPassword(),
		Invite: h.opts.Accounts.Identity.SignupMode() == accounts.SignupInvite, InviteCode: strings.TrimSpace(r.PostFormValue("invite"))}
	u, err := h.opts.Accounts.Identity.Signup(r.Context(), accounts.SignupInput{Email: f.Email, Username: f.Username, Password: r.PostFormValue("password"), InviteCode: f.InviteCode})
	switch {
	case err == nil:
		h.audit(r, audit.CategoryAuth, "signup", audit.ResultSuccess, "", &u)
		h.sendVerification(r.Context(), u.ID, u.Email)
	case errors.Is(err, accounts.ErrEmailTaken), errors.Is(err, accounts.ErrEmailClaimed):
		h.audit(r, audit.CategoryAuth, "signup", audit.ResultFailure, auditReason(err), nil)
		// Answer exactly as for a new account (the password was hashed
		// either way, and a mail is queued either way): signup does not
		// reveal which addresses are registered. The owner of the address
		// is told someone tried.
		h.sendSignupAttempt(r.Context(), f.Email)
	default:
		status, msg, ok := userError(err)
		if !ok {
			h.internalError(w, r, "signup", err)
			return
		}
		f.Error = msg
		h.audit(r, audit.CategoryAuth, "signup", audit.ResultFailure, auditReason(err), nil)
		h.render(w, r, status, signupPage(h.page(r, "Create an account"), f))
		return
	}
	h.render(w, r, http.StatusOK, signupSentPage(h.page(r, "Check your email"), "We sent a link to "+f.Email+" to verify the address. Open it, then sign in."))
}

// sendSignupAttempt tells the owner of a registered address that someone
// tried to open an account with it.
func (h *Handler) sendSignupAttempt(ctx context.Context, rawEmail string) {
	email, err := accounts.NormalizeEmail(rawEmail)
	if err != nil {
		return
	}
	h.accountMail.MailSignupAttempt(ctx, email)
}

// sendVerification issues a verification token for userID's email and
// queues the link. Failures are logged: the person can ask for a new link
// from the account page.
func (h *Handler) sendVerification(ctx context.Context, userID int64, email string) {
	_, err := h.issueTokenMail(ctx, userID, purposeVerifyEmail, email, "", VerifyEmailTTL, func(token string) Message {
		return h.accountMail.VerificationMessage(email, token)
	})
	if err != nil {
		h.log.ErrorContext(ctx, "web: verification token", "err", err)
	}
}

// ---- sign in and out ----

func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	if PrincipalFrom(r.Context()) != nil {
		h.redirect(w, r, SafeRedirectPath(r.URL.Query().Get("redirectTo")))
		return
	}
	f := authForm{Action: h.prefix + pathLogin, RedirectTo: redirectParam(r.URL.Query().Get("redirectTo"))}
	f.External = h.externalButtons(f.RedirectTo)
	h.render(w, r, http.StatusOK, loginPage(h.withNotice(r, h.loginFramePage(r)), f))
}

// redirectParam keeps a redirectTo value only when it is a local path.
func redirectParam(s string) string {
	if s == "" || SafeRedirectPath(s) != s {
		return ""
	}
	return s
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	f := authForm{Action: h.prefix + pathLogin, Email: strings.TrimSpace(r.PostFormValue("email")), RedirectTo: redirectParam(r.PostFormValue("redirectTo"))}
	f.resumeDeletion = h.opts.Lifecycle != nil
	f.External = h.externalButtons(f.RedirectTo)
	if _, ok := h.signIn(w, r, &f); !ok {
		if f.deletionResumed {
			h.redirect(w, r, pathAccountDelete)
			return
		}
		if sf := f.secondFactor; sf != nil {
			sf.Action, sf.RedirectTo, sf.Next = h.prefix+pathLogin2FA, f.RedirectTo, h.loginTarget(f.RedirectTo)
			h.renderSecondFactor(w, r, http.StatusOK, *sf, ContentSecurityPolicy)
			return
		}
		h.render(w, r, f.status(), loginPage(h.loginFramePage(r), f))
		return
	}
	target := pathAccount
	if f.RedirectTo != "" {
		target = strings.TrimPrefix(f.RedirectTo, h.prefix)
	}
	h.redirect(w, r, target)
}

// signIn checks the posted credentials and starts a session. On failure
// it fills f.Error (and the status through f) and returns false; an
// internal failure is logged and reported generically.
func (h *Handler) signIn(w http.ResponseWriter, r *http.Request, f *authForm) (accounts.User, bool) {
	u, err := h.opts.Accounts.Credentials.Login(r.Context(), f.Email, r.PostFormValue("password"))
	if f.resumeDeletion && errors.Is(err, accounts.ErrDeleting) && u.ID != 0 {
		// The deletion of this account started but did not finish: a
		// session good only for the deletion page lets the person see that
		// and retry it.
		_, serr := h.opts.Accounts.Credentials.StartDeletingSession(w, r, u)
		if serr == nil {
			h.audit(r, audit.CategoryAuth, "login", audit.ResultSuccess, "deleting", &u)
			f.deletionResumed = true
			return accounts.User{}, false
		}
		h.log.ErrorContext(r.Context(), "web: start deleting session", "err", serr)
	}
	if err == nil {
		// A second factor, when the account has one, comes before any
		// session: the password's success is recorded server-side only.
		var sf *secondFactorForm
		if sf, err = h.beginSecondFactor(r, u, r.PostFormValue("remember") == "1"); err == nil && sf != nil {
			h.audit(r, audit.CategoryAuth, "login_password", audit.ResultSuccess, "second_factor_required", &u)
			f.secondFactor = sf
			return accounts.User{}, false
		}
	}
	if err == nil {
		if _, err = h.opts.Accounts.Credentials.StartSession(w, r, u, r.PostFormValue("remember") == "1"); err == nil {
			h.audit(r, audit.CategoryAuth, "login", audit.ResultSuccess, "", &u)
			return u, true
		}
	}
	if u.ID != 0 {
		h.audit(r, audit.CategoryAuth, "login", audit.ResultFailure, auditReason(err), &u)
	} else {
		h.audit(r, audit.CategoryAuth, "login", audit.ResultFailure, auditReason(err), nil)
	}
	if _, msg, ok := userError(err); ok {
		f.Error = msg
		f.errStatus = statusOf(err)
	} else {
		h.log.ErrorContext(r.Context(), "web: sign in", "err", err)
		f.Error = "Something went wrong on our side. Please try again."
		f.errStatus = http.StatusInternalServerError
	}
	return accounts.User{}, false
}

func statusOf(err error) int {
	s, _, _ := userError(err)
	return s
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	h.opts.Accounts.Credentials.EndSession(w, r)
	h.redirect(w, r, pathLogin+"?notice=signed-out")
}

// ---- email verification ----

func (h *Handler) verifyEmailForm(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("token")
	if _, err := h.peekToken(r.Context(), token, purposeVerifyEmail); err != nil {
		h.badLink(w, r, err)
		return
	}
	// Confirming takes a click: mail scanners that open links must not use
	// up the token.
	h.render(w, r, http.StatusOK, confirmTokenPage(h.page(r, "Verify your email"), "Verify your email",
		"Confirm that this address belongs to you.", pathVerifyEmail, token, "Verify my email"))
}

func (h *Handler) verifyEmail(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	ctx := r.Context()
	tok, err := h.consumeToken(ctx, r.PostFormValue("token"), purposeVerifyEmail)
	if err != nil {
		h.badLink(w, r, err)
		return
	}
	u, err := h.opts.Accounts.Identity.UserByID(ctx, tok.UserID)
	if err != nil || u.Email != tok.Email {
		// The account changed its address since the link was sent.
		h.badLink(w, r, errBadToken)
		return
	}
	if _, err := h.opts.Accounts.Identity.MarkEmailVerified(ctx, u.ID); err != nil {
		if status, msg, ok := userError(err); ok {
			h.renderError(w, r, status, msg)
			return
		}
		h.internalError(w, r, "mark email verified", err)
		return
	}
	h.audit(r, audit.CategoryAuth, "verify_email", audit.ResultSuccess, "", &u)
	next, text := pathLogin, "Go to sign in"
	if PrincipalFrom(ctx) != nil {
		next, text = pathAccount, "Go to your account"
	}
	h.render(w, r, http.StatusOK, messagePage(h.page(r, "Email verified"), "Email verified",
		"Thank you: "+u.Email+" is verified.", next, text))
}

// badLink answers a request carrying an unusable token.
func (h *Handler) badLink(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errBadToken) || errors.Is(err, accounts.ErrInvalidToken) {
		h.render(w, r, http.StatusBadRequest, messagePage(h.page(r, "Link expired"), "This link is invalid or has expired",
			"Links work once and only for a limited time. Ask for a new one.", pathLogin, "Go to sign in"))
		return
	}
	h.internalError(w, r, "read mail token", err)
}

// ---- password reset ----

func (h *Handler) resetRequestForm(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusOK, resetRequestPage(h.page(r, "Reset your password"), authForm{}))
}

func (h *Handler) resetRequest(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	ctx := r.Context()
	email := strings.TrimSpace(r.PostFormValue("email"))
	if _, err := accounts.NormalizeEmail(email); err != nil {
		h.render(w, r, http.StatusUnprocessableEntity, resetRequestPage(h.page(r, "Reset your password"), authForm{Email: email, Error: domainMessage(accounts.ErrInvalidEmail)}))
		return
	}
	u, err := h.opts.Accounts.Identity.UserByEmail(ctx, email)
	switch {
	case err == nil && u.CheckActive() == nil:
		h.audit(r, audit.CategoryAuth, "password_reset_request", audit.ResultSuccess, "", &u)
		h.sendReset(ctx, u)
	case err == nil, errors.Is(err, accounts.ErrNotFound):
		// Same answer whether or not the address has an account.
	default:
		h.internalError(w, r, "password reset request", err)
		return
	}
	h.render(w, r, http.StatusOK, checkInboxPage(h.page(r, "Check your email"), "Check your email",
		"If an account uses "+email+", we sent it a link to choose a new password. The link works for one hour."))
}

// sendReset mails u a password-reset link. The link carries an accounts
// password-setup token (which sets the password and ends every session
// and grant), limited here to ResetPasswordTTL.
func (h *Handler) sendReset(ctx context.Context, u accounts.User) {
	setup, err := h.opts.Accounts.Credentials.NewPasswordSetupToken(ctx, u.ID)
	if err != nil {
		h.log.ErrorContext(ctx, "web: reset token", "err", err)
		return
	}
	_, err = h.issueTokenMail(ctx, u.ID, purposeResetPassword, u.Email, setup, ResetPasswordTTL, func(token string) Message {
		return h.accountMail.ResetMessage(u, token)
	})
	if err != nil {
		h.log.ErrorContext(ctx, "web: reset token", "err", err)
	}
}

func (h *Handler) resetConfirmForm(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("token")
	if _, err := h.peekToken(r.Context(), token, purposeResetPassword); err != nil {
		h.badLink(w, r, err)
		return
	}
	f := authForm{Token: token, Action: h.prefix + pathResetConfirm, MinPassword: h.minPassword()}
	h.render(w, r, http.StatusOK, newPasswordPage(h.page(r, "Choose a new password"), f))
}

func (h *Handler) resetConfirm(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	ctx := r.Context()
	token := r.PostFormValue("token")
	tok, err := h.peekToken(ctx, token, purposeResetPassword)
	if err != nil {
		h.badLink(w, r, err)
		return
	}
	h.setPassword(w, r, token, "Choose a new password", pathResetConfirm, func() {
		if err := h.retireTokens(ctx, tok.UserID, purposeResetPassword); err != nil {
			h.log.ErrorContext(ctx, "web: retire used reset tokens", "err", err)
		}
	})
}

// passwordSetupForm and passwordSetup serve the link an operator hands to a
// person whose account was created without a password.
func (h *Handler) passwordSetupForm(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("token")
	if h.expiredResetToken(r.Context(), token) {
		h.badLink(w, r, errBadToken)
		return
	}
	f := authForm{Token: token, Action: h.prefix + accounts.PasswordSetupPath, MinPassword: h.minPassword()}
	h.render(w, r, http.StatusOK, newPasswordPage(h.page(r, "Choose your password"), f))
}

func (h *Handler) passwordSetup(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	token := r.PostFormValue("token")
	if h.expiredResetToken(r.Context(), token) {
		h.badLink(w, r, errBadToken)
		return
	}
	h.setPassword(w, r, token, "Choose your password", accounts.PasswordSetupPath, nil)
}

// expiredResetToken reports whether accounts refuses token as a reset
// link (see accounts.Credentials.CheckResetLink). It fails closed.
func (h *Handler) expiredResetToken(ctx context.Context, token string) bool {
	return h.opts.Accounts.Credentials.CheckResetLink(ctx, token) != nil
}

// setPassword uses a password-setup token to set the posted password. A
// refused password keeps the token usable and shows the form again.
func (h *Handler) setPassword(w http.ResponseWriter, r *http.Request, token, title, action string, done func()) {
	u, cleared, err := h.opts.Accounts.Credentials.ResetPasswordWithToken(r.Context(), token, r.PostFormValue("password"))
	if err == nil && cleared {
		h.audit(r, audit.CategoryAccount, "factors_cleared", audit.ResultSuccess, "password_reset", &u)
		h.accountMail.FactorChanged(r.Context(), u, accounts.FactorsClearedByPasswordReset)
	}
	if err == nil {
		h.audit(r, audit.CategoryAuth, "password_set", audit.ResultSuccess, action, &u)
	} else {
		h.audit(r, audit.CategoryAuth, "password_set", audit.ResultFailure, auditReason(err), nil)
	}
	if err != nil {
		if errors.Is(err, accounts.ErrInvalidToken) {
			h.badLink(w, r, err)
			return
		}
		status, msg, ok := userError(err)
		if !ok {
			h.internalError(w, r, "set password", err)
			return
		}
		f := authForm{Token: token, Action: h.prefix + action, MinPassword: h.minPassword(), Error: msg}
		h.render(w, r, status, newPasswordPage(h.page(r, title), f))
		return
	}
	if done != nil {
		done()
	}
	h.opts.Accounts.Credentials.EndSession(w, r)
	h.redirect(w, r, pathLogin+"?notice=password-set")
}

// ---- account home ----

func (h *Handler) account(w http.ResponseWriter, r *http.Request) {
	h.renderAccount(w, r, http.StatusOK, accountView{})
}

func (h *Handler) renderAccount(w http.ResponseWriter, r *http.Request, status int, v accountView) {
	p := PrincipalFrom(r.Context())
	v.User = p.Session.User
	v.Roles = p.Grants.Roles
	v.MinPassword = h.minPassword()
	claims, err := h.opts.Accounts.Identity.EmailClaims(r.Context(), v.User.ID)
	if err != nil {
		h.log.ErrorContext(r.Context(), "web: email claims", "err", err)
	}
	for _, c := range claims {
		if c != v.User.Email {
			v.FormerEmails = append(v.FormerEmails, c)
		}
	}
	slices.Sort(v.FormerEmails)
	holds, err := h.opts.Accounts.Identity.UsernameHolds(r.Context(), v.User.ID)
	if err != nil {
		h.log.ErrorContext(r.Context(), "web: username holds", "err", err)
	}
	for name, until := range holds {
		v.HeldUsernames = append(v.HeldUsernames, name+" (until "+until.Format("2006-01-02")+")")
	}
	slices.Sort(v.HeldUsernames)
	v.UsernameRules = usernameRules(h.opts.Accounts.Identity.UsernameRules())
	if next, err := h.opts.Accounts.Identity.NextUsernameChange(r.Context(), v.User.ID); err != nil {
		h.log.ErrorContext(r.Context(), "web: next username change", "err", err)
	} else if !next.IsZero() {
		v.NextUsernameChange = next.Format("2006-01-02 15:04 UTC")
	}
	h.render(w, r, status, accountPage(h.withNotice(r, h.page(r, "Your account")), v))
}

func (h *Handler) changePassword(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	p := PrincipalFrom(r.Context())
	err := h.invoke(r, "accountPasswordChange", accounts.PasswordChangeInput{Current: r.PostFormValue("current"), New: r.PostFormValue("next")}, nil)
	h.audit(r, audit.CategoryAuth, "password_change", resultOf(err), auditReason(err), &p.Session.User)
	if err != nil {
		status, msg, ok := userError(err)
		if !ok {
			// A refusal of the capability's own (its input's schema) is
			// the form's to show, with the status every form gives it.
			h.accountFormFailed(w, r, err, func(v *accountView, msg string) { v.PasswordError = msg })
			return
		}
		if errors.Is(err, accounts.ErrInvalidCredentials) {
			msg = "Your current password is not correct."
		}
		h.renderAccount(w, r, status, accountView{PasswordError: msg})
		return
	}
	// Every session issued before the change is dead, this one included:
	// give this browser a new one (the account now carries the change's
	// time).
	u, err := h.opts.Accounts.Identity.UserByID(r.Context(), p.Session.User.ID)
	if err == nil {
		_, err = h.opts.Accounts.Credentials.StartSession(w, r, u, p.Session.RememberMe)
	}
	if err != nil {
		h.log.ErrorContext(r.Context(), "web: new session after password change", "err", err)
		h.redirect(w, r, pathLogin+"?notice=password-set")
		return
	}
	h.redirect(w, r, pathAccount+"?notice=password-changed")
}

// changeEmail asks for an email change. It takes the current password, and
// counts in the credential bucket (it is routed through LimitCredentials).
// The address changes only when the link mailed to the new address is
// opened, so the answer is the same whether or not the new address
// belongs to another account: a link is mailed to a free address, a notice
// to a taken one, and the current address is told either way.
func (h *Handler) changeEmail(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	ctx := r.Context()
	p := PrincipalFrom(ctx)
	cur := p.Session.User
	fail := func(err error) {
		h.audit(r, audit.CategoryAccount, "email_change_request", audit.ResultFailure, auditReason(err), &cur)
		status, msg, ok := userError(err)
		if !ok {
			h.accountFormFailed(w, r, err, func(v *accountView, msg string) { v.EmailError = msg })
			return
		}
		if errors.Is(err, accounts.ErrInvalidCredentials) {
			msg = "Your current password is not correct."
		}
		h.renderAccount(w, r, status, accountView{EmailError: msg})
	}
	err := h.invoke(r, "accountEmailChange", accounts.EmailChangeInput{Password: r.PostFormValue("password"), Email: r.PostFormValue("email")}, nil)
	if err != nil {
		fail(err)
		return
	}
	h.audit(r, audit.CategoryAccount, "email_change_request", audit.ResultSuccess, "", &cur)
	h.redirect(w, r, pathAccount+"?notice=email-change-sent")
}

// confirmEmailForm shows the button that confirms an email change; a
// click is needed so that mail scanners that open links do not use it up.
func (h *Handler) confirmEmailForm(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("token")
	tok, err := h.peekToken(r.Context(), token, purposeChangeEmail)
	if err != nil {
		h.badLink(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, confirmTokenPage(h.page(r, "Confirm your new email"), "Confirm your new email",
		"Move your account to "+tok.Email+".", pathConfirmEmail, token, "Confirm my new email"))
}

// confirmEmail uses an email-change link: the account moves to the new
// address, verified (the link reached it).
func (h *Handler) confirmEmail(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	ctx := r.Context()
	tok, err := h.consumeToken(ctx, r.PostFormValue("token"), purposeChangeEmail)
	if err != nil {
		h.badLink(w, r, err)
		return
	}
	old, err := h.opts.Accounts.Identity.UserByID(ctx, tok.UserID)
	if err != nil {
		h.badLink(w, r, errBadToken)
		return
	}
	u, err := h.opts.Accounts.Identity.ChangeEmail(ctx, tok.UserID, tok.Email)
	if err == nil {
		_, err = h.opts.Accounts.Identity.MarkEmailVerified(ctx, u.ID)
	}
	h.audit(r, audit.CategoryAccount, "email_change", resultOf(err), auditReason(err), &old)
	if err != nil {
		status, msg, ok := userError(err)
		if !ok {
			h.internalError(w, r, "change email", err)
			return
		}
		h.renderError(w, r, status, msg)
		return
	}
	if old.Email != u.Email {
		h.accountMail.MailEmailChanged(ctx, old, u)
	}
	next, text := pathLogin, "Go to sign in"
	if PrincipalFrom(ctx) != nil {
		next, text = pathAccount, "Go to your account"
	}
	h.render(w, r, http.StatusOK, messagePage(h.page(r, "Email changed"), "Email changed",
		"Your account now uses "+u.Email+".", next, text))
}

func (h *Handler) resendVerification(w http.ResponseWriter, r *http.Request) {
	// A failure is logged; the person can ask again.
	if err := h.invoke(r, "accountVerificationResend", struct{}{}, nil); err != nil {
		h.log.ErrorContext(r.Context(), "web: resend verification", "err", err)
	}
	h.redirect(w, r, pathAccount+"?notice=verify-sent")
}
