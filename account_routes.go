package enclave

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/internal/httpmw"
	"github.com/enclave-mcp/enclave/internal/requestid"
	"github.com/enclave-mcp/enclave/storage"
)

// accountExport serves GET /account/export.json: the signed-in user's
// export manifest (counts, redactions, how to fetch every section through
// the accountExportSection capability). It never inlines user data.
func (s *Server) accountExport(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sess, err := s.accounts.Authenticate(ctx, r)
	switch {
	case errors.Is(err, accounts.ErrNoSession), errors.Is(err, accounts.ErrDeleting):
		httpmw.WriteJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized", "message": "Sign in to download your export."})
		return
	case errors.Is(err, accounts.ErrSuspended):
		httpmw.WriteJSON(w, http.StatusForbidden, map[string]string{"error": "forbidden", "message": err.Error()})
		return
	case err != nil:
		s.internalError(w, r, "authenticate", err)
		return
	}
	m, err := s.lifecycle.Manifest(ctx, storage.Owner{ID: sess.User.ID, StableID: sess.User.StableID})
	if err != nil {
		s.internalError(w, r, "export manifest", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="enclave-export-manifest.json"`)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(m)
}

// internalError logs err with the request id and answers a generic 500.
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, what string, err error) {
	id := requestid.FromContext(r.Context())
	s.log.ErrorContext(r.Context(), "enclave: "+what, "err", err, "request_id", id)
	httpmw.WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal_error", "message": "internal server error", "request_id": id})
}
