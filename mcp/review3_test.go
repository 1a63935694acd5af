package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/enclave-mcp/enclave/capabilities"
)

// hiddenHeaderTool is an admin-only capability whose input schema mirrors
// a parameter in a header (x-mcp-header).
const hiddenHeaderTool = "adminRegion"

func hiddenHeaderCap(t testing.TB, reg *capabilities.Registry) {
	t.Helper()
	must(t, reg.Register(capabilities.Capability{Name: hiddenHeaderTool, Domain: "test", Description: "Admins only, region in a header.",
		Annotations: readOnly, Requires: capabilities.Requirement{Role: capabilities.RoleAdmin},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`),
		Handler: func(context.Context, *capabilities.Call, json.RawMessage) (capabilities.Result, error) {
			return capabilities.TextResult("ran"), nil
		}}))
}

// A 2026-07-28 tools/call of a hidden tool whose schema mirrors a
// parameter in a header, sent without (or with a wrong) header, is
// answered exactly like the same call of an unknown tool, with the same
// denials audited: the header check (headerRefusal) must not run for a
// tool the caller cannot see, or its "header mismatch" tells the tool
// exists.
func TestHiddenHeaderToolAnsweredLikeUnknown(t *testing.T) {
	fx := taskFixture(t)
	hiddenHeaderCap(t, fx.reg)
	lw := &lateWriter{}
	for _, region := range []string{"", "us"} {
		send := func(tool string) wireAnswer {
			body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool + `","arguments":{"region":"eu"},` +
				`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
			h := map[string]string{"Authorization": "Bearer alice-token", "Content-Type": "application/json",
				versionHeader: "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool}
			if region != "" {
				h["Mcp-Param-Region"] = region
			}
			return fuzzServe(t, fx, lw, h, body)
		}
		a, twin := send(hiddenHeaderTool), send(unknownTwin)
		got, want := a.seen(false), strings.ReplaceAll(twin.seen(false), unknownTwin, hiddenHeaderTool)
		if got != want {
			t.Fatalf("Region header %q: a hidden header tool is answered unlike an unknown one:\nhidden  %s\nunknown %s", region, got, want)
		}
		if len(a.denials) != 1 || len(twin.denials) != 1 {
			t.Fatalf("Region header %q: %d denials audited for the hidden tool, %d for an unknown one, want 1 each", region, len(a.denials), len(twin.denials))
		}
	}
}

// panickyProvider panics listing a caller's own capabilities.
type panickyProvider struct{}

func (panickyProvider) Own(context.Context, capabilities.Caller) ([]capabilities.Capability, error) {
	panic("provider: boom")
}

func (panickyProvider) LookupOwn(context.Context, capabilities.Caller, string) (capabilities.Capability, bool, error) {
	return capabilities.Capability{}, false, nil
}

func (panickyProvider) Generation(string) uint64 { return 0 }

// enginePumps counts serveEngine's forwarding goroutines alive.
func enginePumps() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "mcp.(*Server).serveEngine.func")
}

// A request whose serving by the engine panics (here a provider listing
// tools) is answered with a generic internal error, and serveEngine's
// goroutine forwarding the engine's notifications ends with it: it used
// to wait for a close that the panic skipped, one goroutine leaked per
// such request.
func TestEnginePanicLeavesNoForwarder(t *testing.T) {
	fx := newFixture(t)
	must(t, fx.reg.AddProvider("pkg_", panickyProvider{}))
	before := enginePumps()
	for i := range 5 {
		body := `{"jsonrpc":"2.0","id":` + strconv.Itoa(i+1) + `,"method":"tools/list","params":{` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		req := httptest.NewRequest(http.MethodPost, "https://mcp.test"+Path, strings.NewReader(body))
		req.RemoteAddr = "127.0.0.1:1234"
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(versionHeader, "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/list")
		rec := httptest.NewRecorder()
		fx.srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusInternalServerError || strings.Contains(rec.Body.String(), "boom") {
			t.Fatalf("answer to a panicking tools/list: %d %s", rec.Code, rec.Body.String())
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for enginePumps() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := enginePumps() - before; n > 0 {
		t.Fatalf("%d forwarding goroutines of serveEngine left behind by panicking requests", n)
	}
}

// A body that the transport's envelope and the engine read as different
// methods must not reach the engine outside a session: here a second
// "method" follows a params whose _meta does not decode, so the envelope
// (its decoding stopped at params) reads "initialize", served without a
// session, while the engine reads notifications/cancelled, and cancelled
// under the sessionless key every 2026-07-28 request the engine serves
// shares: bob's call with id 7. Neither bob's call ends nor is the body
// served without a session.
func TestSmuggledCancelReachesNoOtherUsersCall(t *testing.T) {
	f := newFixture(t)
	ended := bobsSlowCall(t, f)
	for _, body := range []string{
		`{"jsonrpc":"2.0","method":"initialize","params":{"requestId":7,"_meta":5},"method":"notifications/cancelled"}`,
		`{"jsonrpc":"2.0","params":{"requestId":7,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"_meta":5},"method":"notifications/cancelled"}`,
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(body))
		must(t, err)
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		status, answer := resp.StatusCode, readAll(resp)
		resp.Body.Close()
		select {
		case err := <-ended:
			t.Fatalf("alice's %s (answered %d %s) ended bob's call: %v", body, status, answer, err)
		case <-time.After(200 * time.Millisecond):
		}
		if status == http.StatusAccepted || status == http.StatusOK {
			t.Fatalf("%s was served without a session: %d %s", body, status, answer)
		}
	}
}

// stallingBody sends a few bytes, then blocks until released.
type stallingBody struct {
	sent    bool
	stalled chan struct{}
	release chan struct{}
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, `{"jsonrpc":`), nil
	}
	close(b.stalled)
	<-b.release
	return 0, io.ErrUnexpectedEOF
}

// A request announcing a large body (within the limit) and sending a
// few bytes of it holds memory for what it sent, not for what it
// announced: connections that announce 4 MiB each and stall would
// otherwise hold 4 MiB each for nothing.
func TestAnnouncedBodyIsNotAllocatedUpFront(t *testing.T) {
	fx := newFixture(t)
	body := &stallingBody{stalled: make(chan struct{}), release: make(chan struct{})}
	req := httptest.NewRequest(http.MethodPost, "https://mcp.test"+Path, body)
	req.ContentLength = 4 << 20
	req.RemoteAddr = "127.0.0.1:1234"
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set("Content-Type", "application/json")
	var before, during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fx.srv.ServeHTTP(httptest.NewRecorder(), req)
	}()
	<-body.stalled
	runtime.ReadMemStats(&during)
	close(body.release)
	<-done
	if grew := during.TotalAlloc - before.TotalAlloc; grew >= 1<<20 {
		t.Fatalf("a body announcing 4 MiB that sent 11 bytes had %d bytes allocated", grew)
	}
}

// Two requests of one session in flight with the same JSON-RPC id: once
// one of them ends, notifications/cancelled naming the id still stops
// the other (the end of the first used to forget the second's tracking,
// which had replaced the first's).
func TestSessionCancelAfterSameIDEnded(t *testing.T) {
	f := newFixture(t)
	type run struct {
		release chan struct{}
		ended   chan error
	}
	started := make(chan run, 2)
	must(t, f.reg.Register(capabilities.Capability{Name: "hold", Domain: "test", Description: "Waits until released or cancelled.",
		Annotations: readOnly, Handler: func(ctx context.Context, _ *capabilities.Call, _ json.RawMessage) (capabilities.Result, error) {
			r := run{release: make(chan struct{}), ended: make(chan error, 1)}
			started <- r
			select {
			case <-ctx.Done():
				r.ended <- ctx.Err()
			case <-r.release:
				r.ended <- nil
			case <-time.After(10 * time.Second):
				r.ended <- errors.New("timed out")
			}
			return capabilities.TextResult("held"), nil
		}}))
	const token = "alice-token"
	sid := f.initialize(token)
	call := func() {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url,
			strings.NewReader(rpc(7, "tools/call", map[string]any{"name": "hold", "arguments": map[string]any{}})))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(sessionHeader, sid)
		req.Header.Set(versionHeader, testProtocol)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	var runs []run
	for range 2 {
		go call()
		select {
		case r := <-started:
			runs = append(runs, r)
		case <-time.After(10 * time.Second):
			t.Fatal("a call did not start")
		}
	}
	close(runs[0].release)
	if err := <-runs[0].ended; err != nil {
		t.Fatalf("the first call: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // its request finishes
	resp := f.request(http.MethodPost, token, sid, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: %d %s", resp.StatusCode, readAll(resp))
	}
	select {
	case err := <-runs[1].ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the second call ended with %v, want cancelled", err)
		}
	case <-time.After(2 * time.Second):
		close(runs[1].release)
		t.Fatal("notifications/cancelled did not stop the second call with the id")
	}
}

// The engine keys the requests it serves, for its own handling of
// notifications/cancelled, by the session object's id: requests served
// outside a session must not share one, or a notifications/cancelled the
// engine gets outside a session (whatever let it through) stops another
// user's request with the same JSON-RPC id.
func TestEngineKeysSessionlessRequestsApart(t *testing.T) {
	f := newFixture(t)
	ended := bobsSlowCall(t, f)
	// Handed to the engine directly, past every check of the transport.
	body := []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	caller, err := f.loader.LoadCaller(t.Context(), "alice")
	must(t, err)
	st := &reqState{caller: caller, requestID: "r", method: "notifications/cancelled"}
	req := httptest.NewRequest(http.MethodPost, "https://mcp.test"+Path, strings.NewReader(string(body)))
	req = req.WithContext(context.WithValue(req.Context(), stateKey{}, st))
	f.srv.serveEngine(httptest.NewRecorder(), req, st, body, postView{Method: mcpgo.MethodNotificationCancelled})
	select {
	case err := <-ended:
		t.Fatalf("a sessionless notifications/cancelled in the engine ended bob's call: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
}

// bobsSlowCall starts bob's 2026-07-28 call with JSON-RPC id 7, which
// waits until its context ends (or 10 s), and returns once it runs: the
// channel gets the call's context error when it ends.
func bobsSlowCall(t *testing.T, f *fixture) <-chan error {
	t.Helper()
	started := make(chan struct{}, 1)
	ended := make(chan error, 1)
	must(t, f.reg.Register(capabilities.Capability{Name: "slowRegion", Domain: "test", Description: "Waits; mirrors region in a header.",
		Annotations: readOnly, InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`),
		Handler: func(ctx context.Context, _ *capabilities.Call, _ json.RawMessage) (capabilities.Result, error) {
			started <- struct{}{}
			select {
			case <-ctx.Done():
				ended <- ctx.Err()
			case <-time.After(10 * time.Second):
				ended <- nil
			}
			return capabilities.TextResult("x"), nil
		}}))
	go func() {
		body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slowRegion","arguments":{},` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer bob-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(versionHeader, "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "slowRegion")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("bob's call did not start")
	}
	return ended
}
