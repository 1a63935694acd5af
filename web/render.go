package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/a-h/templ"
)

// ContentSecurityPolicy is the policy sent with every first-party HTML
// response. Scripts and styles come only from this origin (the stylesheet is
// a file we serve); nothing may frame the pages, and forms post only here.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"

// hstsValue is sent on responses of a server whose public origin is https.
const hstsValue = "max-age=63072000; includeSubDomains"

// setSecurityHeaders sets the first-party security headers on h.
func (h *Handler) setSecurityHeaders(hdr http.Header, r *http.Request) {
	hdr.Set("Content-Security-Policy", ContentSecurityPolicy)
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
	h.setSecurityHeaders(hdr, r)
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
