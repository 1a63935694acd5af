package web

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

// capabilityStatus maps the domain error codes of capabilities to the HTTP
// status a page answers with: the web shell's one table.
var capabilityStatus = map[capabilities.Code]int{
	capabilities.CodeNotFound:             http.StatusNotFound,
	capabilities.CodeInvalidInput:         http.StatusBadRequest,
	capabilities.CodeAccountSuspended:     http.StatusForbidden,
	capabilities.CodeAccountDeleting:      http.StatusForbidden,
	capabilities.CodeInsufficientScope:    http.StatusForbidden,
	capabilities.CodeSecondFactorRequired: http.StatusForbidden,
	capabilities.CodeQuotaExceeded:        http.StatusTooManyRequests,
	capabilities.CodeConflict:             http.StatusConflict,
	capabilities.CodeUnsupported:          http.StatusBadRequest,
	capabilities.CodeInternal:             http.StatusInternalServerError,
}

// renderCapabilityError answers a page request whose Registry.Invoke
// failed: the status of the error's code, its message (never an internal
// error's detail), and for a quota refusal a Retry-After header in
// seconds. It returns the status written.
func (h *Handler) renderCapabilityError(w http.ResponseWriter, r *http.Request, err error) int {
	code := capabilities.CodeOf(err)
	status, ok := capabilityStatus[code]
	if !ok || errors.Is(err, context.Canceled) {
		status = http.StatusInternalServerError
	}
	msg := "Something went wrong on our side. Please try again."
	if status < 500 {
		msg = refusedMessage
		if e, ok := errors.AsType[*capabilities.Error](err); ok {
			msg = pageMessage(e.Message)
		}
	}
	if at, ok := capabilities.RetryAfterOf(err); ok {
		secs := int64(math.Ceil(time.Until(at).Seconds()))
		w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	}
	if status >= 500 {
		h.log.ErrorContext(r.Context(), "web: capability failed", "err", err)
	}
	h.renderError(w, r, status, msg)
	return status
}
