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

// capabilityStatus is the HTTP status a page answers a failed
// Registry.Invoke with: the status of the error's code in capabilities'
// one table (capabilities.HTTPStatus), 500 for an error that carries no
// domain code or a cancelled request.
func capabilityStatus(err error) int {
	if errors.Is(err, context.Canceled) {
		return http.StatusInternalServerError
	}
	return capabilities.HTTPStatus(capabilities.CodeOf(err))
}

// formStatus is the status of a form shown again with a refusal's
// message: 422 for a mistake in its fields (invalid input), else the
// status of the refusal's code (capabilityStatus; a quota refusal is a
// 429, whose Retry-After setRetryAfter writes).
func formStatus(err error) int {
	if capabilities.CodeOf(err) == capabilities.CodeInvalidInput {
		return http.StatusUnprocessableEntity
	}
	return capabilityStatus(err)
}

// renderCapabilityError answers a page request whose Registry.Invoke
// failed: the status of the error's code (capabilityStatus), its message (never an internal
// error's detail), and for a quota refusal a Retry-After header in
// seconds. It returns the status written.
func (h *Handler) renderCapabilityError(w http.ResponseWriter, r *http.Request, err error) int {
	status := capabilityStatus(err)
	msg := "Something went wrong on our side. Please try again."
	if status < 500 {
		msg = refusedMessage
		if e, ok := errors.AsType[*capabilities.Error](err); ok {
			msg = pageMessage(e.Message)
		}
	}
	setRetryAfter(w, err)
	if status >= 500 {
		h.log.ErrorContext(r.Context(), "web: capability failed", "err", err)
	}
	h.renderError(w, r, status, msg)
	return status
}

// setRetryAfter sets the Retry-After header, in seconds, of an answer to
// a refusal that says when to retry (a quota's reset), so that a form
// shown again with a 429 says it as well as the error page.
func setRetryAfter(w http.ResponseWriter, err error) {
	if at, ok := capabilities.RetryAfterOf(err); ok {
		secs := int64(math.Ceil(time.Until(at).Seconds()))
		w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	}
}
