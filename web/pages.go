package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/a-h/templ"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
)

// Page is a page an embedder adds to the web shell with Handler.Mount. It
// is served like the shell's own pages: in the shell's layout (site name,
// navigation, stylesheet), with the security headers and the strict
// content security policy, behind the same cross-origin protection (a
// form posted from another site is refused with 403 before Handler runs),
// with the signed-in person loaded fresh for the request, and acting only
// through Registry.Invoke as that person. A GET page reached by a link from
// another site (Sec-Fetch-Site cross-site or same-site) answers with a page
// offering to continue from this site, and Handler runs only then: a link
// elsewhere never spends the person's quota.
type Page struct {
	// Pattern is the route, a net/http ServeMux pattern with its method:
	// "GET /notes", "POST /notes/{id}/delete". GET and POST only (forms
	// need no more); GET also answers HEAD. The path is under the base URL's
	// path, like every page of the shell. Paths served outside the shell
	// (/mcp, /oauth/, /.well-known/, /static/, /healthz, /readyz, /dev/,
	// /debug/, /maintenance/) are refused.
	Pattern string

	// Public pages answer people who are not signed in too (PageContext.User
	// then reports none). Default: a signed-in person is required; anyone
	// else is sent to the sign-in page, which leads back here (a client
	// asking for JSON gets 401).
	Public bool

	// Role, when set, admits only people holding it (others get the 403
	// page). With accounts' admin role the page also asks for the second
	// factor the server may require of admins, like the admin pages.
	Role string

	// Nav, when set on a GET page without wildcards, adds a link with this
	// text to the account pages' navigation.
	Nav string

	// Handler answers the request.
	Handler PageFunc
}

// PageFunc answers one request to an embedder's page.
type PageFunc func(c *PageContext)

// PageContext is the request an embedder's page answers, with the shell's
// helpers: who is signed in, Invoke as them, render in the layout.
type PageContext struct {
	// Request is the request; Writer its response. Handlers that use the
	// helpers rarely need either, beyond Request.PathValue.
	Request *http.Request
	Writer  http.ResponseWriter

	h      *Handler
	notice string
}

// Context returns the request's context.
func (c *PageContext) Context() context.Context { return c.Request.Context() }

// User returns the signed-in person, loaded fresh for this request, and
// whether there is one (only a Public page is answered without).
func (c *PageContext) User() (accounts.User, bool) {
	p := PrincipalFrom(c.Request.Context())
	if p == nil {
		return accounts.User{}, false
	}
	return p.Session.User, true
}

// Caller returns the capabilities caller the page acts as: the signed-in
// person at a web page (interactive, with a session, not limited by OAuth
// scopes), with their roles loaded fresh. ok is false when nobody is
// signed in.
func (c *PageContext) Caller() (caller capabilities.Caller, ok bool) {
	p := PrincipalFrom(c.Request.Context())
	if p == nil {
		return capabilities.Caller{}, false
	}
	return c.h.webCaller(c.Request.Context(), p), true
}

// Invoke runs capability name through Registry.Invoke as the signed-in
// person, with in encoded as its JSON arguments, and decodes the
// structured result into out (unless out is nil). A refusal or a
// capability's own failure is a *capabilities.Error: show its Message for
// a form's mistakes (capabilities.CodeInvalidInput), or pass it to Fail.
// Without a signed-in person it fails without running anything.
func (c *PageContext) Invoke(name string, in, out any) error {
	return c.h.invoke(c.Request, name, in, out)
}

// Form parses the posted form (at most 64 KiB, every field valid UTF-8
// without NUL bytes, as the shell's own forms). On failure it has answered
// with the 400 page and returns false.
func (c *PageContext) Form() (url.Values, bool) {
	if !c.h.parseForm(c.Writer, c.Request) {
		return nil, false
	}
	return c.Request.PostForm, true
}

// SetNotice sets the confirmation shown at the top of the page Render
// writes next ("Saved.").
func (c *PageContext) SetNotice(text string) { c.notice = text }

// Render writes body inside the shell's layout, the window title being
// "title · site name". body is any templ.Component: a templ template, or
// html/template through templ.ComponentFunc. Text it writes must be
// escaped by it (templ and html/template do); it may not use inline
// scripts or styles, which the policy refuses.
func (c *PageContext) Render(status int, title string, body templ.Component) {
	p := c.h.page(c.Request, title)
	p.Notice = c.notice
	c.h.render(c.Writer, c.Request, status, embedderPage(p, body))
}

// Error writes the shell's error page with status and a message for the
// person.
func (c *PageContext) Error(status int, message string) {
	c.h.renderError(c.Writer, c.Request, status, message)
}

// Fail answers a failed Invoke with the shell's error page: the status of
// the error's code (400 invalid input, 403 refused, 404 not found, 409
// conflict, 429 with Retry-After over quota) and its message; any other
// error is logged and answered 500 with nothing internal in it.
func (c *PageContext) Fail(err error) {
	c.h.renderCapabilityError(c.Writer, c.Request, err)
}

// Redirect answers with 303 See Other to path, a path on this site
// ("/notes?saved=1"), the base URL's path put in front: after a form post,
// so that reloading does not post again.
func (c *PageContext) Redirect(path string) {
	if !localPath(path) {
		path = "/"
	}
	c.h.redirect(c.Writer, c.Request, path)
}

// URL returns the link to path, a path on this site, for hrefs and form
// actions (the base URL's path put in front).
func (c *PageContext) URL(path string) templ.SafeURL {
	if !localPath(path) {
		path = "/"
	}
	return templ.SafeURL(c.h.prefix + path)
}

// SiteName returns the site name the pages show.
func (c *PageContext) SiteName() string { return c.h.opts.SiteName }

// reservedPrefixes are the paths served outside the web shell, or by it
// for its own files: a page there would never be reached, or would shadow
// one.
var reservedPrefixes = []string{"/mcp", "/oauth/", "/.well-known/", "/static/", "/healthz", "/readyz", "/dev/", "/debug/", "/maintenance/"}

// Mount adds pages to the shell. It may be called before or while the
// server serves. It refuses, mounting none of pages, a page without a
// handler, a pattern without GET or POST, one with a host, one under a
// path the shell does not serve, and one that conflicts with a route
// already mounted (the shell's own, an earlier page's, or another of
// pages).
func (h *Handler) Mount(pages ...Page) error {
	h.pagesMu.Lock()
	defer h.pagesMu.Unlock()
	// Try every pattern on a scratch router holding the routes mounted so
	// far: ServeMux panics on a malformed or conflicting pattern, and a
	// route once added cannot be taken back.
	scratch := http.NewServeMux()
	for _, p := range h.patterns {
		scratch.Handle(p, http.NotFoundHandler())
	}
	for _, pg := range pages {
		if err := checkPage(pg); err != nil {
			return err
		}
		if err := tryHandle(scratch, pagePattern(pg)); err != nil {
			return fmt.Errorf("web: page %q: %v", pg.Pattern, err)
		}
	}
	for _, pg := range pages {
		h.mountPage(pg)
	}
	return nil
}

// tryHandle registers pattern on mux, turning its panic into an error.
func tryHandle(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
}

// pagePattern is pg's pattern as registered: "METHOD /path".
func pagePattern(pg Page) string {
	method, path, _ := strings.Cut(pg.Pattern, " ")
	return method + " " + strings.TrimLeft(path, " \t")
}

func checkPage(pg Page) error {
	if pg.Handler == nil {
		return fmt.Errorf("web: page %q: no handler", pg.Pattern)
	}
	method, path, ok := strings.Cut(pg.Pattern, " ")
	if !ok || (method != http.MethodGet && method != http.MethodPost) {
		return fmt.Errorf("web: page %q: want \"GET /path\" or \"POST /path\"", pg.Pattern)
	}
	path = strings.TrimLeft(path, " \t")
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("web: page %q: the path must start with / (no host)", pg.Pattern)
	}
	for _, p := range reservedPrefixes {
		if path == strings.TrimSuffix(p, "/") || strings.HasPrefix(path, p) {
			return fmt.Errorf("web: page %q: %s is not served by the web shell", pg.Pattern, p)
		}
	}
	if pg.Nav != "" && (method != http.MethodGet || strings.Contains(path, "{")) {
		return fmt.Errorf("web: page %q: a navigation link needs a GET page without wildcards", pg.Pattern)
	}
	return nil
}

// mountPage registers one checked page on the router.
func (h *Handler) mountPage(pg Page) {
	pattern := pagePattern(pg)
	var next http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pg.Handler(&PageContext{Request: r, Writer: w, h: h})
	})
	switch {
	case pg.Role == adminRole:
		next = h.guards.RequireRole(adminRole)(h.requireAdminFactor(next.ServeHTTP))
	case pg.Role != "":
		next = h.guards.RequireRole(pg.Role)(next)
	case !pg.Public:
		next = h.guards.RequireUser(next)
	}
	if strings.HasPrefix(pattern, http.MethodGet+" ") {
		next = h.sameSiteReads(next, "") // its handler may Invoke
	}
	h.serveMux.Handle(pattern, next)
	h.patterns = append(h.patterns, pattern)
	if pg.Nav != "" {
		_, path, _ := strings.Cut(pattern, " ")
		h.navLinks = append(h.navLinks, navLink{Path: path, Text: pg.Nav})
	}
}

// navLink is a link an embedder's page adds to the account navigation.
type navLink struct{ Path, Text string }

// extraNav returns the embedders' navigation links.
func (h *Handler) extraNav() []navLink {
	h.pagesMu.RLock()
	defer h.pagesMu.RUnlock()
	return append([]navLink(nil), h.navLinks...)
}

// webCaller is the caller of a signed-in person at a page.
func (h *Handler) webCaller(ctx context.Context, p *Principal) capabilities.Caller {
	u := p.Session.User
	caller := accounts.CallerFor(u, h.opts.Accounts.Roles.FreshGrants(ctx, u.ID))
	// A person at the browser, signed in with the session cookie.
	caller.Interactive, caller.AllScopes, caller.Session = true, true, true
	return caller
}
