package web

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/enclave-mcp/enclave/integrations/remotemcp"
)

// The MCP servers page: the remote MCP servers a person added (package
// integrations/remotemcp), adding one, finishing consent at one, refreshing
// and removing. Every step runs a capability as the signed-in person:
// mcpServerList, mcpServerAdd, mcpServerRefresh, mcpServerRemove and the
// session-only mcpServerConsentStart and mcpServerConsentFinish. Consent is
// bound to the browser that started it, as the connections page's flow is:
// a short-lived cookie scoped to the callback path holds the binding.

const mcpConsentCookie = "enclave_mcp_consent"

var mcpServerNotices = map[string]string{
	"added":     "The server is added.",
	"consent":   "The server is added; it asks for your consent: use Grant access below.",
	"granted":   "Access is granted; the server's tools are yours now.",
	"refreshed": "The server's tools are refreshed.",
	"removed":   "The server is removed.",
}

// mcpServersOn reports whether the MCP servers page exists.
func (h *Handler) mcpServersOn() bool {
	return h.opts.Registry != nil && h.opts.Registry.Has("mcpServerList")
}

func (h *Handler) mcpServerRoutes(handle func(string, http.HandlerFunc)) {
	if !h.mcpServersOn() {
		return
	}
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	handle("GET "+remotemcp.PagePath, user(h.mcpServersPage))
	handle("POST "+remotemcp.PagePath+"/add", user(h.addMCPServer))
	handle("POST "+remotemcp.PagePath+"/consent", user(h.startMCPConsent))
	handle("GET "+remotemcp.CallbackPath+"/{server}", user(h.finishMCPConsent))
	handle("POST "+remotemcp.PagePath+"/refresh", user(h.refreshMCPServer))
	handle("POST "+remotemcp.PagePath+"/remove", user(h.removeMCPServer))
}

func (h *Handler) mcpServersPage(w http.ResponseWriter, r *http.Request) {
	var out remotemcp.ListOutput
	if err := h.invoke(r, "mcpServerList", struct{}{}, &out); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	p := h.page(r, "MCP servers")
	p.Notice = mcpServerNotices[r.URL.Query().Get("notice")]
	h.render(w, r, http.StatusOK, mcpServersPage(p, out))
}

func (h *Handler) addMCPServer(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	var out remotemcp.Added
	in := remotemcp.AddInput{URL: strings.TrimSpace(r.PostForm.Get("url")), Name: strings.TrimSpace(r.PostForm.Get("name"))}
	if err := h.invoke(r, "mcpServerAdd", in, &out); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	if out.Status == remotemcp.StatusConsentRequired {
		h.redirect(w, r, remotemcp.PagePath+"?notice=consent")
		return
	}
	h.redirect(w, r, remotemcp.PagePath+"?notice=added")
}

func (h *Handler) mcpConsentCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: mcpConsentCookie, Value: value, Path: h.prefix + remotemcp.CallbackPath, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil || strings.HasPrefix(h.opts.BaseURL, "https://")}
}

// startMCPConsent starts consent and shows the link to the remote's
// authorization server (a link: form-action 'self' stops a redirect of a
// form submission to another origin).
func (h *Handler) startMCPConsent(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	binding := base64.RawURLEncoding.EncodeToString(b)
	var out remotemcp.ConsentStartOutput
	in := remotemcp.ConsentStartInput{Name: r.PostForm.Get("name"), Binding: binding}
	if err := h.invoke(r, "mcpServerConsentStart", in, &out); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	u, err := url.Parse(out.AuthorizationURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		h.internalError(w, r, "mcp consent", errors.New("web: the authorization URL is not http(s)"))
		return
	}
	http.SetCookie(w, h.mcpConsentCookie(r, binding, int(remotemcp.StateTTL.Seconds())))
	h.render(w, r, http.StatusOK, mcpConsentContinuePage(h.page(r, "Grant access"), in.Name, u.Host, out.AuthorizationURL))
}

// finishMCPConsent is the callback the remote's authorization server
// sends the browser back to.
func (h *Handler) finishMCPConsent(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	binding := ""
	if c, err := r.Cookie(mcpConsentCookie); err == nil {
		binding = c.Value
	}
	http.SetCookie(w, h.mcpConsentCookie(r, "", -1))
	in := remotemcp.ConsentFinishInput{Binding: binding, Server: r.PathValue("server"), State: q.Get("state"), Code: q.Get("code"),
		Issuer: q.Get("iss"), Error: q.Get("error"), ErrorDescription: q.Get("error_description")}
	if err := h.invoke(r, "mcpServerConsentFinish", in, nil); err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirectAfterCallback(w, r, remotemcp.PagePath+"?notice=granted")
}

func (h *Handler) refreshMCPServer(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	if err := h.invoke(r, "mcpServerRefresh", remotemcp.NameInput{Name: r.PostForm.Get("name")}, nil); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, remotemcp.PagePath+"?notice=refreshed")
}

func (h *Handler) removeMCPServer(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	if err := h.invoke(r, "mcpServerRemove", remotemcp.NameInput{Name: r.PostForm.Get("name")}, nil); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, remotemcp.PagePath+"?notice=removed")
}
