package web

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/storage"
)

func (h *Handler) secretRoutes(handle func(string, http.HandlerFunc)) {
	if h.opts.Secrets == nil {
		return
	}
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }
	handle("GET /account/secrets", user(h.secretsPage))
	// Revealing is a POST: it is cross-origin protected, never prefetched
	// and never cached. It runs secretReveal, which only a web session may
	// call.
	handle("POST /account/secrets/reveal", user(h.revealSecret))
	// Storing a secret with its policy, changing the policy and deleting
	// run secretSetWithPolicy, secretPolicySet and secretDelete as the signed-in
	// person (a session caller: the only one that may approve hosts).
	handle("POST /account/secrets", user(h.setSecret))
	handle("POST /account/secrets/policy", user(h.setSecretPolicy))
	handle("POST /account/secrets/delete", user(h.deleteSecret))
}

// secretsPage lists the person's secrets: names, descriptions and
// policies, never values.
func (h *Handler) secretsPage(w http.ResponseWriter, r *http.Request) {
	h.renderSecrets(w, r, http.StatusOK, "", "")
}

func (h *Handler) renderSecrets(w http.ResponseWriter, r *http.Request, status int, revealedName, revealedValue string) {
	u := PrincipalFrom(r.Context()).Session.User
	page, err := h.opts.Secrets.List(r.Context(), ownerOf(u), storage.PageRequest{Cursor: r.URL.Query().Get("after"), Limit: 100})
	if errors.Is(err, storage.ErrInvalidCursor) {
		h.renderError(w, r, http.StatusBadRequest, "That page link is not valid.")
		return
	}
	if err != nil {
		h.internalError(w, r, "list secrets", err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	h.render(w, r, status, secretsPage(h.page(r, "Secrets"), secretsView{
		Items: page.Items, Next: page.Next, RevealedName: revealedName, RevealedValue: revealedValue, Now: time.Now(),
	}))
}

// revealSecret shows one secret's value to its owner, and audits that it
// was shown.
func (h *Handler) revealSecret(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	u := PrincipalFrom(r.Context()).Session.User
	var out secrets.RevealOutput
	if err := h.invoke(r, "secretReveal", secrets.RevealInput{Name: r.PostForm.Get("name")}, &out); err != nil {
		w.Header().Set("Cache-Control", "no-store")
		h.renderCapabilityError(w, r, err)
		return
	}
	h.audit(r, "account", "secret_revealed", "success", "", &u)
	h.renderSecrets(w, r, http.StatusOK, out.Name, out.Value)
}

// hostList splits the allowed-hosts field: one host per line (commas and
// spaces separate too).
func hostList(v string) []string {
	return strings.FieldsFunc(v, func(c rune) bool { return c == '\n' || c == '\r' || c == ',' || c == ' ' || c == '\t' })
}

// setSecret stores a secret with the policy the form gives (the page
// always sends the whole policy).
func (h *Handler) setSecret(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	u := PrincipalFrom(r.Context()).Session.User
	hosts := hostList(r.PostForm.Get("allowedHosts"))
	in := secrets.SetWithPolicyInput{
		Name: strings.TrimSpace(r.PostForm.Get("name")), Value: r.PostForm.Get("value"),
		Description: r.PostForm.Get("description"), AllowedHosts: &hosts, ExpiresAt: r.PostForm.Get("expiresAt"),
	}
	if err := h.invoke(r, "secretSetWithPolicy", in, nil); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	h.audit(r, "account", "secret_set", "success", "", &u)
	h.redirect(w, r, "/account/secrets")
}

// setSecretPolicy replaces one secret's allowed hosts and expiry.
func (h *Handler) setSecretPolicy(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	u := PrincipalFrom(r.Context()).Session.User
	in := secrets.PolicyInput{Name: r.PostForm.Get("name"), AllowedHosts: hostList(r.PostForm.Get("allowedHosts")), ExpiresAt: r.PostForm.Get("expiresAt")}
	if err := h.invoke(r, "secretPolicySet", in, nil); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	h.audit(r, "account", "secret_policy_set", "success", "", &u)
	h.redirect(w, r, "/account/secrets")
}

// deleteSecret removes one secret.
func (h *Handler) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	if err := h.invoke(r, "secretDelete", secrets.DeleteInput{Name: r.PostForm.Get("name")}, nil); err != nil {
		h.renderCapabilityError(w, r, err)
		return
	}
	h.redirect(w, r, "/account/secrets")
}
