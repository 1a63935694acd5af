package web

import (
	"errors"
	"net/http"

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
}

// secretsPage lists the person's secrets: names and descriptions only.
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
	h.render(w, r, status, secretsPage(h.page(r, "Secrets"), page.Items, page.Next, revealedName, revealedValue))
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
