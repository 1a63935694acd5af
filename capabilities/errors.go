package capabilities

import (
	"errors"
	"fmt"
	"time"
)

// Code is a domain error code. Transports answer it in their own
// vocabulary through one table, HTTPStatus and RPCCode (status.go): a new
// Code needs its row there.
type Code string

// The domain error codes.
const (
	// CodeNotFound: no such capability for this caller, or no such object.
	// A capability the caller may not see answers exactly like an unknown one.
	CodeNotFound Code = "not_found"
	// CodeInvalidInput: the arguments do not match the input schema, or a
	// handler refuses them.
	CodeInvalidInput Code = "invalid_input"
	// CodeAccountSuspended: the account is suspended; nothing runs.
	CodeAccountSuspended Code = "account_suspended"
	// CodeAccountDeleting: the account is being deleted (or could not be
	// loaded); only read-only capabilities run.
	CodeAccountDeleting Code = "account_deleting"
	// CodeInsufficientScope: the access token lacks a scope the capability
	// requires; the client may obtain it and retry.
	CodeInsufficientScope Code = "insufficient_scope"
	// CodeQuotaExceeded: the caller's quota refuses the call.
	CodeQuotaExceeded Code = "quota_exceeded"
	// CodeConflict: the call conflicts with the current state of the object.
	CodeConflict Code = "conflict"
	// CodeUnsupported: the client cannot do what the handler asked of it
	// (elicitation or sampling not offered by this client).
	CodeUnsupported Code = "unsupported"
	// CodeSecondFactorRequired: the server requires a second factor for
	// this call (an admin capability, when admins must use one) and the
	// caller's account has none; the message says where to set one up.
	CodeSecondFactorRequired Code = "second_factor_required"
	// CodeInternal: anything else. Its detail is logged, never shown.
	CodeInternal Code = "internal"
)

// Error is a domain error: a code, a message safe to show to the caller,
// and an optional wrapped cause that is logged but never shown.
type Error struct {
	Code    Code
	Message string
	// Scopes lists the missing scopes of a CodeInsufficientScope error.
	Scopes []string
	// RetryAfter, when set, is when the call may succeed again (a
	// CodeQuotaExceeded error says when the quota resets). Transports
	// read it with RetryAfterOf.
	RetryAfter time.Time
	Err        error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("capabilities: %s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("capabilities: %s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns a domain error with a message safe to show the caller.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the domain code of err: the code of the first *Error in its
// chain, or CodeInternal.
func CodeOf(err error) Code {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return CodeInternal
}

// RetryAfterOf returns the first RetryAfter set by an *Error in err's
// chain, so that a wrapped quota refusal still says when to retry.
func RetryAfterOf(err error) (time.Time, bool) {
	for err != nil {
		if e, ok := err.(*Error); ok && !e.RetryAfter.IsZero() {
			return e.RetryAfter, true
		}
		err = errors.Unwrap(err)
	}
	return time.Time{}, false
}

// Sentinel errors.
var (
	// ErrUnknownUser is returned by a CallerLoader for a subject with no
	// account.
	ErrUnknownUser = errors.New("capabilities: unknown user")
	// ErrUnsupported is returned by Call methods the client cannot serve.
	ErrUnsupported = &Error{Code: CodeUnsupported, Message: "the client does not support this request"}
)

// errNotFound is the one answer for unknown and hidden capabilities.
func errNotFound(kind, name string) *Error {
	return Errorf(CodeNotFound, "%s %q not found", kind, name)
}
