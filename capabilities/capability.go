package capabilities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// Handler runs a capability with raw JSON arguments that have already been
// validated against its input schema.
type Handler func(ctx context.Context, call *Call, args json.RawMessage) (Result, error)

// Annotations describe a capability's effects to clients. Every capability
// sets them explicitly (a nil *Annotations is refused at registration),
// because clients assume the worst of an unannotated tool.
type Annotations struct {
	ReadOnly    bool // does not modify anything
	Destructive bool // may delete or overwrite (only meaningful when not ReadOnly)
	Idempotent  bool // repeating the call has no further effect
	OpenWorld   bool // reaches outside this server (the internet, other services)
}

// Requirement is what a caller needs to see and run a capability. The zero
// value requires an authenticated caller and nothing more; every field adds
// a condition, and all of them must hold.
type Requirement struct {
	// Role the caller must hold.
	Role string
	// Permissions the caller must all hold.
	Permissions []Permission
	// Feature flag that must be enabled for the caller.
	Feature string
	// InteractiveOnly refuses background callers (jobs, package runtimes).
	InteractiveOnly bool
	// SessionOnly keeps the capability to a person signed in to the web
	// shell with a session cookie (Caller.Session): agents with access
	// tokens (interactive or not), jobs, schedules and the CLI neither see
	// nor call it. For what the reference keeps session-authenticated:
	// revealing a secret, changing the password, deleting the account.
	// A session-only capability does not run for an account being deleted
	// even when it is read-only (unless DuringDeletion).
	SessionOnly bool
	// DuringDeletion lets the capability run for an account being deleted,
	// which is otherwise refused every write, every session-only read and
	// every read kept to the admin role: only for what finishes that
	// deletion (retrying a deletion that failed midway).
	DuringDeletion bool
	// Scopes the access token must all carry. Unlike the other conditions,
	// a missing scope does not hide the capability: the client is told which
	// scope to obtain (step-up authorization).
	Scopes []string
	// Public lets an unauthenticated caller (Anonymous, the zero Caller)
	// see and run the capability: a visitor of a public web page who is
	// not signed in. Only a read-only capability may be public, and not
	// one kept to a role, to sessions, or to an account being deleted
	// (Register refuses those). For an unauthenticated caller a public
	// capability's Permissions and Scopes are not asked for (there is no
	// account and no token); Feature, InteractiveOnly and the caller's
	// confinement still apply. A signed-in caller is checked exactly as
	// for any other capability. The handler gets the unauthenticated
	// caller as is (Call.Caller.Authenticated() is false) and must answer
	// with public data only. MCP never makes an unauthenticated call (it
	// needs a token), so public only matters to web pages.
	Public bool
	// Operator keeps the capability to the server's operator
	// (OperatorCaller): the command line's account actions. No other
	// caller sees or runs it (it answers them, admins included, as
	// unknown), and the operator's caller runs nothing else. An operator
	// capability asks for no role, permission, scope, feature, session or
	// public access (Register refuses those): the operator holds none.
	Operator bool
}

// Capability is one named operation. Build one with Define; the zero value
// is not valid.
type Capability struct {
	Name        string // camelCase, unique in a registry
	Domain      string // the area it belongs to, e.g. "account"
	Title       string
	Description string // required: it is what a model reads
	Annotations *Annotations
	Requires    Requirement
	// InputSchema and OutputSchema are JSON Schema objects. OutputSchema is
	// nil when the capability returns free-form content.
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	Handler      Handler
	// Task says whether the capability may run as a task (see Call.Detach):
	// TaskNever (the default), TaskOptional or TaskRequired.
	Task TaskSupport
	// Describe, when set, returns the description one caller is shown in
	// a listing instead of Description (see Registry.DescriptionFor): for
	// text that depends on what the caller may do, such as code mode's
	// declarations of the caller's capabilities. It must be quick and
	// fall back to Description itself when it has nothing better.
	Describe func(ctx context.Context, caller Caller) string

	input *jsonschema.Resolved
	flat  *flatObject // input's compiled check, when input is that simple
	err   error       // a definition error found by Define, reported by Register
}

// TaskSupport says whether a capability may run as a task: a long-running
// call that a client negotiating tasks (MCP 2026-07-28 tasks extension)
// gets back at once as a task id and follows with tasks/get.
type TaskSupport string

// The task supports.
const (
	TaskNever    TaskSupport = ""
	TaskOptional TaskSupport = "optional" // a task for clients that can follow one, else an ordinary call
	TaskRequired TaskSupport = "required" // refused to clients that cannot follow a task
)

// Spec declares a capability with typed input and output for Define.
type Spec[In, Out any] struct {
	Name, Domain, Title, Description string
	Annotations                      *Annotations
	Requires                         Requirement
	Task                             TaskSupport
	// Handler receives the decoded input. When Out is Result it is returned
	// as is; otherwise the value becomes the structured content (and a JSON
	// text block for clients that do not read structured content).
	Handler func(ctx context.Context, call *Call, in In) (Out, error)
}

// Define builds a capability from a typed spec: the input schema comes from
// In and the output schema from Out (none when Out is Result). In must be a
// struct (use struct{} for no arguments). Definition errors surface at
// Register. The schemas follow the Go types:
//
//   - field names and omission follow encoding/json; fields without
//     omitempty (or omitzero) are required;
//   - a `jsonschema:"…"` tag is the field's description (what a model reads:
//     give every input field one);
//   - a `schema:"…"` tag (SchemaTag) adds constraints: enum, minimum,
//     maximum, minLength, maxLength, minItems, maxItems, pattern, format and
//     default, e.g. `schema:"enum=open|closed"` or
//     `schema:"minimum=1,maximum=1000,default=50"`;
//   - a slice is "type":"array", never a union with null: a nil slice in the
//     output is sent as [] and a nil map as {} (see NormalizeOutput);
//   - a pointer field is the pointee's type: optional in the input (absent
//     and null both leave it nil), and in the output omitted when nil if it
//     has omitempty (without omitempty its schema admits null);
//   - json.RawMessage is any JSON value and []byte a base64 string.
//
// Arguments are validated against the input schema before the handler
// runs (an enum, a bound or a pattern that does not hold is refused with
// CodeInvalidInput and a message naming the argument and what it must be);
// a null optional argument counts as absent, and an absent argument with a
// default is decoded as that default.
func Define[In, Out any](s Spec[In, Out]) Capability {
	c := Capability{
		Name: s.Name, Domain: s.Domain, Title: s.Title, Description: s.Description,
		Annotations: s.Annotations, Requires: s.Requires, Task: s.Task,
	}
	inSchema, err := deriveSchema(reflect.TypeFor[In](), useInput)
	if err != nil {
		c.err = fmt.Errorf("input schema: %w", err)
		return c
	}
	in, err := json.Marshal(inSchema)
	if err != nil {
		c.err = fmt.Errorf("input schema: %w", err)
		return c
	}
	c.InputSchema = in
	// defaults is the input schema when it declares defaults to apply.
	var defaults *jsonschema.Schema
	if hasDefaults(inSchema) {
		defaults = inSchema
	}
	freeForm := reflect.TypeFor[Out]() == reflect.TypeFor[Result]()
	if !freeForm {
		out, err := schemaFor[Out](useOutput)
		if err != nil {
			c.err = fmt.Errorf("output schema: %w", err)
			return c
		}
		c.OutputSchema = out
	}
	h := s.Handler
	if h == nil {
		return c
	}
	flat := compileFlatDecoder(reflect.TypeFor[In]())
	c.Handler = func(ctx context.Context, call *Call, args json.RawMessage) (Result, error) {
		var in In
		if defaults != nil {
			withDefaults, err := applyInputDefaults(defaults, args)
			if err != nil {
				return Result{}, &Error{Code: CodeInvalidInput, Message: "arguments do not match the input schema", Err: err}
			}
			args = withDefaults
		}
		if !absent(args) && (flat == nil || !flat.decode(args, reflect.ValueOf(&in).Elem())) {
			// json.Unmarshal, not a Decoder: no decoder and buffer to
			// allocate per call, and trailing data after the value is refused.
			var zero In
			in = zero // what the one-pass decoding may have set
			if err := json.Unmarshal(args, &in); err != nil {
				return Result{}, &Error{Code: CodeInvalidInput, Message: "arguments do not match the input schema", Err: err}
			}
		}
		out, err := h(ctx, call, in)
		if err != nil {
			return Result{}, err
		}
		if r, ok := any(out).(Result); ok {
			return r, nil
		}
		out = NormalizeOutput(out)
		text, err := json.Marshal(out)
		if err != nil {
			return Result{}, fmt.Errorf("capabilities: %s: encode output: %w", s.Name, err)
		}
		return Result{Content: []Content{Text{Text: string(text)}}, Structured: out}, nil
	}
	return c
}

// applyInputDefaults returns args with the defaults of s set for the
// properties it leaves out.
func applyInputDefaults(s *jsonschema.Schema, args json.RawMessage) (json.RawMessage, error) {
	var v any = map[string]any{}
	if !absent(args) {
		t, err := decodeTree(args)
		if err != nil {
			return nil, err
		}
		v = t
	}
	if !applyDefaults(s, v) {
		return args, nil
	}
	return json.Marshal(v)
}

var (
	capabilityName = regexp.MustCompile(`^[a-z][a-zA-Z0-9]{0,63}$`)
	domainName     = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
)

// validate checks a definition and resolves its input schema.
func (c *Capability) validate(vocab *Vocabulary, names *regexp.Regexp) error {
	if c.err != nil {
		return c.err
	}
	var errs []error
	if !names.MatchString(c.Name) {
		errs = append(errs, fmt.Errorf("name must match %s", names))
	}
	if !domainName.MatchString(c.Domain) {
		errs = append(errs, errors.New("domain must be a lowercase word"))
	}
	if c.Description == "" {
		errs = append(errs, errors.New("description is required"))
	}
	if c.Annotations == nil {
		errs = append(errs, errors.New("annotations must be set explicitly"))
	} else if c.Annotations.ReadOnly && c.Annotations.Destructive {
		errs = append(errs, errors.New("a read-only capability cannot be destructive"))
	}
	if c.Handler == nil {
		errs = append(errs, errors.New("handler is required"))
	}
	if r := c.Requires; r.Public {
		switch {
		case c.Annotations == nil || !c.Annotations.ReadOnly:
			errs = append(errs, errors.New("a public capability must be read-only"))
		case r.Role != "" || r.SessionOnly || r.DuringDeletion:
			errs = append(errs, errors.New("a public capability cannot require a role, a session or run during deletion"))
		}
	}
	if r := c.Requires; r.Operator && (r.Public || r.Role != "" || len(r.Permissions) > 0 || len(r.Scopes) > 0 || r.Feature != "" || r.SessionOnly) {
		errs = append(errs, errors.New("an operator capability cannot require a role, permissions, scopes, a feature or a session, nor be public"))
	}
	for _, p := range c.Requires.Permissions {
		if !vocab.Has(p) {
			errs = append(errs, fmt.Errorf("permission %q is not in the vocabulary", p))
		}
	}
	for _, s := range c.Requires.Scopes {
		if s == "" {
			errs = append(errs, errors.New("empty scope"))
		}
	}
	if len(c.InputSchema) == 0 {
		c.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	rs, err := resolveObjectSchema(c.InputSchema)
	if err != nil {
		errs = append(errs, fmt.Errorf("input schema: %w", err))
	}
	c.input = rs
	if rs != nil {
		c.flat = compileFlatObject(rs.Schema())
	}
	if len(c.OutputSchema) > 0 {
		if _, err := resolveObjectSchema(c.OutputSchema); err != nil {
			errs = append(errs, fmt.Errorf("output schema: %w", err))
		}
	}
	return errors.Join(errs...)
}

func resolveObjectSchema(raw json.RawMessage) (*jsonschema.Resolved, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	if s.Type != "object" {
		return nil, errors.New(`type must be "object"`)
	}
	return s.Resolve(nil)
}

// validateInput checks raw arguments against the input schema and returns
// the arguments the handler gets: absent arguments are an empty object, and
// a null given for an optional property that does not admit null is
// dropped (it means the same as leaving the property out).
func (c *Capability) validateInput(args json.RawMessage) (json.RawMessage, error) {
	if c.flat != nil && c.flat.validRaw(args) {
		return args, nil // the plainest arguments, checked as they are
	}
	var v any
	if absent(args) {
		v = map[string]any{}
	} else if err := json.Unmarshal(args, &v); err != nil {
		return nil, &Error{Code: CodeInvalidInput, Message: "arguments are not valid JSON"}
	}
	// JSON writes U+0000 only as the escape \u0000: arguments without it
	// are not walked.
	if bytes.Contains(args, nulEscape) {
		if at, ok := nulAt(v, ""); ok {
			return nil, &Error{Code: CodeInvalidInput, Message: "invalid arguments: " + at + " contains the character U+0000 (NUL), which no argument may hold"}
		}
	}
	schema := c.input.Schema()
	if dropNulls(schema, v) {
		// Rewrite from a tree that keeps numbers exactly as written.
		tree, err := decodeTree(args)
		if err != nil {
			return nil, &Error{Code: CodeInvalidInput, Message: "arguments are not valid JSON"}
		}
		dropNulls(schema, tree)
		if args, err = json.Marshal(tree); err != nil {
			return nil, &Error{Code: CodeInvalidInput, Message: "arguments are not valid JSON"}
		}
	}
	if c.flat != nil && c.flat.valid(v) {
		return args, nil
	}
	if err := c.input.Validate(v); err != nil {
		return nil, &Error{Code: CodeInvalidInput, Message: "invalid arguments: " + describeInvalid(schema, v, err)}
	}
	return args, nil
}

var nulEscape = []byte(`\u0000`)

// nulAt finds a string, or an object key, in v holding U+0000 and names
// where: neither database stores it in text (PostgreSQL refuses it, SQLite
// ends a statement's text at it), so every capability refuses it as bad
// input instead of failing on it in storage.
func nulAt(v any, path string) (string, bool) {
	switch t := v.(type) {
	case string:
		if strings.IndexByte(t, 0) >= 0 {
			if path == "" {
				return "the arguments", true
			}
			return "argument " + strconv.Quote(path), true
		}
	case map[string]any:
		for k, e := range t {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if strings.IndexByte(k, 0) >= 0 {
				return "the name of argument " + strconv.Quote(p), true
			}
			if at, ok := nulAt(e, p); ok {
				return at, true
			}
		}
	case []any:
		for i, e := range t {
			if at, ok := nulAt(e, path+"["+strconv.Itoa(i)+"]"); ok {
				return at, true
			}
		}
	}
	return "", false
}

// absent reports whether raw arguments are missing: empty or JSON null.
func absent(args json.RawMessage) bool {
	t := bytes.TrimSpace(args)
	return len(t) == 0 || string(t) == "null"
}
