package codemode

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/codemode/sandbox"
	"github.com/enclave-mcp/enclave/storage"
)

// Output is what a run returns to its caller: execute, packageRun and
// every export answer with it.
type Output struct {
	Result        any           `json:"result" jsonschema:"the value the program returned (JSON); null when it failed"`
	Logs          []sandbox.Log `json:"logs" jsonschema:"console output, in order"`
	LogsTruncated bool          `json:"logsTruncated,omitempty" jsonschema:"true when console output went past the limit and the rest was dropped"`
	RunID         string        `json:"runId" jsonschema:"the run's record (runGet)"`
	DurationMs    int64         `json:"durationMs"`
	Error         *RunFailure   `json:"error,omitempty" jsonschema:"why the run failed, when it did"`
}

// Failed reports whether the run failed.
func (o Output) Failed() bool { return o.Error != nil }

// bindingExcluded reports whether a visible capability is left out of a
// program's codemode object: the ones that start runs themselves.
func bindingExcluded(name string) bool {
	return name == "execute" || name == "packageRun" || strings.HasPrefix(name, ExportPrefix)
}

// inner is the caller a program acts as: the same user, scopes and
// confinement, but never interactive and never a web session, so a
// capability that needs a person in the loop is refused with its normal
// error.
func inner(c capabilities.Caller) capabilities.Caller {
	c.Interactive, c.Session = false, false
	return c
}

// Execute runs code (the body of an async function) for caller.
func (s *Service) Execute(ctx context.Context, caller capabilities.Caller, code string, timeout time.Duration) (Output, error) {
	if strings.TrimSpace(code) == "" {
		return Output{}, invalid("code is empty: send the body of an async function, e.g. \"return await codemode.whoami({})\"")
	}
	if len(code) > MaxPackageBytes {
		return Output{}, invalid("code is larger than %d KiB: save it as a package instead", MaxPackageBytes>>10)
	}
	return s.run(ctx, caller, runInfo{kind: KindExecute}, sandbox.Program{Code: code}, timeout)
}

// RunExport calls an export of the caller's package (version 0: the
// latest) with args, as kind (KindExport or KindJob).
func (s *Service) RunExport(ctx context.Context, caller capabilities.Caller, pkg string, version int, export string, args json.RawMessage, kind string) (Output, error) {
	o, err := s.owner(ctx, caller)
	if err != nil {
		return Output{}, err
	}
	_, v, err := s.lookup(ctx, s.store.Reader, o, pkg, version)
	if err != nil {
		return Output{}, err
	}
	m, _, err := v.decode()
	if err != nil {
		return Output{}, err
	}
	if _, ok := m.Exports[export]; !ok {
		return Output{}, capabilities.Errorf(capabilities.CodeNotFound, "package %q (version %d) has no export %q", pkg, v.Version, export)
	}
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	info := runInfo{kind: kind, pkg: pkg, version: v.Version, export: export}
	prog := sandbox.Program{Module: moduleName(pkg, v.Version, m.Main), Export: export, Args: args}
	return s.run(ctx, caller, info, prog, 0)
}

// run evaluates prog for caller within the concurrency gate and records it.
func (s *Service) run(ctx context.Context, caller capabilities.Caller, info runInfo, prog sandbox.Program, timeout time.Duration) (Output, error) {
	if inRun(ctx) {
		return Output{}, errNested
	}
	o, err := s.owner(ctx, caller)
	if err != nil {
		return Output{}, err
	}
	release, err := s.gate.Acquire(ctx, caller.UserID)
	if err != nil {
		if busy, ok := errors.AsType[*sandbox.BusyError](err); ok {
			return Output{}, &capabilities.Error{Code: capabilities.CodeQuotaExceeded, RetryAfter: time.Now().Add(busy.RetryAfter),
				Message: fmt.Sprintf("code mode is busy (too many runs at once): retry in %s", busy.RetryAfter.Round(time.Second)), Err: err}
		}
		return Output{}, err
	}
	// The sandbox releases the slot once the engine has ended (later than
	// the answer for an engine caught in a built-in past its deadline).
	ctx = context.WithValue(ctx, inRunKey{}, true)
	acting := inner(caller)
	info.started = time.Now().UTC()
	info.id = newRunID(info.started)
	h := &host{s: s, caller: acting, calls: map[string]int{}, storageID: runStorageID(info), checked: time.Now()}
	prog.Capabilities = s.bindable(ctx, acting)
	prog.Resolver = &resolver{s: s, o: o, versions: map[string]versionRow{}}
	prog.Host = h
	prog.Release = release
	prog.Limits = s.cfg.Limits
	if timeout > 0 && timeout < prog.Limits.Timeout {
		prog.Limits.Timeout = timeout
	}
	s.recorder.begin()
	out, err := sandbox.Run(ctx, prog)
	if err != nil { // refused before it started: the slot was never handed over
		s.recorder.abandon()
		release()
		return Output{}, fmt.Errorf("codemode: run: %w", err)
	}
	s.record(ctx, o, info, out, h.calls)
	res := Output{Logs: out.Logs, LogsTruncated: out.LogsTruncated, RunID: info.id, DurationMs: out.Duration.Milliseconds()}
	if res.Logs == nil {
		res.Logs = []sandbox.Log{}
	}
	if out.Err != nil {
		// A program chooses its error's message: it gets no more room in
		// the answer than in the run record.
		res.Error = &RunFailure{Kind: out.Err.Kind, Limit: out.Err.Limit, Message: truncate(out.Err.Message, maxErrorBytes)}
	} else if len(out.Result) > 0 {
		res.Result = out.Result
	}
	return res, nil
}

func (s *Service) owner(ctx context.Context, c capabilities.Caller) (storage.Owner, error) {
	o, err := s.owners(ctx, c)
	return storage.Owner(o), err
}

// host is the world as one program sees it: every capability call, fetch
// and storage operation goes through Registry.Invoke as the program's
// caller. It is used by the run's goroutine only.
type host struct {
	s       *Service
	caller  capabilities.Caller
	calls   map[string]int
	checked time.Time // when the caller's account was last read
	// storageID is the bucket the storage binding uses (runStorageID).
	storageID string
}

// runStorageID is the storage bucket of a run: the run's own
// (exec:<runId>) for execute, the package's (package:<name>) for its
// exports and jobs, so a package keeps its state from run to run.
func runStorageID(info runInfo) string {
	if info.pkg != "" {
		return buckets.PackageStorageID(info.pkg)
	}
	return buckets.ExecStorageID(info.id)
}

// refreshEvery bounds how long a run acts on what it knew of its caller's
// account: a suspension, deletion or role change reaches a running program
// within this time.
const refreshEvery = 100 * time.Millisecond

// refresh reads the caller's account state, roles and permissions again
// when the last read is older than refreshEvery, keeping everything the
// credential itself decided (scopes, confinement, non-interactive). A
// failed read leaves the caller with no roles and an unknown state: reads
// only (fail closed).
func (h *host) refresh(ctx context.Context) {
	if h.s.cfg.Loader == nil || time.Since(h.checked) < refreshEvery {
		return
	}
	h.checked = time.Now()
	fresh, err := h.s.cfg.Loader.LoadCaller(ctx, h.caller.UserID)
	c := h.caller
	if err != nil || fresh.UserID != c.UserID {
		c.State, c.Roles, c.Permissions = capabilities.AccountUnknown, nil, nil
	} else {
		c.State, c.Roles, c.Permissions = fresh.State, fresh.Roles, fresh.Permissions
	}
	h.caller = c
}

func (h *host) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	h.calls[name]++
	if bindingExcluded(name) {
		return nil, hostError(errNested)
	}
	h.refresh(ctx)
	res, err := h.s.reg.Invoke(ctx, h.caller, name, args)
	return resultJSON(res, err)
}

func (h *host) Fetch(ctx context.Context, req json.RawMessage) (json.RawMessage, error) {
	h.calls["httpRequest"]++
	h.refresh(ctx)
	res, err := h.s.reg.Invoke(ctx, h.caller, "httpRequest", req)
	return resultJSON(res, err)
}

// storageCapabilities are the capabilities behind the storage binding's
// operations.
var storageCapabilities = map[string]string{"get": "storageGet", "set": "storageSet", "delete": "storageDelete", "list": "storageList"}

// Storage runs one operation of the storage binding on the run's bucket
// through the storage capabilities, as the program's caller: the same
// checks, limits and budget as when the agent calls them itself.
func (h *host) Storage(ctx context.Context, op string, args json.RawMessage) (json.RawMessage, error) {
	name, ok := storageCapabilities[op]
	if !ok {
		return nil, &sandbox.HostError{Code: string(capabilities.CodeInvalidInput), Message: "storage: unknown operation " + strconv.Quote(op)}
	}
	if !h.s.reg.Has(name) {
		return nil, &sandbox.HostError{Code: string(capabilities.CodeUnsupported), Message: "storage: storage buckets are turned off on this server"}
	}
	var in struct {
		Key    string          `json:"key"`
		Value  json.RawMessage `json:"value"`
		Prefix string          `json:"prefix"`
		Cursor string          `json:"cursor"`
		Limit  int             `json:"limit"`
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, &sandbox.HostError{Code: string(capabilities.CodeInvalidInput), Message: "storage: arguments are not valid"}
	}
	req := map[string]any{"storageId": h.storageID}
	switch op {
	case "get", "delete":
		req["key"] = in.Key
	case "set":
		if len(in.Value) == 0 {
			in.Value = json.RawMessage("null")
		}
		req["key"], req["value"] = in.Key, in.Value
	case "list":
		if in.Prefix != "" {
			req["prefix"] = in.Prefix
		}
		if in.Cursor != "" {
			req["cursor"] = in.Cursor
		}
		if in.Limit > 0 {
			req["limit"] = min(in.Limit, storage.MaxPageLimit)
		}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, &sandbox.HostError{Code: string(capabilities.CodeInvalidInput), Message: "storage: arguments are not valid"}
	}
	h.calls[name]++
	h.refresh(ctx)
	out, err := resultJSON(h.s.reg.Invoke(ctx, h.caller, name, body))
	if err != nil {
		return nil, err
	}
	// The binding keeps its own shapes: get answers the value (null when
	// there is none), set nothing, delete whether the key existed, list
	// the keys and the next page's cursor.
	var res struct {
		Found   bool            `json:"found"`
		Value   json.RawMessage `json:"value"`
		Deleted bool            `json:"deleted"`
		Keys    []struct {
			Key string `json:"key"`
		} `json:"keys"`
		NextCursor string `json:"nextCursor"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, &sandbox.HostError{Code: string(capabilities.CodeInternal), Message: "internal error"}
	}
	switch op {
	case "get":
		if !res.Found || len(res.Value) == 0 {
			return json.RawMessage("null"), nil
		}
		return res.Value, nil
	case "set":
		return json.RawMessage("null"), nil
	case "delete":
		return json.Marshal(res.Deleted)
	}
	page := struct {
		Keys   []string `json:"keys"`
		Cursor string   `json:"cursor,omitempty"`
	}{Keys: make([]string, 0, len(res.Keys)), Cursor: res.NextCursor}
	for _, k := range res.Keys {
		page.Keys = append(page.Keys, k.Key)
	}
	return json.Marshal(page)
}

// resultJSON turns what Invoke returned into what a program receives: the
// structured result (or the text, parsed when it is JSON), or an error it
// may catch, carrying the domain code and the message safe to show.
func resultJSON(res capabilities.Result, err error) (json.RawMessage, error) {
	if err != nil {
		return nil, hostError(err)
	}
	text := ""
	for _, c := range res.Content {
		if t, ok := c.(capabilities.Text); ok {
			text += t.Text
		}
	}
	if res.IsError {
		return nil, &sandbox.HostError{Code: "tool_error", Message: cmp.Or(text, "the capability failed")}
	}
	if res.Structured != nil {
		b, err := json.Marshal(res.Structured)
		if err != nil {
			return nil, &sandbox.HostError{Code: string(capabilities.CodeInternal), Message: "internal error"}
		}
		return b, nil
	}
	if json.Valid([]byte(text)) && text != "" {
		return json.RawMessage(text), nil
	}
	return json.Marshal(text)
}

func hostError(err error) error {
	if e, ok := errors.AsType[*capabilities.Error](err); ok && e.Code != capabilities.CodeInternal {
		return &sandbox.HostError{Code: string(e.Code), Message: e.Message}
	}
	return &sandbox.HostError{Code: string(capabilities.CodeInternal), Message: "internal error"}
}

// moduleName is the canonical name of a module of a package version.
func moduleName(pkg string, version int, file string) string {
	return fmt.Sprintf("pkg:%s@%d/%s", pkg, version, file)
}

// parseModule splits a canonical module name.
func parseModule(name string) (pkg string, version int, file string, ok bool) {
	rest, ok := strings.CutPrefix(name, "pkg:")
	if !ok {
		return "", 0, "", false
	}
	head, file, ok := strings.Cut(rest, "/")
	if !ok {
		return "", 0, "", false
	}
	pkg, v, ok := strings.Cut(head, "@")
	if !ok {
		return "", 0, "", false
	}
	version, err := strconv.Atoi(v)
	if err != nil || version < 1 || !packageName.MatchString(pkg) {
		return "", 0, "", false
	}
	return pkg, version, file, true
}

// resolver resolves a program's imports among its owner's packages only:
// every lookup carries the owner filter, so another user's package of the
// same name is simply not found.
type resolver struct {
	s        *Service
	o        storage.Owner
	versions map[string]versionRow // "name@version" (0: latest) → row, for this run
}

func (r *resolver) version(ctx context.Context, pkg string, version int) (versionRow, Manifest, map[string]string, error) {
	key := pkg + "@" + strconv.Itoa(version)
	v, ok := r.versions[key]
	if !ok {
		var err error
		if _, v, err = r.s.lookup(ctx, r.s.store.Reader, r.o, pkg, version); err != nil {
			return v, Manifest{}, nil, err
		}
		r.versions[key] = v
	}
	m, files, err := v.decode()
	return v, m, files, err
}

func moduleNotFound(spec string) error {
	return &sandbox.HostError{Code: string(capabilities.CodeNotFound), Message: "module not found: " + spec}
}

func (r *resolver) Resolve(ctx context.Context, referrer, spec string) (string, error) {
	if pkg, version, file, ok := parseModule(spec); ok { // already canonical
		if _, _, files, err := r.version(ctx, pkg, version); err != nil || files[file] == "" {
			return "", moduleNotFound(spec)
		}
		return spec, nil
	}
	if rest, ok := strings.CutPrefix(spec, "pkg:"); ok {
		pkg, v, hasVersion := strings.Cut(rest, "@")
		version := 0
		if hasVersion {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return "", moduleNotFound(spec)
			}
			version = n
		}
		row, m, _, err := r.version(ctx, pkg, version)
		if err != nil {
			return "", moduleNotFound(spec)
		}
		return moduleName(pkg, row.Version, m.Main), nil
	}
	if strings.HasPrefix(spec, "./") || strings.HasPrefix(spec, "../") {
		pkg, version, file, ok := parseModule(referrer)
		if !ok {
			return "", &sandbox.HostError{Code: string(capabilities.CodeNotFound), Message: "module not found: " + spec + " (relative imports work inside a package; import a package as \"pkg:name\")"}
		}
		joined := path.Join(path.Dir(file), spec)
		if strings.HasPrefix(joined, "../") || joined == ".." {
			return "", moduleNotFound(spec)
		}
		if _, _, files, err := r.version(ctx, pkg, version); err != nil || files[joined] == "" {
			return "", moduleNotFound(spec)
		}
		return moduleName(pkg, version, joined), nil
	}
	return "", moduleNotFound(spec)
}

func (r *resolver) Load(ctx context.Context, name string) (string, error) {
	pkg, version, file, ok := parseModule(name)
	if !ok {
		return "", moduleNotFound(name)
	}
	_, _, files, err := r.version(ctx, pkg, version)
	if err != nil || files[file] == "" {
		return "", moduleNotFound(name)
	}
	return r.s.source(ctx, r.o, files[file])
}

// bindable returns the names a program of caller gets on codemode: the
// capabilities visible to it but those that start runs. The answer is kept
// per Registry.VisibilityKey, which changes whenever it could.
func (s *Service) bindable(ctx context.Context, caller capabilities.Caller) []string {
	key, ok := s.reg.VisibilityKey(caller)
	if ok {
		if names, hit := s.bindings.get(key); hit {
			return names
		}
	}
	var names []string
	for _, name := range s.reg.VisibleNames(ctx, caller) {
		if !bindingExcluded(name) {
			names = append(names, name)
		}
	}
	if ok {
		s.bindings.put(key, names)
	}
	return names
}

// bindingCache keeps bindable's answers, bounded.
type bindingCache struct {
	mu sync.Mutex
	m  map[uint64][]string
}

const bindingCacheEntries = 4096

func (c *bindingCache) get(key uint64) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v, ok
}

func (c *bindingCache) put(key uint64, names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= bindingCacheEntries {
		clear(c.m)
	}
	c.m[key] = names
}
