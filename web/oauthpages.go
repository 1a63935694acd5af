package web

import (
	"errors"
	"net/http"
	"strings"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/oauth"
)

// Handler signs people in and asks for their consent on the OAuth
// authorization endpoint.
var _ oauth.LoginConsent = (*Handler)(nil)

// Login implements oauth.LoginConsent. A signed-in person is returned at
// once. Otherwise a POST carrying email and password is checked like the
// login page (cross-origin protection, the shared credential rate limit)
// and starts a session; anything else gets the login form, posting back to
// the authorization endpoint.
func (h *Handler) Login(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest) (int64, bool) {
	ctx := r.Context()
	if hasSessionCookie(r) {
		sess, err := h.opts.Accounts.Authenticate(ctx, r)
		if err == nil {
			return sess.User.ID, true
		}
		if !errors.Is(err, accounts.ErrNoSession) && !errors.Is(err, accounts.ErrSuspended) && !errors.Is(err, accounts.ErrDeleting) {
			h.internalError(w, r, "oauth login: session", err)
			return 0, false
		}
	}
	f := authForm{Action: req.FormAction, ClientName: req.ClientName, PasskeyNext: req.FormAction}
	csp := authorizePolicy(req.RedirectURI)
	if r.Method == http.MethodPost && r.PostFormValue("pending") != "" {
		return h.oauthSecondFactor(w, r, req, f, csp)
	}
	if r.Method != http.MethodPost || r.PostFormValue("password") == "" {
		h.renderCSP(w, r, http.StatusOK, loginPage(h.loginFramePage(r), f), csp)
		return 0, false
	}
	if err := h.csrf.Check(r); err != nil {
		h.crossOriginDenied(w, r)
		return 0, false
	}
	if !formStorable(r) { // r.PostFormValue parsed the form
		h.renderError(w, r, http.StatusBadRequest, "The form contains characters that are not allowed. Go back and try again.")
		return 0, false
	}
	if !h.allowCredential(w, r) {
		return 0, false
	}
	f.Email = strings.TrimSpace(r.PostFormValue("email"))
	u, ok := h.signIn(w, r, &f)
	if !ok {
		if sf := f.secondFactor; sf != nil {
			sf.Action, sf.ClientName, sf.Next = req.FormAction, req.ClientName, req.FormAction
			h.renderSecondFactor(w, r, http.StatusOK, *sf, csp)
			return 0, false
		}
		h.renderCSP(w, r, f.status(), loginPage(h.loginFramePage(r), f), csp)
		return 0, false
	}
	return u.ID, true
}

// oauthSecondFactor is the second step of a sign-in on the authorization
// endpoint: the code posted with the token of the pending sign-in (checked
// like the password: cross-origin protection, the credential bucket).
func (h *Handler) oauthSecondFactor(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest, f authForm, csp string) (int64, bool) {
	if err := h.csrf.Check(r); err != nil {
		h.crossOriginDenied(w, r)
		return 0, false
	}
	if !formStorable(r) {
		h.renderError(w, r, http.StatusBadRequest, "The form contains characters that are not allowed. Go back and try again.")
		return 0, false
	}
	if !h.allowCredential(w, r) {
		return 0, false
	}
	sf := secondFactorForm{Action: req.FormAction, Pending: r.PostFormValue("pending"), ClientName: req.ClientName, Next: req.FormAction}
	u, status := h.completeSecondFactor(w, r, &sf)
	if status == 0 {
		return u.ID, true
	}
	if sf.Pending == "" {
		f.Error, f.errStatus = sf.Error, status
		h.renderCSP(w, r, status, loginPage(h.loginFramePage(r), f), csp)
		return 0, false
	}
	if pk, err := h.opts.Accounts.FactorsOfPending(r.Context(), sf.Pending); err == nil {
		sf.Passkeys = pk
	}
	h.renderSecondFactor(w, r, status, sf, csp)
	return 0, false
}

// Consent implements oauth.LoginConsent: a cross-origin-checked POST with
// decision=approve or decision=deny answers; anything else shows the
// consent page. The page cannot be framed (frame-ancestors 'none',
// X-Frame-Options DENY).
//
// The sign-in and consent pages are the only ones whose form-action also
// allows the request's redirect URI (see authorizePolicy): their forms post
// here, and the answer redirects the browser to the client.
func (h *Handler) Consent(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest, userID int64) (approved, ok bool) {
	if r.Method == http.MethodPost {
		switch r.PostFormValue("decision") {
		case "approve", "deny":
			if err := h.csrf.Check(r); err != nil {
				h.crossOriginDenied(w, r)
				return false, false
			}
			return r.PostFormValue("decision") == "approve", true
		}
	}
	u, err := h.opts.Accounts.UserByID(r.Context(), userID)
	if err != nil {
		h.internalError(w, r, "oauth consent: load user", err)
		return false, false
	}
	p := h.page(r, "Connect "+req.ClientName)
	p.Viewer = &viewer{Username: u.Username}
	h.renderCSP(w, r, http.StatusOK, consentPage(p, req, u.Username), authorizePolicy(req.RedirectURI))
	return false, false
}
