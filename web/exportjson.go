package web

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
)

// pathExportJSON is the export manifest for scripts: JSON answers,
// refusals included, where /account/export/manifest.json is the page's
// download.
const pathExportJSON = "/account/export.json"

// exportManifestJSON serves GET /account/export.json: the signed-in
// user's export manifest (counts, redactions, how to fetch every section
// through the accountExportSection capability), run as the capability
// accountExportManifest through Registry.Invoke with the session's caller,
// so it is gated, metered and audited like every other action. It never
// inlines user data, and it refuses in JSON (401 signed out, 403
// suspended: a refusal Registry.Invoke decides and audits).
func (h *Handler) exportManifestJSON(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sess, err := h.opts.Accounts.Credentials.Authenticate(ctx, r)
	switch {
	case errors.Is(err, accounts.ErrNoSession), errors.Is(err, accounts.ErrDeleting):
		h.writeJSON(w, r, http.StatusUnauthorized, jsonError{Error: "unauthorized", Message: "Sign in to download your export."})
		return
	case errors.Is(err, accounts.ErrSuspended):
		// The session names a suspended account: its caller is refused by
		// the registry, which records the denial.
	case err != nil:
		h.log.ErrorContext(ctx, "web: authenticate", "err", err)
		h.writeJSON(w, r, http.StatusInternalServerError, jsonError{Error: "internal_error", Message: "internal server error"})
		return
	}
	res, ierr := h.invokeAs(r, sess.User, "accountExportManifest", struct{}{})
	if err != nil {
		// A suspended account is refused whatever the registry answered
		// (it refuses and audits the call): nothing of it is served.
		h.writeJSON(w, r, http.StatusForbidden, jsonError{Error: "forbidden", Message: accounts.ErrSuspended.Error()})
		return
	}
	if ierr != nil {
		h.exportJSONRefused(w, r, ierr)
		return
	}
	h.setSecurityHeaders(w.Header(), r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="enclave-export-manifest.json"`)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(res.Structured)
}

// exportJSONRefused answers a failed accountExportManifest in JSON: the
// status of the error's code in the one table (capabilityStatus) and its
// message as a sentence.
func (h *Handler) exportJSONRefused(w http.ResponseWriter, r *http.Request, err error) {
	status := capabilityStatus(err)
	if status >= 500 {
		h.log.ErrorContext(r.Context(), "web: export manifest", "err", err)
		h.writeJSON(w, r, http.StatusInternalServerError, jsonError{Error: "internal_error", Message: "internal server error"})
		return
	}
	msg := refusedMessage
	if e, ok := errors.AsType[*capabilities.Error](err); ok {
		msg = pageMessage(e.Message)
	}
	setRetryAfter(w, err)
	h.writeJSON(w, r, status, jsonError{Error: jsonErrorName(status, err), Message: msg})
}

// jsonErrorName is the error field of a JSON refusal: "forbidden" for a
// 403 (as this endpoint always said), else the refusal's code.
func jsonErrorName(status int, err error) string {
	if status == http.StatusForbidden {
		return "forbidden"
	}
	return string(capabilities.CodeOf(err))
}
