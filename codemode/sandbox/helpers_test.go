package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHost is a Host that records its calls and answers with functions the
// test sets; unset ones echo their arguments.
type fakeHost struct {
	mu      sync.Mutex
	calls   []string // "call name args", "fetch req", "storage op args"
	call    func(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error)
	fetch   func(ctx context.Context, req json.RawMessage) (json.RawMessage, error)
	storage func(ctx context.Context, op string, args json.RawMessage) (json.RawMessage, error)
}

func (h *fakeHost) record(s string) {
	h.mu.Lock()
	h.calls = append(h.calls, s)
	h.mu.Unlock()
}

func (h *fakeHost) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	h.record("call " + name + " " + string(args))
	if h.call != nil {
		return h.call(ctx, name, args)
	}
	return json.RawMessage(`{"name":"` + name + `","args":` + string(args) + `}`), nil
}

func (h *fakeHost) Fetch(ctx context.Context, req json.RawMessage) (json.RawMessage, error) {
	h.record("fetch " + string(req))
	if h.fetch != nil {
		return h.fetch(ctx, req)
	}
	return json.RawMessage(`{"status":200,"url":"https://example.com/","headers":{"content-type":"application/json"},"body":"{\"ok\":true}"}`), nil
}

func (h *fakeHost) Storage(ctx context.Context, op string, args json.RawMessage) (json.RawMessage, error) {
	h.record("storage " + op + " " + string(args))
	if h.storage != nil {
		return h.storage(ctx, op, args)
	}
	return args, nil
}

func (h *fakeHost) recorded() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls...)
}

// mapResolver resolves specifiers to themselves when they are keys of its
// map, whose values are the sources.
type mapResolver map[string]string

func (m mapResolver) Resolve(_ context.Context, referrer, specifier string) (string, error) {
	if _, ok := m[specifier]; ok {
		return specifier, nil
	}
	return "", errors.New("not in the map: " + specifier)
}

func (m mapResolver) Load(_ context.Context, name string) (string, error) {
	return m[name], nil
}

// runCode runs code with a fakeHost (unless p sets one) and fails the test
// on misuse.
func runCode(t testing.TB, code string, p Program) Outcome {
	t.Helper()
	p.Code = code
	if p.Host == nil {
		p.Host = &fakeHost{}
	}
	out, err := Run(context.Background(), p)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return out
}

// wantResult fails unless out succeeded with the JSON want.
func wantResult(t testing.TB, out Outcome, want string) {
	t.Helper()
	if out.Err != nil {
		t.Fatalf("run failed: %+v", out.Err)
	}
	if !jsonEqual(out.Result, want) {
		t.Fatalf("result = %s, want %s", out.Result, want)
	}
}

// wantErr fails unless out failed with kind and limit, and a message
// containing msg.
func wantErr(t testing.TB, out Outcome, kind, limit, msg string) {
	t.Helper()
	if out.Err == nil {
		t.Fatalf("run succeeded with %s, want a %s error", out.Result, kind)
	}
	if out.Err.Kind != kind || out.Err.Limit != limit || !strings.Contains(out.Err.Message, msg) {
		t.Fatalf("error = %+v, want kind %q limit %q message containing %q", out.Err, kind, limit, msg)
	}
	if string(out.Result) != "null" {
		t.Fatalf("result of a failed run = %s, want null", out.Result)
	}
}

func jsonEqual(got json.RawMessage, want string) bool {
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return fmt.Sprint(g) == fmt.Sprint(w)
}

// short is a timeout long enough for a run that should end early, and short
// enough for one that should hit it, even under the race detector.
const short = 500 * time.Millisecond
