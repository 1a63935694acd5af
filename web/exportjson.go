package web

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
)

// pathExportJSON is the export manifest for scripts: JSON answers,
// refusals included, where /account/export/manifest.json is the page's
// download.
const pathExportJSON = "/account/export.json"

// exportManifestJSON serves GET /account/export.json: the signed-in
// user's export manifest (counts, redactions, how to fetch every section
// through the accountExportSection capability). It never inlines user
// data, and it refuses in JSON (401 signed out, 403 suspended).
func (h *Handler) exportManifestJSON(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sess, err := h.opts.Accounts.Credentials.Authenticate(ctx, r)
	switch {
	case errors.Is(err, accounts.ErrNoSession), errors.Is(err, accounts.ErrDeleting):
		h.writeJSON(w, r, http.StatusUnauthorized, jsonError{Error: "unauthorized", Message: "Sign in to download your export."})
		return
	case errors.Is(err, accounts.ErrSuspended):
		h.writeJSON(w, r, http.StatusForbidden, jsonError{Error: "forbidden", Message: err.Error()})
		return
	case err != nil:
		h.log.ErrorContext(ctx, "web: authenticate", "err", err)
		h.writeJSON(w, r, http.StatusInternalServerError, jsonError{Error: "internal_error", Message: "internal server error"})
		return
	}
	m, err := h.opts.Lifecycle.Manifest(ctx, storage.Owner{ID: sess.User.ID, StableID: sess.User.StableID})
	if err != nil {
		h.log.ErrorContext(ctx, "web: export manifest", "err", err)
		h.writeJSON(w, r, http.StatusInternalServerError, jsonError{Error: "internal_error", Message: "internal server error"})
		return
	}
	h.setSecurityHeaders(w.Header(), r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="enclave-export-manifest.json"`)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(m)
}
