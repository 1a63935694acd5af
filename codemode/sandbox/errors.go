package sandbox

import (
	"fmt"
	"time"
)

// HostError is an error a Host (or a Resolver) returns that the program may
// see and catch: it becomes a JS Error with .code and .message. Any other
// error also becomes a catchable JS Error, with code "internal" and message
// "internal error": the Go error text never reaches the program.
type HostError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error implements error.
func (e *HostError) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Code + ": " + e.Message
}

// Kinds of RunError.
const (
	KindLimit     = "limit"     // a limit of Limits ended the run; Limit names it
	KindException = "exception" // the program threw and did not catch it, or its promise never settled
	KindSyntax    = "syntax"    // the program, or a module it imports, does not parse
	KindCancelled = "cancelled" // the caller's context ended the run
	KindBusy      = "busy"      // a Gate had no room in time (see BusyError)
	KindInternal  = "internal"  // the sandbox itself failed (a panic in the engine, a host or a resolver)
)

// Names of the limits in RunError.Limit, one per field of Limits but Logs,
// which never fails a run.
const (
	LimitMemory    = "memory"
	LimitTimeout   = "timeout"
	LimitStack     = "stack"
	LimitResult    = "result"
	LimitHostCalls = "hostCalls"
)

// RunError is a failed run. Limit names the limit hit ("memory", "timeout",
// "stack", "result", "hostCalls") or is "" for the program's own error (an
// uncaught exception: Message is its message, Stack its JS stack when there
// is one; a syntax error: Kind "syntax").
type RunError struct {
	Kind    string `json:"kind"`            // one of the Kind constants
	Limit   string `json:"limit,omitempty"` // one of the Limit constants, for Kind "limit"
	Message string `json:"message"`         // one sentence a person or model understands
	Stack   string `json:"stack,omitempty"` // the JS stack, with the sandbox's own frames removed
	// Line and Column locate a syntax error in the program (1-based), when
	// the engine reports where it is.
	Line   int `json:"line,omitempty"`
	Column int `json:"column,omitempty"`

	// cause is what went wrong inside the sandbox for Kind "internal", for
	// the operator's logs (see Unwrap). It is never shown to the program.
	cause error
}

// Error implements error.
func (e *RunError) Error() string { return "sandbox: " + e.Message }

// Unwrap returns the Go-side cause of an internal error (a recovered panic,
// a misbehaving Host), for logging. It is nil for every other kind.
func (e *RunError) Unwrap() error { return e.cause }

// BusyError is what Gate.Acquire returns when no slot freed up within the
// gate's wait. It reads as a RunError of Kind "busy" through errors.As.
type BusyError struct {
	// RetryAfter is how long the caller should wait before trying again.
	RetryAfter time.Duration
}

// Error implements error.
func (e *BusyError) Error() string { return "sandbox: " + e.message() }

func (e *BusyError) message() string {
	return fmt.Sprintf("too many programs are running right now; retry in %s", e.RetryAfter.Round(time.Second))
}

// RunError returns e as the RunError a caller reports for a run that could
// not start.
func (e *BusyError) RunError() *RunError {
	return &RunError{Kind: KindBusy, Message: e.message()}
}

// As lets errors.As find a *RunError in a *BusyError.
func (e *BusyError) As(target any) bool {
	if t, ok := target.(**RunError); ok {
		*t = e.RunError()
		return true
	}
	return false
}

func limitError(limit, message string) *RunError {
	return &RunError{Kind: KindLimit, Limit: limit, Message: message}
}

func internalError(cause error) *RunError {
	return &RunError{Kind: KindInternal, Message: "the sandbox failed with an internal error", cause: cause}
}
