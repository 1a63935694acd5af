package web

import (
	"net/http"

	"github.com/enclave-mcp/enclave/oauth"
)

// PagesForwarder is the OAuth server's login and consent pages
// (oauth.LoginConsent, oauth.ScopedConsent, oauth.ErrorPage) before the
// web shell exists: the shell lists and revokes grants, so it is built
// after the authorization server, which is given the forwarder and
// reaches the shell once Set names it.
type PagesForwarder struct{ h *Handler }

// Set names the shell the pages are forwarded to.
func (f *PagesForwarder) Set(h *Handler) { f.h = h }

// Login forwards oauth.LoginConsent.Login.
func (f *PagesForwarder) Login(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest) (int64, bool) {
	return f.h.Login(w, r, req)
}

// Consent forwards oauth.LoginConsent.Consent.
func (f *PagesForwarder) Consent(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest, userID int64) (bool, bool) {
	return f.h.Consent(w, r, req, userID)
}

// ConsentScopes forwards oauth.ScopedConsent (the admin scope's checkbox).
func (f *PagesForwarder) ConsentScopes(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest, userID int64) ([]string, bool, bool) {
	return f.h.ConsentScopes(w, r, req, userID)
}

// AuthorizeError forwards oauth.ErrorPage: the shell's error page.
func (f *PagesForwarder) AuthorizeError(w http.ResponseWriter, r *http.Request, e *oauth.AuthorizeError) {
	f.h.AuthorizeError(w, r, e)
}
