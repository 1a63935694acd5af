package web

import (
	"context"
	"errors"
	"math"
	"net/http"
	"slices"
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

// formRefusal is how a form shown again answers a refusal the person can
// act on from it: when err is a capability refusal with one of codes (any
// refusal but an internal error when codes is empty), it returns the
// status of the one table for a form (formStatus), the refusal's message
// as a sentence (pageMessage) and true, and sets Retry-After for a refusal
// that says when to retry. Any other error is not the form's to show: the
// caller answers it with invokeFailed or renderCapabilityError.
func formRefusal(w http.ResponseWriter, err error, codes ...capabilities.Code) (status int, msg string, ok bool) {
	e, isCE := errors.AsType[*capabilities.Error](err)
	if !isCE || capabilityStatus(err) >= 500 || len(codes) > 0 && !slices.Contains(codes, e.Code) {
		return 0, "", false
	}
	setRetryAfter(w, err)
	return formStatus(err), pageMessage(e.Message), true
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
