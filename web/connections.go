package web

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/integrations"
)

// The connections page: the accounts a person connected at other services
// (package integrations), the providers they can connect, and the connect
// flow. Every step runs a capability as the signed-in person:
// connectionList, connectionDisconnect, and the session-only
// connectionConnectStart and connectionConnectFinish; and the person's own
// OAuth apps: connectionAppList, connectionAppRemove and the session-only
// connectionAppAdd (the client secret is pasted here, never shown again).
//
// The flow is bound to the browser that started it: starting sets a
// short-lived cookie holding a random binding, which the callback must
// bring back with the state (the capability checks both, and that the
// state was issued to the same account, once).

// connectCookie holds the browser's binding of a connect flow.
const connectCookie = "enclave_connect"

var connectionNotices = map[string]string{
	"connected":    "The account is connected.",
	"disconnected": "The account is disconnected.",
	"app-added":    "Your app is added. Connect an account with it below.",
	"app-removed":  "Your app is removed, and its connections disconnected.",
}

// appsView is the "your own apps" part of the connections page: the
// person's apps, and the add form as they filled it (never the secret)
// with the error that refused it.
type appsView struct {
	List  integrations.AppListOutput
	Form  integrations.AppInput
	Error string
}

// connectionsOn reports whether the connections page exists: the registry
// holds the integration capabilities.
func (h *Handler) connectionsOn() bool {
	return h.opts.Registry != nil && h.opts.Registry.Has("connectionList")
}

func (h *Handler) connectionRoutes(handle func(string, http.HandlerFunc)) {
	if !h.connectionsOn() {
		return
	}
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	handle("GET /account/connections", user(h.connectionsPage))
	handle("POST /account/connections/connect", user(h.startConnection))
	handle("GET "+integrations.CallbackPath+"/{provider}", user(h.finishConnection))
	handle("GET "+integrations.AppCallbackPath+"/{app}", user(h.finishConnection))
	handle("POST /account/connections/disconnect", user(h.disconnectConnection))
	handle("POST /account/connections/apps", user(h.addConnectionApp))
	handle("POST /account/connections/apps/remove", user(h.removeConnectionApp))
}

func (h *Handler) connectionsPage(w http.ResponseWriter, r *http.Request) {
	h.renderConnections(w, r, http.StatusOK, appsView{})
}

// renderConnections renders the page with the person's connections and
// apps; apps carries the add form's values and error, if any.
func (h *Handler) renderConnections(w http.ResponseWriter, r *http.Request, status int, apps appsView) {
	var out integrations.ListOutput
	if err := h.invoke(r, "connectionList", struct{}{}, &out); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	if err := h.invoke(r, "connectionAppList", struct{}{}, &apps.List); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	p := h.page(r, "Connections")
	p.Notice = connectionNotices[r.URL.Query().Get("notice")]
	h.render(w, r, status, connectionsPage(p, out, apps))
}

// addConnectionApp adds the person's own OAuth app from the form; a
// refusal shows the page again with the form filled in (but the secret)
// and the reason.
func (h *Handler) addConnectionApp(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	f := r.PostForm
	in := integrations.AppInput{Name: strings.TrimSpace(f.Get("app_name")), Issuer: strings.TrimSpace(f.Get("app_issuer")),
		AuthURL: strings.TrimSpace(f.Get("app_auth_url")), TokenURL: strings.TrimSpace(f.Get("app_token_url")),
		RevokeURL: strings.TrimSpace(f.Get("app_revoke_url")), ClientID: strings.TrimSpace(f.Get("app_client_id")),
		ClientSecret: strings.TrimSpace(f.Get("app_client_secret")), Scopes: strings.Fields(f.Get("app_scopes")),
		APIHosts: strings.Fields(strings.ReplaceAll(f.Get("app_hosts"), ",", " "))}
	err := h.invoke(r, "connectionAppAdd", in, nil)
	if err == nil {
		h.redirect(w, r, "/account/connections?notice=app-added")
		return
	}
	status, msg, ok := formRefusal(w, err, connectionFormCodes...)
	if !ok {
		h.renderCapabilityError(w, r, err)
		return
	}
	in.ClientSecret = "" // never sent back to the browser
	h.renderConnections(w, r, status, appsView{Form: in, Error: msg})
}

// connectionFormCodes are the refusals the app form shows again for the
// person to correct (the account's and the quota's refusals get the error
// page).
var connectionFormCodes = []capabilities.Code{capabilities.CodeInvalidInput, capabilities.CodeConflict, capabilities.CodeUnsupported, capabilities.CodeNotFound}

func (h *Handler) removeConnectionApp(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	if err := h.invoke(r, "connectionAppRemove", integrations.AppNameInput{Name: r.PostForm.Get("name")}, nil); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, "/account/connections?notice=app-removed")
}

func (h *Handler) connectCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: connectCookie, Value: value, Path: h.prefix + integrations.CallbackPath, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil || strings.HasPrefix(h.opts.BaseURL, "https://")}
}

// startConnection starts the flow and shows the link to the provider.
func (h *Handler) startConnection(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	binding := base64.RawURLEncoding.EncodeToString(b)
	var out integrations.StartOutput
	in := integrations.StartInput{Provider: r.PostForm.Get("provider"), App: r.PostForm.Get("app"), Name: strings.TrimSpace(r.PostForm.Get("name")), Binding: binding}
	if err := h.invoke(r, "connectionConnectStart", in, &out); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	u, err := url.Parse(out.AuthorizationURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		h.internalError(w, r, "connect", errors.New("web: the provider's authorization URL is not http(s)"))
		return
	}
	http.SetCookie(w, h.connectCookie(r, binding, int(integrations.StateTTL.Seconds())))
	// A page with a link, not a redirect: form-action 'self' stops a form
	// submission from being redirected to another origin.
	h.render(w, r, http.StatusOK, connectionContinuePage(h.page(r, "Connect"), in.Provider+in.App, out.AuthorizationURL))
}

// finishConnection is the callback the provider sends the browser back to.
func (h *Handler) finishConnection(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	binding := ""
	if c, err := r.Cookie(connectCookie); err == nil {
		binding = c.Value
	}
	http.SetCookie(w, h.connectCookie(r, "", -1))
	in := integrations.FinishInput{Binding: binding, Provider: r.PathValue("provider"), App: r.PathValue("app"), State: q.Get("state"), Code: q.Get("code"), Error: q.Get("error"), ErrorDescription: q.Get("error_description")}
	if err := h.invoke(r, "connectionConnectFinish", in, nil); err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirectAfterCallback(w, r, "/account/connections?notice=connected")
}

func (h *Handler) disconnectConnection(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	if err := h.invoke(r, "connectionDisconnect", integrations.NameInput{Name: r.PostForm.Get("name")}, nil); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, "/account/connections?notice=disconnected")
}
