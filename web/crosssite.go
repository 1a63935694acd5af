package web

import (
	"context"
	"net/http"
	"strings"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
)

// Cross-site reads. The session cookie is SameSite=Lax, so a top-level
// navigation from another site (a link, window.location) arrives signed
// in. Forms are refused before any handler runs (the cross-origin
// protection in routes), but a GET page that runs a capability through
// Registry.Invoke would still run it as the signed-in person: counted
// against their quota and audited, although the other site never reads
// the answer. Such pages answer a read the browser marks as coming from
// another site with a small page that offers to continue from this
// origin instead, and run nothing.

// crossSiteRead reports whether r is a read (GET or HEAD) that the
// browser's Fetch Metadata marks as coming from another site: cross-site,
// or same-site (another subdomain is not this origin). same-origin, none
// (a typed address, a bookmark) and a request without the header (an
// older browser, a script) are not.
func crossSiteRead(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	return false
}

// invokingReads are the GET routes whose handlers run a capability: each
// is registered behind sameSiteReads (readGuard, in routes). Mounted GET pages
// (Handler.Mount) are too, since PageContext.Invoke may run one. A GET
// route added with a handler that invokes belongs here: the route walk in
// crosssite_test.go fails otherwise, and Invoke refuses a cross-site read
// that reaches it (invokeRefusedCrossSite) so nothing is spent meanwhile.
var invokingReads = map[string]bool{
	"GET /account/community":            true,
	"GET /account/connections":          true,
	"GET " + pathSecurity:               true,
	"GET /account/feedback":             true,
	"GET /account/export/manifest.json": true,
	"GET " + pathExportJSON:             true,
	"GET /account/mail":                 true,
	"GET /account/mail/thread":          true,
	"GET /account/mail/message":         true,
	"GET /account/mail/html":            true,
	"GET /account/mail/attachment":      true,
	"GET " + remotemcp.PagePath:         true,
	"GET /account/memory":               true,
	"GET /account/packages":             true,
	"GET /account/usage":                true,
	"GET /admin/users":                  true,
	"GET /admin/users/{id}":             true,
	"GET /admin/overview":               true,
	"GET /admin/clients":                true,
	"GET /admin/invites":                true,
	"GET /admin/community":              true,
	"GET /admin/community/activity":     true,
	"GET /admin/feedback":               true,
	"GET /admin/feedback/{id}":          true,
	"GET /admin/webhooks":               true,
	"GET /community":                    true,
	"GET /community/{listing}":          true,
	"GET /workspaces":                   true,
	"GET /workspaces/{id}":              true,
}

// invokingCallbacks are the GET routes that run a capability and that a
// provider sends the browser back to from its own site, so their reads
// are cross-site by design: each with the cookie the flow's start (on this
// site) set for it. A cross-site read carrying the cookie is the person's
// own flow coming back and is served; one without it (a link elsewhere,
// no flow under way) gets the continue page like invokingReads.
var invokingCallbacks = map[string]string{
	"GET " + integrations.CallbackPath + "/{provider}": connectCookie,
	"GET " + integrations.AppCallbackPath + "/{app}":   connectCookie,
	"GET " + remotemcp.CallbackPath + "/{server}":      mcpConsentCookie,
}

// crossSiteAdmittedKey marks a cross-site read a callback route admitted
// (invokingCallbacks), for the backstop in invokeRefusedCrossSite.
type crossSiteAdmittedKey struct{}

// readGuard returns pattern's handler behind the cross-site rule: fn as it
// is for a route that runs no capability.
func (h *Handler) readGuard(pattern string, fn http.Handler) http.Handler {
	if invokingReads[pattern] {
		return h.sameSiteReads(fn, "")
	}
	if cookie, ok := invokingCallbacks[pattern]; ok {
		return h.sameSiteReads(fn, cookie)
	}
	return fn
}

// sameSiteReads answers a cross-site read (crossSiteRead) with the
// interstitial and passes every other request to next; with flowCookie
// set, a cross-site read carrying that cookie passes too.
func (h *Handler) sameSiteReads(next http.Handler, flowCookie string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if crossSiteRead(r) {
			if c, err := r.Cookie(flowCookie); flowCookie != "" && err == nil && c.Value != "" {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), crossSiteAdmittedKey{}, true)))
				return
			}
			h.crossSiteInterstitial(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// crossSiteInterstitial says the link came from another site and offers
// a link on this origin to the same address. Nothing else runs: no
// session check, no capability. render sets Cache-Control: no-store.
func (h *Handler) crossSiteInterstitial(w http.ResponseWriter, r *http.Request) {
	h.log.InfoContext(r.Context(), "web: cross-site read held", "path", r.URL.Path, "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
	h.render(w, r, http.StatusOK, crossSitePage(h.page(r, "Continue to this page?"), continueTarget(r)))
}

// continueTarget is r's path and query, as a path on this server (never
// a scheme-relative address another host could be read from).
func continueTarget(r *http.Request) string {
	p := r.URL.EscapedPath()
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		p = "/"
	}
	if r.URL.RawQuery != "" {
		p += "?" + r.URL.RawQuery
	}
	return p
}

// errCrossSiteRead is the refusal of a capability a cross-site read would
// have run (invokeRefusedCrossSite).
var errCrossSiteRead = &capabilities.Error{Code: capabilities.CodeUnsupported,
	Message: "This page was opened from another site. Open it again from this site."}

// invokeRefusedCrossSite is the backstop behind invokingReads: a
// cross-site read that reaches Invoke (a GET route missing from the list)
// runs nothing. It logs the route so that it is added.
func (h *Handler) invokeRefusedCrossSite(r *http.Request, name string) error {
	if h.invokeSeen != nil {
		h.invokeSeen(r, name)
	}
	if !crossSiteRead(r) || r.Context().Value(crossSiteAdmittedKey{}) != nil {
		return nil
	}
	h.log.ErrorContext(r.Context(), "web: cross-site read reached Invoke; its route belongs in invokingReads",
		"pattern", r.Pattern, "capability", name)
	return errCrossSiteRead
}

// redirectAfterCallback sends the browser from a callback to path. A
// redirect would carry the provider's site into Fetch Metadata (the
// chain is cross-site), and path, a page that runs a capability, would
// answer with the continue page: a cross-site callback gets a page that
// refreshes to path from this origin instead (a meta refresh, no script),
// with a link for a browser that does not follow it.
func (h *Handler) redirectAfterCallback(w http.ResponseWriter, r *http.Request, path string) {
	if !crossSiteRead(r) {
		h.redirect(w, r, path)
		return
	}
	p := h.page(r, "Continue")
	p.Refresh = "0;url=" + string(p.link(path))
	h.render(w, r, http.StatusOK, callbackLandingPage(p, path))
}
