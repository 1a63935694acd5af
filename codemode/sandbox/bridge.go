package sandbox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"modernc.org/quickjs"
)

// bridge is the one host function of a VM (see prelude.js). Its first
// argument names the operation; the others are strings. Host operations
// return a JSON reply, {"value": ...} or {"error": {"code", "message"}},
// that the prelude turns into a value or a thrown Error.
func (r *run) bridge(args []any) (reply any, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.recoverHost(p)
			reply, err = nil, nil
		}
	}()
	if r.ended() {
		// The run is over: whatever JS is still running must stop too.
		r.vm.Interrupt()
		return nil, nil
	}
	switch op := str(args, 0); op {
	case "call":
		return r.call(str(args, 1), str(args, 2)), nil
	case "fetch":
		return r.hostCall(func(ctx context.Context) (json.RawMessage, error) {
			res, err := r.p.Host.Fetch(ctx, json.RawMessage(str(args, 1)))
			if err != nil {
				return nil, err
			}
			return jsResponse(res)
		}), nil
	case "storage":
		return r.storage(str(args, 1), str(args, 2)), nil
	case "log":
		return r.log(str(args, 1), str(args, 2)), nil
	case "result":
		r.resultJSON(str(args, 1))
	case "resultTooBig":
		r.settle(nil, r.resultTooBig(num(args, 1)))
	case "throw", "resultError":
		isNull, _ := arg(args, 4).(bool)
		e := r.thrown(str(args, 1), str(args, 2), str(args, 3), isNull)
		if op == "resultError" && e.Kind == KindException {
			e.Message = "the program's result cannot be encoded as JSON: " + e.Message
			e.Stack = ""
		}
		r.settle(nil, e)
	default:
		return nil, errors.New("sandbox: unknown operation")
	}
	return nil, nil
}

// recoverHost ends the run after a panic in Go code the program called (a
// Host, a Resolver). Interrupting, rather than letting the panic go up
// through the engine, keeps the VM usable for its own teardown.
func (r *run) recoverHost(p any) {
	r.halt(internalError(fmt.Errorf("sandbox: panic in host: %v", p)))
}

func arg(args []any, i int) any {
	if i < len(args) {
		return args[i]
	}
	return nil
}

func str(args []any, i int) string {
	s, _ := arg(args, i).(string)
	return s
}

func num(args []any, i int) int {
	switch n := arg(args, i).(type) {
	case int:
		return n
	case float64:
		return int(n)
	}
	return 0
}

func (r *run) call(name, args string) any {
	if !r.caps[name] {
		// Only reachable through the raw bridge, which the program cannot
		// reach: codemode has exactly the capabilities.
		return errorReply(&HostError{Code: "not_found", Message: "no capability named " + name})
	}
	return r.hostCall(func(ctx context.Context) (json.RawMessage, error) {
		return r.p.Host.Call(ctx, name, json.RawMessage(args))
	})
}

func (r *run) storage(op, args string) any {
	switch op {
	case "get", "set", "delete", "list":
	default:
		return errorReply(&HostError{Code: "invalid", Message: "no storage operation named " + op})
	}
	return r.hostCall(func(ctx context.Context) (json.RawMessage, error) {
		return r.p.Host.Storage(ctx, op, json.RawMessage(args))
	})
}

// hostCall counts one host call and makes it.
// Going past the limit, or past the deadline during the call, ends the run
// with an interrupt, which no try/catch of the program can hold back.
func (r *run) hostCall(do func(context.Context) (json.RawMessage, error)) any {
	if !r.countHostCall() {
		return nil
	}
	value, err := do(r.ctx)
	if r.ctx.Err() != nil {
		r.vm.Interrupt()
		return nil
	}
	if err != nil {
		return errorReply(err)
	}
	if len(value) == 0 {
		return `{"value":null}`
	}
	if !json.Valid(value) {
		return errorReply(errors.New("sandbox: the host returned invalid JSON"))
	}
	return `{"value":` + string(value) + `}`
}

// countHostCall counts one host call, or a module lookup, against
// Limits.HostCalls. Past the limit it ends the run and reports false.
func (r *run) countHostCall() bool {
	if r.hostCalls >= r.limits.HostCalls {
		r.halt(limitError(LimitHostCalls, fmt.Sprintf(
			"the program made more host calls (capabilities, fetch, storage and module lookups) than its limit of %d", r.limits.HostCalls)))
		return false
	}
	r.hostCalls++
	return true
}

// errorReply is the reply for a failed host call. Only a HostError shows
// the program what went wrong.
func errorReply(err error) string {
	e := &HostError{Code: "internal", Message: "internal error"}
	var he *HostError
	if errors.As(err, &he) {
		e = he
	}
	b, _ := json.Marshal(struct {
		Error *HostError `json:"error"`
	}{e})
	return string(b)
}

// jsResponse is the response of Host.Fetch as the prelude wants it: the
// body always as text.
func jsResponse(raw json.RawMessage) (json.RawMessage, error) {
	var res struct {
		Status       int             `json:"status"`
		URL          string          `json:"url"`
		Headers      json.RawMessage `json:"headers"`
		Body         string          `json:"body"`
		BodyEncoding string          `json:"bodyEncoding,omitempty"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("sandbox: fetch response: %w", err)
	}
	switch res.BodyEncoding {
	case "":
	case "base64":
		b, err := base64.StdEncoding.DecodeString(res.Body)
		if err != nil {
			return nil, fmt.Errorf("sandbox: fetch response body: %w", err)
		}
		res.Body = strings.ToValidUTF8(string(b), "\uFFFD")
		res.BodyEncoding = ""
	default:
		return nil, fmt.Errorf("sandbox: fetch response: unknown body encoding %q", res.BodyEncoding)
	}
	if len(res.Headers) == 0 || string(res.Headers) == "null" {
		res.Headers = json.RawMessage("{}")
	}
	return json.Marshal(res)
}

var logLevels = map[string]bool{"log": true, "info": true, "warn": true, "error": true, "debug": true}

// log keeps one console entry within Limits.Logs and returns the budget
// left. An entry counts as its message plus a newline, so that even empty
// entries use the budget up.
func (r *run) log(level, message string) int {
	if !logLevels[level] {
		level = "log"
	}
	left := r.limits.Logs - r.logBytes
	if len(message)+1 > left {
		r.logsTruncated = true
		if left <= 1 {
			r.logBytes = r.limits.Logs
			return 0
		}
		message = truncate(message, left-1)
	}
	// Errors the program logs show their stacks as its own code has them.
	r.logs = append(r.logs, Log{Level: level, Message: r.prog.fixFrames(message), At: time.Now()})
	r.logBytes += len(message) + 1
	return r.limits.Logs - r.logBytes
}

// truncate cuts s to at most n bytes, at a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (r *run) resultJSON(s string) {
	switch {
	case len(s) > r.limits.Result:
		r.settle(nil, r.resultTooBig(len(s)))
	case !json.Valid([]byte(s)):
		r.halt(internalError(errors.New("sandbox: the program's result is not valid JSON")))
	default:
		r.settle(json.RawMessage(s), nil)
	}
}

func (r *run) resultTooBig(atLeast int) *RunError {
	return limitError(LimitResult, fmt.Sprintf("the program's result is too large: at least %s of JSON, over the limit of %s",
		byteSize(int64(atLeast)), byteSize(int64(r.limits.Result))))
}

// preludeConfig is the CONFIG of prelude.js: the function the prelude
// evaluates to takes it as JSON.
type preludeConfig struct {
	Bridge       string   `json:"bridge"`
	Capabilities []string `json:"capabilities"`
	LogLimit     int      `json:"logLimit"`
	MaxLength    int64    `json:"maxLength"`
	MaxMessage   int      `json:"maxMessage"`
	ResultLimit  int      `json:"resultLimit"`
	// Module is set when the program is a module, run through the driver:
	// run then calls its export Export, with Args, and the prelude hands
	// run to the module "<sandbox>" (HandOff).
	Module  string  `json:"module,omitempty"`
	Export  string  `json:"export,omitempty"`
	Args    *string `json:"args,omitempty"`
	HandOff bool    `json:"handOff,omitempty"`
}

func (r *run) preludeConfig() string {
	c := preludeConfig{
		Bridge:       bridgeName,
		Capabilities: r.p.Capabilities,
		LogLimit:     r.limits.Logs,
		MaxLength:    r.limits.Memory / 16, // bytes per element of a dense array
		MaxMessage:   maxMessage,
		ResultLimit:  r.limits.Result,
	}
	if c.Capabilities == nil {
		c.Capabilities = []string{}
	}
	if len(r.caps) != len(c.Capabilities) { // each name once: codemode lists its names as a Proxy's keys
		c.Capabilities = slices.Sorted(maps.Keys(r.caps))
	}
	switch {
	case r.prog == nil:
		c.Module, c.Export, c.HandOff = r.p.Module, "default", true
		if r.p.Export != "" {
			c.Export = r.p.Export
		}
		if len(r.p.Args) > 0 {
			args := string(r.p.Args)
			c.Args = &args
		}
	case r.prog.module:
		c.Module, c.Export, c.HandOff = programModule, "default", true
	}
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // strings and ints only
	}
	return string(b)
}

// errStopped is what normalize and load return once the run is over; the
// interrupt they raise ends the JS anyway.
var errStopped = errors.New("the run is over")

// normalize resolves a specifier. The driver's imports are the sandbox's
// own modules; every other import goes to the Resolver, with the program
// (a module, or a script: see program) as referrer "".
func (r *run) normalize(_ *quickjs.VM, base, specifier string) (name string, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.recoverHost(p)
			name, err = "", errStopped
		}
	}()
	if r.ended() {
		r.vm.Interrupt()
		return "", errStopped
	}
	if base == driverModule && r.driven() {
		switch {
		case specifier == preludeModule:
			return preludeModule, nil
		case specifier == programModule && r.prog != nil:
			return programModule, nil
		case specifier == entryModule && r.prog == nil:
			return r.resolve("", r.p.Module)
		}
	}
	if r.prog != nil && base == r.prog.file {
		base = ""
	}
	return r.resolve(base, specifier)
}

// resolved is what the Resolver answered for one referrer and specifier.
type resolved struct {
	name string
	err  error
}

// resolve asks the Resolver, once per referrer and specifier in a run: the
// engine asks again each time import() runs. Each lookup counts as a host
// call, so that a loop of import() is bounded like a loop of capability
// calls.
func (r *run) resolve(referrer, specifier string) (string, error) {
	if r.p.Resolver == nil {
		return "", fmt.Errorf("cannot import %q: imports are not available", specifier)
	}
	key := [2]string{referrer, specifier}
	if res, ok := r.resolved[key]; ok {
		return res.name, res.err
	}
	if !r.countHostCall() {
		return "", errStopped
	}
	name, err := r.p.Resolver.Resolve(r.ctx, referrer, specifier)
	switch {
	case r.ctx.Err() != nil:
		r.vm.Interrupt()
		return "", errStopped
	case err != nil:
		err = moduleError(err, "module not found: "+specifier)
	case name == "" || strings.HasPrefix(name, "<"):
		name, err = "", errors.New("module not found: "+specifier)
	}
	if r.resolved == nil {
		r.resolved = map[[2]string]resolved{}
	}
	r.resolved[key] = resolved{name, err}
	return name, err
}

// load returns the source of a module normalize named.
func (r *run) load(_ *quickjs.VM, name string) (source string, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.recoverHost(p)
			source, err = "", errStopped
		}
	}()
	switch {
	case r.ended():
		r.vm.Interrupt()
		return "", errStopped
	case name == preludeModule && r.driven():
		return handOffSource, nil
	case name == programModule && r.prog != nil && r.prog.module:
		return r.prog.source, nil
	case r.p.Resolver == nil:
		return "", errors.New("imports are not available")
	}
	if !r.countHostCall() {
		return "", errStopped
	}
	source, err = r.p.Resolver.Load(r.ctx, name)
	switch {
	case r.ctx.Err() != nil:
		r.vm.Interrupt()
		return "", errStopped
	case err != nil:
		return "", moduleError(err, "cannot load module "+name)
	}
	return source, nil
}

// moduleError is what the program sees of a Resolver's error: the message
// of a HostError, or fallback, never the Go error text.
func moduleError(err error, fallback string) error {
	var he *HostError
	if errors.As(err, &he) {
		return errors.New(he.Message)
	}
	return errors.New(fallback)
}
