package web

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/mail"
)

// The account page's identity forms: the username, and the release of a
// former email address.
const (
	pathAccountUsername = "/account/username"
	pathReleaseEmail    = "/account/email/release"
	pathConfirmRelease  = mail.LinkConfirmRelease
)

// accountIdentityRoutes registers the username and email-release routes.
// Every post counts in the credential bucket.
func (h *Handler) accountIdentityRoutes(handle func(string, http.HandlerFunc)) {
	limit := func(fn http.HandlerFunc) http.HandlerFunc { return h.LimitCredentials(fn).ServeHTTP }
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	handle("POST "+pathAccountUsername, limit(user(h.changeUsername)))
	handle("POST "+pathReleaseEmail, limit(user(h.requestEmailRelease)))
	handle("GET "+pathConfirmRelease, h.confirmReleaseForm)
	handle("POST "+pathConfirmRelease, limit(h.confirmRelease))
}

// changeUsername runs accountUsernameChange with the posted name and shows
// the account page again; a refusal is shown on the username form.
func (h *Handler) changeUsername(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	var out accounts.UsernameChangeOutput
	err := h.invoke(r, "accountUsernameChange", accounts.UsernameChangeInput{Username: r.PostFormValue("username")}, &out)
	if err != nil {
		h.accountFormFailed(w, r, err, func(v *accountView, msg string) { v.UsernameError = msg })
		return
	}
	notice := "username-unchanged"
	if out.Changed {
		notice = "username-changed"
	}
	h.redirect(w, r, pathAccount+"?notice="+notice)
}

// requestEmailRelease runs accountEmailClaimRelease for the posted former
// address: a link goes to it.
func (h *Handler) requestEmailRelease(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	err := h.invoke(r, "accountEmailClaimRelease", accounts.EmailClaimReleaseInput{Email: r.PostFormValue("email")}, nil)
	if err != nil {
		h.accountFormFailed(w, r, err, func(v *accountView, msg string) { v.ReleaseError = msg })
		return
	}
	h.redirect(w, r, pathAccount+"?notice=release-sent")
}

// accountFormFailed answers a refused account form: the account page
// again, with the refusal's message on the form set and the form's status
// (formRefusal); an internal failure is a 500 without detail.
func (h *Handler) accountFormFailed(w http.ResponseWriter, r *http.Request, err error, set func(*accountView, string)) {
	status, msg, ok := formRefusal(w, err)
	if !ok {
		h.renderCapabilityError(w, r, err)
		return
	}
	var v accountView
	set(&v, msg)
	h.renderAccount(w, r, status, v)
}

// confirmReleaseForm shows the button that uses a release link: a click
// is needed so that mail scanners that open links do not use it up.
func (h *Handler) confirmReleaseForm(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("token")
	tok, err := h.peekToken(r.Context(), token, accounts.PurposeReleaseEmail)
	if err != nil {
		h.badLink(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, confirmTokenPage(h.page(r, "Release this address"), "Release this address",
		"Stop "+tok.Email+" being claimed by your account. Anyone, you included, can then open an account with it, after verifying it.",
		pathConfirmRelease, token, "Release the address"))
}

// confirmRelease uses a release link: the former address it was mailed to
// is released.
func (h *Handler) confirmRelease(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	ctx := r.Context()
	u, email, err := h.opts.Accounts.Identity.ReleaseEmailWithToken(ctx, r.PostFormValue("token"))
	if err != nil {
		h.audit(r, audit.CategoryAccount, "email_claim_release", audit.ResultFailure, auditReason(err), nil)
		if errors.Is(err, accounts.ErrInvalidToken) {
			h.badLink(w, r, err)
			return
		}
		if status, msg, ok := userError(err); ok {
			h.renderError(w, r, status, msg)
			return
		}
		h.internalError(w, r, "release email", err)
		return
	}
	h.audit(r, audit.CategoryAccount, "email_claim_release", audit.ResultSuccess, "", &u)
	next, text := pathLogin, "Go to sign in"
	if PrincipalFrom(ctx) != nil {
		next, text = pathAccount, "Go to your account"
	}
	h.render(w, r, http.StatusOK, messagePage(h.page(r, "Address released"), "Address released",
		email+" is no longer claimed by your account. An account opened with it verifies it first.", next, text))
}

// auditAccount records an account action of the built-in registry
// (accounts.AccountOptions.Audit), without the client address, which a
// capability call does not carry.
func (h *Handler) auditAccount(ctx context.Context, u accounts.User, action string, ok bool, reason string) {
	if h.opts.Audit == nil {
		return
	}
	e := audit.Event{Category: audit.CategoryAccount, Action: action, Result: audit.ResultSuccess, Reason: reason, UserHash: h.opts.Audit.HashUser(u.StableID)}
	if !ok {
		e.Result = audit.ResultFailure
	}
	_ = h.opts.Audit.Record(ctx, e)
}

// usernameRules is the account page's sentence about username changes.
func usernameRules(cooldown, hold time.Duration) string {
	days := func(d time.Duration) string {
		n := int((d + 12*time.Hour) / (24 * time.Hour))
		if n <= 1 {
			return "a day"
		}
		return strconv.Itoa(n) + " days"
	}
	s := ""
	if hold > 0 {
		s = "Your previous username stays held for your account for " + days(hold) + ", so nobody else can take it. "
	}
	if cooldown > 0 {
		s += "You can change your username once every " + days(cooldown) + "."
	}
	return s
}
