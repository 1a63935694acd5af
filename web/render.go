package web

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/a-h/templ"
	"golang.org/x/net/idna"
)

// ContentSecurityPolicy is the policy sent with every first-party HTML
// response. Scripts and styles come only from this origin (the stylesheet is
// a file we serve); nothing may frame the pages, and forms post only here.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"

// hstsValue is sent on responses of a server whose public origin is https.
const hstsValue = "max-age=63072000; includeSubDomains"

// authorizePolicy returns the policy of the OAuth sign-in and consent
// pages of a request whose validated redirect URI is redirectURI: the
// policy of every other page, except that form-action also allows the
// redirect URI's origin (or scheme). Their forms post to this origin, which
// answers with a redirect to the client; Chromium applies form-action to
// every redirect a form submission follows, so with form-action 'self'
// the browser would refuse to go back to the client. When no source
// expression can name the redirect URI safely, the policy stays the strict
// one.
func authorizePolicy(redirectURI string) string {
	src := formActionSource(redirectURI)
	if src == "" {
		return ContentSecurityPolicy
	}
	return strings.Replace(ContentSecurityPolicy, "form-action 'self'", "form-action 'self' "+src, 1)
}

var (
	cspScheme = regexp.MustCompile(`^[a-z][a-z0-9+.-]*$`)
	cspHost   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
	cspPort   = regexp.MustCompile(`^[0-9]{1,5}$`)
)

// formActionSource returns the narrowest CSP source expression a browser
// accepts that matches redirects to redirectURI, or "" when there is none
// that is safe to write. Paths are left out: CSP ignores them after a
// redirect.
//
//   - http(s) with a DNS name or IPv4 address: scheme://host[:port], an
//     internationalized name in its A-label (xn--) form;
//   - http(s) with the IPv6 loopback literal ([::1]): CSP has no syntax
//     for IPv6 addresses (Chromium ignores such a source), so
//     scheme://*:port, any host on that port; any other IPv6 literal adds
//     nothing (the wildcard would allow every origin of the scheme);
//   - a private-use scheme (cursor://...): the scheme-source "cursor:".
//
// Every part is checked against a strict character set, so a URI cannot
// smuggle a quote, space, comma, semicolon or wildcard into the policy.
func formActionSource(redirectURI string) string {
	u, err := url.Parse(redirectURI)
	if err != nil || u.User != nil || u.Fragment != "" {
		return ""
	}
	scheme := u.Scheme
	if !cspScheme.MatchString(scheme) {
		return ""
	}
	switch scheme {
	case "http", "https":
	case "javascript", "data", "blob", "filesystem", "file", "vbscript", "about", "ws", "wss":
		return ""
	default:
		return scheme + ":"
	}
	port := u.Port()
	if port != "" && !cspPort.MatchString(port) {
		return ""
	}
	host := strings.ToLower(u.Hostname())
	if strings.HasPrefix(u.Host, "[") {
		// Only the loopback address: for it, "any host on this port" is
		// what a native client listening on [::1] needs. Another IPv6
		// literal would turn into "any https origin", which is no
		// form-action at all; such a client gets the strict policy.
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() || ip.To4() != nil {
			return ""
		}
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[scheme]
		}
		return scheme + "://*:" + port
	}
	if ascii, err := idna.Lookup.ToASCII(host); err == nil {
		host = ascii // browsers match internationalized names in A-label form
	} else {
		return ""
	}
	if !cspHost.MatchString(host) {
		return ""
	}
	if port != "" {
		return scheme + "://" + host + ":" + port
	}
	return scheme + "://" + host
}

// setSecurityHeaders sets the first-party security headers on h, with the
// strict content security policy.
func (h *Handler) setSecurityHeaders(hdr http.Header, r *http.Request) {
	h.setSecurityHeadersCSP(hdr, r, ContentSecurityPolicy)
}

// setSecurityHeadersCSP sets the first-party security headers with the
// content security policy csp.
func (h *Handler) setSecurityHeadersCSP(hdr http.Header, r *http.Request, csp string) {
	hdr.Set("Content-Security-Policy", csp)
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "strict-origin-when-cross-origin")
	if h.https || r.TLS != nil {
		hdr.Set("Strict-Transport-Security", hstsValue)
	}
}

// render writes c as a complete HTML response with status. It is the only
// way this package writes HTML: every page gets the security headers, no
// caching (pages show account data), and a rendering failure becomes a
// plain 500 instead of half a page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	h.renderCSP(w, r, status, c, ContentSecurityPolicy)
}

// renderCSP is render with the content security policy csp: only the OAuth
// sign-in and consent pages use another one (see authorizePolicy).
func (h *Handler) renderCSP(w http.ResponseWriter, r *http.Request, status int, c templ.Component, csp string) {
	var buf bytes.Buffer
	if err := c.Render(r.Context(), &buf); err != nil {
		h.log.ErrorContext(r.Context(), "web: render page", "path", r.URL.Path, "err", err)
		h.setSecurityHeaders(w.Header(), r)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("Something went wrong. Please try again.\n"))
		return
	}
	hdr := w.Header()
	h.setSecurityHeadersCSP(hdr, r, csp)
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

// renderError renders the error page with a message fit for the person who
// made the request.
func (h *Handler) renderError(w http.ResponseWriter, r *http.Request, status int, message string) {
	h.render(w, r, status, errorPage(h.page(r, http.StatusText(status)), status, message))
}

// writeJSON writes v as a JSON response with the security headers (they
// cost nothing and keep browsers from sniffing or framing it).
func (h *Handler) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"error":"internal_error"}`)
	}
	hdr := w.Header()
	h.setSecurityHeaders(hdr, r)
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// jsonError is the body of a JSON error response.
type jsonError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// notFoundJSON answers 404 with a JSON body: for development and
// maintenance paths, which never render a page.
func (h *Handler) notFoundJSON(w http.ResponseWriter, r *http.Request) {
	h.writeJSON(w, r, http.StatusNotFound, jsonError{Error: "not_found", Message: "No such endpoint."})
}

type ctxKey int
