package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/cluster"
)

// directCaps are capabilities that tell the direct path and mcp-go's apart
// where they could differ.
func directCaps(t testing.TB, reg *capabilities.Registry) {
	t.Helper()
	must(t, reg.Register(
		capabilities.Capability{
			Name: "rawArgs", Domain: "test", Description: "Shows the raw arguments it got.", Annotations: readOnly,
			Handler: func(_ context.Context, _ *capabilities.Call, args json.RawMessage) (capabilities.Result, error) {
				return capabilities.TextResult(fmt.Sprintf("%q", string(args))), nil
			},
		},
		capabilities.Define(capabilities.Spec[struct{}, errorOut]{
			Name: "saysError", Domain: "test", Description: "Succeeds with a field named error.", Annotations: readOnly,
			Handler: func(context.Context, *capabilities.Call, struct{}) (errorOut, error) {
				return errorOut{Error: "none, all fine"}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "streamThenLimit", Domain: "test", Description: "Reports progress, then is rate limited.", Annotations: readOnly,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				if err := call.Progress(ctx, 1, 2, "working"); err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.Result{}, &capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "slow down",
					RetryAfter: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}
			},
		}),
	))
}

type errorOut struct {
	Error string `json:"error"`
}

// rawRequest sends a POST with the given body and content type.
func (f *fixture) rawRequest(token, sid, contentType, body string) *http.Response {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.t.Context(), http.MethodPost, f.url, strings.NewReader(body))
	must(f.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(sessionHeader, sid)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(versionHeader, testProtocol)
	resp, err := http.DefaultClient.Do(req)
	must(f.t, err)
	f.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

var requestIDs = regexp.MustCompile(`request id [^)"]+|"requestId":"[^"]*"`)

// seenAnswer is what a client sees of a response, with the request ids that
// differ from server to server blanked.
func seenAnswer(t *testing.T, resp *http.Response) string {
	t.Helper()
	kind := "json"
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		kind = "sse"
	}
	body := readAll(resp)
	var msgs []string
	if kind == "sse" {
		for line := range strings.SplitSeq(body, "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				msgs = append(msgs, canonical(data))
			}
		}
	} else if strings.TrimSpace(body) != "" {
		msgs = append(msgs, canonical(body))
	}
	return requestIDs.ReplaceAllString(fmt.Sprintf("%d %s %s", resp.StatusCode, kind, strings.Join(msgs, " | ")), "request id X")
}

func canonical(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return "not JSON: " + s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// A notification or question a handler's goroutine sends after the call
// was answered is refused, never written: the response is finished
// (net/http recycles its buffers once the handler returns: writing then
// crashed the process), and nothing may follow the answer on the stream.
// On mcp-go's path notifications go through its channel, which nobody
// reads any more; a question is written by the transport, and refused.
func TestNothingIsWrittenAfterTheAnswer(t *testing.T) {
	f := newFixture(t)
	release := make(chan struct{})
	type lateErr struct {
		what string
		err  error
	}
	late := make(chan lateErr, 3)
	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "lingering", Domain: "test", Description: "Leaves a goroutine behind.", Annotations: readOnly,
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			if err := call.Progress(ctx, 1, 2, "first"); err != nil {
				return capabilities.Result{}, err
			}
			go func() {
				<-release
				late <- lateErr{"progress", call.Progress(ctx, 2, 2, "late")}
				late <- lateErr{"log", call.Log(ctx, capabilities.LogInfo, "test", "late")}
				_, err := call.Elicit(ctx, capabilities.ElicitRequest{Message: "late?", Schema: json.RawMessage(`{"type":"object"}`)})
				late <- lateErr{"elicit", err}
			}()
			return capabilities.TextResult("done"), nil
		},
	})))
	sid := f.initialize("alice-token")
	resp := f.request(http.MethodPost, "alice-token", sid, rpc(3, "tools/call", map[string]any{
		"name": "lingering", "_meta": map[string]any{"progressToken": "p"},
	}))
	msgs := messages(t, resp) // the whole stream: the handler has returned
	if len(msgs) != 2 || msgs[0]["method"] != "notifications/progress" || msgs[1]["result"] == nil {
		t.Fatalf("stream = %v", msgs)
	}
	close(release)
	for range 3 {
		l := <-late
		if l.err == nil {
			t.Errorf("%s after the answer was accepted", l.what)
		}
	}

}

// flagHook is a feature flag set whose answer runs a hook first: a test
// uses it to act between the moment a request's session is bound and the
// moment it is served (the scope check asks the flags in between).
type flagHook struct {
	mu   sync.Mutex
	hook func()
}

func (h *flagHook) Enabled(context.Context, capabilities.Caller, string) bool {
	h.mu.Lock()
	hook := h.hook
	h.hook = nil
	h.mu.Unlock()
	if hook != nil {
		hook()
	}
	return true
}

// A session that ends after its request was bound to it but before the
// call is served (its DELETE racing the call) is not served: 404, as
// mcp-go answers, and the handler does not run.
func TestDirectPathRefusesSessionEndedMeanwhile(t *testing.T) {
	flags := &flagHook{}
	var ran atomic.Bool
	f := newFixture(t, func(o *Options) {
		reg := capabilities.NewRegistry(capabilities.Options{Features: flags, Logger: slog.New(slog.DiscardHandler)})
		must(t, reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "flagged", Domain: "test", Description: "Behind a flag.", Annotations: writes,
			Requires: capabilities.Requirement{Feature: "f"},
			Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) {
				ran.Store(true)
				return capabilities.TextResult("ran"), nil
			},
		})))
		o.Registry = reg
	})
	sid := f.initialize("alice-token")
	flags.mu.Lock()
	flags.hook = func() { f.srv.sessions.remove(sid) }
	flags.mu.Unlock()
	resp := f.request(http.MethodPost, "alice-token", sid, rpc(2, "tools/call", map[string]any{"name": "flagged"}))
	if body := readAll(resp); resp.StatusCode != http.StatusNotFound || ran.Load() {
		t.Fatalf("status %d (handler ran: %v): %s", resp.StatusCode, ran.Load(), body)
	}

}

// A tools/call's stream on a resumable shared session carries an event id
// on every event, on either path; a client that lost it replays the rest
// with Last-Event-ID on any replica, within the same session only: the
// same user's other session and another user's session are refused like
// an unknown id.
func TestCallStreamResumesOnlyInItsSession(t *testing.T) {
	group := cluster.NewLoopback()
	store := &memEvents{memSessions: newMemSessions(), events: map[string][]memEvent{}}
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	b := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	alice, alice2, bob := a.initialize("alice-token"), a.initialize("alice-token"), a.initialize("bob-token")

	next := sseEvents(a.request(http.MethodPost, "alice-token", alice, rpc(5, "tools/call", map[string]any{
		"name": "progress", "arguments": map[string]any{"tag": "t"}, "_meta": map[string]any{"progressToken": "p"},
	})))
	var ids []string
	var msgs []string
	for id, m := next(); m != nil; id, m = next() {
		if id == "" {
			t.Fatalf("event without an id: %v", m)
		}
		b, _ := json.Marshal(m)
		ids, msgs = append(ids, id), append(msgs, string(b))
	}
	if len(msgs) != 5 || !strings.Contains(msgs[4], `"result"`) {
		t.Fatalf("stream = %v", msgs)
	}

	resume := func(f *fixture, token, sid string) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(sessionHeader, sid)
		req.Header.Set(versionHeader, testProtocol)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", ids[0])
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for _, other := range []struct{ token, sid string }{{"alice-token", alice2}, {"bob-token", bob}} {
		if r := resume(b, other.token, other.sid); r.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s resuming alice's call stream: %d %s", other.token, r.StatusCode, readAll(r))
		}
	}
	r := resume(b, "alice-token", alice)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("resume on B: %d %s", r.StatusCode, readAll(r))
	}
	next = sseEvents(r)
	for i := 1; i < len(msgs); i++ {
		id, m := next()
		got, _ := json.Marshal(m)
		if id != ids[i] || string(got) != msgs[i] {
			t.Fatalf("replayed %q %s, want %q %s", id, got, ids[i], msgs[i])
		}
	}
	if _, m := next(); m != nil {
		t.Fatalf("replayed more: %v", m)
	}

}

// toggle is a feature flag set whose one flag can be switched while
// serving.
type toggle struct{ on atomic.Bool }

func (f *toggle) Enabled(context.Context, capabilities.Caller, string) bool { return f.on.Load() }

// The visible-tools check a session's requests make is skipped only while
// nothing it depends on changed: a feature flag switched on shows a tool,
// and the session that listed tools is told on its next request (of
// either kind); so is a change of the account's state.
func TestListChangedFollowsFlagsAndState(t *testing.T) {
	flags := &toggle{}
	f := newFixture(t, func(o *Options) {
		reg := capabilities.NewRegistry(capabilities.Options{Features: flags, Logger: slog.New(slog.DiscardHandler)})
		must(t, reg.Register(
			capabilities.Define(capabilities.Spec[echoIn, echoOut]{
				Name: "echo", Domain: "test", Description: "Echoes text.", Annotations: readOnly,
				Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
					return echoOut{Echo: in.Text}, nil
				},
			}),
			capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
				Name: "flagged", Domain: "test", Description: "Behind a flag.", Annotations: writes,
				Requires: capabilities.Requirement{Feature: "f"},
				Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) {
					return capabilities.TextResult("ran"), nil
				},
			}),
		))
		o.Registry = reg
	})
	sid := f.initialize("alice-token")
	stream := f.request(http.MethodGet, "alice-token", sid, "")
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %d", stream.StatusCode)
	}
	call := func() {
		resp := f.request(http.MethodPost, "alice-token", sid, rpc(3, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}}))
		if m := result(t, resp); m["result"] == nil {
			t.Fatalf("echo: %v", m)
		}
	}
	sentinel := func(n int) {
		must(t, f.srv.notifySession(sid, "test/sentinel", map[string]any{"n": n}))
	}
	f.request(http.MethodPost, "alice-token", sid, rpc(2, "tools/list", nil))
	call() // nothing changed
	sentinel(1)
	flags.on.Store(true)
	call() // the flag shows "flagged"
	sentinel(2)
	call() // nothing changed since
	sentinel(3)
	c, _ := f.loader.LoadCaller(t.Context(), "alice")
	c.State = capabilities.AccountDeleting
	f.loader.Set(c)
	call() // an account being deleted sees only reads: "flagged" goes
	sentinel(4)

	var got []string
	next := sseReader(stream)
	for len(got) < 6 {
		m := next()
		if m == nil {
			t.Fatalf("stream ended after %v", got)
		}
		got = append(got, fmt.Sprint(m["method"]))
	}
	want := []string{"test/sentinel", "notifications/tools/list_changed", "test/sentinel", "test/sentinel", "notifications/tools/list_changed", "test/sentinel"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stream carried %v, want %v", got, want)
	}
}

// A client that stops reading a call's stream holds the handler that
// writes to it (a progress report, a log message) for a bounded time
// only: the write fails, and the handler goes on (and lets go of what it
// holds), instead of waiting for the client forever.
func TestStalledClientDoesNotHoldTheHandler(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.eventWrite = 200 * time.Millisecond })
	failed := make(chan error, 1)
	big := strings.Repeat("x", 64<<10)
	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "chatty", Domain: "test", Description: "Logs a lot.", Annotations: readOnly,
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			for range 4000 { // far more than the socket buffers hold
				if err := call.Log(ctx, capabilities.LogInfo, "test", big); err != nil {
					failed <- err
					return capabilities.Result{}, err
				}
			}
			failed <- nil
			return capabilities.TextResult("done"), nil
		},
	})))
	sid := f.initialize("alice-token")
	resp := f.request(http.MethodPost, "alice-token", sid, rpc(3, "tools/call", map[string]any{"name": "chatty"}))
	if resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	// The body is never read.
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("every log message was written to a client that reads nothing")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the handler is still held by a client that reads nothing")
	}
}

// A client whose connection to a call's stream broke finds the call's
// answer when it resumes the stream (resumable shared sessions), on
// either path.
func TestBrokenCallStreamKeepsItsAnswer(t *testing.T) {
	group := cluster.NewLoopback()
	store := &memEvents{memSessions: newMemSessions(), events: map[string][]memEvent{}}
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	a.gate = newBarrier(2) // never reached by a second call: the first waits until it is cancelled
	alice := a.initialize("alice-token")

	ctx, cancel := context.WithCancel(t.Context())
	body := rpc(5, "tools/call", map[string]any{"name": "progress", "arguments": map[string]any{"tag": "t"}, "_meta": map[string]any{"progressToken": "p"}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set(sessionHeader, alice)
	req.Header.Set(versionHeader, testProtocol)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	first, m := sseEvents(resp)()
	if first == "" || m["method"] != "notifications/progress" {
		t.Fatalf("first event %q %v", first, m)
	}
	cancel() // the connection breaks while the call waits
	resp.Body.Close()

	eventually(t, "the answer to be recorded", func() bool {
		store.emu.Lock()
		n := len(store.events[SessionHash(alice)])
		store.emu.Unlock()
		return n >= 2
	})
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodGet, a.url, nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set(sessionHeader, alice)
	req.Header.Set(versionHeader, testProtocol)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", first)
	r, err := http.DefaultClient.Do(req)
	must(t, err)
	defer r.Body.Close()
	next := sseEvents(r)
	id, m := next()
	if id == "" || m["id"] != float64(5) || m["result"] == nil {
		t.Fatalf("replayed %q %v, want the answer to call 5", id, m)
	}

}

// The envelope is read to its end past a params member of the wrong type
// (a type error in a struct does not stop encoding/json, and the params'
// own decoding must not either): an initialize whose params come first
// with an extra member of another type still opens a session.
func TestEnvelopeReadPastMistypedParams(t *testing.T) {
	f := newFixture(t)
	resp := f.request(http.MethodPost, "alice-token", "", `{"params":{"name":5,"protocolVersion":"`+testProtocol+
		`","capabilities":{},"clientInfo":{"name":"t","version":"1"}},"jsonrpc":"2.0","id":1,"method":"initialize"}`)
	if body := readAll(resp); resp.StatusCode != http.StatusOK || resp.Header.Get(sessionHeader) == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
}
