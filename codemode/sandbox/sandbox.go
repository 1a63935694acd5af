package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Host is how a program reaches the world. Every method runs on the run's
// goroutine, with the run's context (cancelled at the deadline); a method
// that ignores its context holds the run's engine past its timeout (Run
// itself returns at the deadline, see Stuck).
type Host interface {
	// Call runs the named capability with JSON arguments and returns its
	// JSON result.
	Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error)
	// Fetch sends an HTTP request described as JSON {url, method?, headers?,
	// body?} and returns JSON {status, url, headers, body, bodyEncoding?}.
	// With bodyEncoding "base64", body is the base64 of the bytes; the
	// program sees them as text (UTF-8, invalid bytes replaced).
	Fetch(ctx context.Context, req json.RawMessage) (json.RawMessage, error)
	// Storage runs one storage operation ("get", "set", "delete", "list")
	// with JSON arguments {key, value, prefix, cursor, limit}.
	Storage(ctx context.Context, op string, args json.RawMessage) (json.RawMessage, error)
}

// Resolver resolves static imports (and dynamic import()). nil: every
// import is refused ("imports are not available").
type Resolver interface {
	// Resolve maps the specifier written in module referrer ("" for the
	// program itself) to a canonical module name, or an error, shown to the
	// program as "module not found: <specifier>" (or as the Message of a
	// *HostError). Canonical names starting with "<" are the sandbox's own
	// and are refused.
	Resolve(ctx context.Context, referrer, specifier string) (string, error)
	// Load returns the source of a canonical module name.
	Load(ctx context.Context, name string) (string, error)
}

// Program is what one run evaluates: either Code, or Entry.
type Program struct {
	// Code is the body of an async function: it may `await`, and what it
	// `return`s is the result. Static `import` declarations at the very top
	// of Code (before any other statement) are allowed and resolved through
	// Resolver. Code runs as strict-mode module code.
	Code string
	// Entry, when Module is set instead of Code, calls one export of a
	// module: the run imports Module (through Resolver, referrer ""), calls
	// the export named Export ("" for "default") with Args (JSON; absent =
	// undefined) and awaits it; its value is the result.
	Module, Export string
	Args           json.RawMessage
	// Capabilities are the names bound as functions on the global `codemode`
	// object: `await codemode.<name>(args)` calls Host.Call(name, JSON(args))
	// (args undefined: "{}") and resolves to the parsed JSON result; a
	// HostError rejects with a JS Error carrying .code.
	Capabilities []string
	Resolver     Resolver
	Host         Host
	Limits       Limits
	// Release, when set, is called once the run's engine has ended: as Run
	// returns, or later for an engine still caught in a built-in function
	// past the deadline (see Stuck). Pass a Gate's release here so that a
	// slot is free only when its engine no longer burns a core.
	Release func()
}

// Outcome is what a run produced. Err is set when the run failed; Result is
// then null.
type Outcome struct {
	Result        json.RawMessage `json:"result"` // JSON of the returned value; "null" for undefined
	Logs          []Log           `json:"logs,omitempty"`
	LogsTruncated bool            `json:"logsTruncated,omitempty"`
	HostCalls     int             `json:"hostCalls"`
	Duration      time.Duration   `json:"duration"`
	Err           *RunError       `json:"error,omitempty"`
}

// Log is one console call of the program.
type Log struct {
	Level   string    `json:"level" jsonschema:"the console method that wrote it" schema:"enum=log|info|warn|error|debug"`
	Message string    `json:"message"` // the arguments formatted like a console does (strings as is, others JSON)
	At      time.Time `json:"at"`
}

// Run evaluates p in a fresh VM that is closed before Run returns. Nothing
// survives between runs. The returned error is only for misuse (nil Host,
// both Code and Module, neither, ...); every failure of the program itself
// is Outcome.Err.
func Run(ctx context.Context, p Program) (Outcome, error) {
	if err := p.check(); err != nil {
		return Outcome{}, err
	}
	start := time.Now()
	out := newRun(p).start(ctx)
	out.Duration = time.Since(start)
	return out, nil
}

func (p *Program) check() error {
	switch {
	case p.Host == nil:
		return errors.New("sandbox: Program.Host is nil")
	case p.Code != "" && p.Module != "":
		return errors.New("sandbox: Program has both Code and Module")
	case p.Code == "" && p.Module == "":
		return errors.New("sandbox: Program has neither Code nor Module")
	case p.Code != "" && (p.Export != "" || p.Args != nil):
		return errors.New("sandbox: Program.Export and Program.Args go with Module, not Code")
	case p.Module != "" && p.Resolver == nil:
		return errors.New("sandbox: Program.Module needs a Resolver")
	case len(p.Args) > 0 && !json.Valid(p.Args):
		return errors.New("sandbox: Program.Args is not valid JSON")
	}
	for _, name := range p.Capabilities {
		if name == "" {
			return errors.New("sandbox: Program.Capabilities has an empty name")
		}
	}
	return nil
}
