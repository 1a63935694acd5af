package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

const testProtocol = "2025-11-25"

// fixture is a running MCP server with three users (alice, bob, admin)
// and a set of test capabilities.
type fixture struct {
	t      testing.TB
	srv    *Server
	url    string
	reg    *capabilities.Registry
	loader *capabilitiestest.Loader
	audit  *capabilitiestest.Auditor
	logs   *syncBuffer
	clock  *fakeClock
	// gate, when set, is waited on by the "progress" capability after its
	// first notification, so tests can hold calls in flight together.
	gate *barrier
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// barrier releases everyone once n parties have arrived.
type barrier struct {
	mu      sync.Mutex
	n       int
	arrived int
	ch      chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, ch: make(chan struct{})} }

func (b *barrier) wait(ctx context.Context) error {
	b.mu.Lock()
	b.arrived++
	if b.arrived == b.n {
		close(b.ch)
	}
	b.mu.Unlock()
	select {
	case <-b.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type echoIn struct {
	Text string `json:"text"`
}

type echoOut struct {
	Echo string `json:"echo"`
}

type tagIn struct {
	Tag string `json:"tag"`
}

var (
	readOnly = &capabilities.Annotations{ReadOnly: true, Idempotent: true}
	writes   = &capabilities.Annotations{Destructive: true}
)

func newFixture(t testing.TB, tweak ...func(*Options)) *fixture {
	t.Helper()
	f := &fixture{
		t:     t,
		audit: &capabilitiestest.Auditor{},
		logs:  &syncBuffer{},
		clock: &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	f.loader = capabilitiestest.NewLoader(capabilitiestest.User("alice"), capabilitiestest.User("bob"), capabilitiestest.Admin("admin"))
	f.reg = capabilities.NewRegistry(capabilities.Options{Auditor: f.audit, Logger: slog.New(slog.NewJSONHandler(f.logs, nil))})
	must(t, f.reg.Register(
		capabilities.Define(capabilities.Spec[echoIn, echoOut]{
			Name: "echo", Domain: "test", Description: "Echoes text.", Annotations: readOnly,
			Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
				return echoOut{Echo: in.Text}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[echoIn, echoOut]{
			Name: "adminOnly", Domain: "test", Description: "Admins only.", Annotations: writes,
			Requires: capabilities.Requirement{Role: capabilities.RoleAdmin, Scopes: []string{"admin"}},
			Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
				return echoOut{Echo: in.Text}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "scoped", Domain: "test", Description: "Needs notes:write.", Annotations: writes,
			Requires: capabilities.Requirement{Scopes: []string{"notes:write"}},
			Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) {
				return capabilities.TextResult("scoped ok"), nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "fail", Domain: "test", Description: "Fails internally.", Annotations: readOnly,
			Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) {
				return capabilities.Result{}, errors.New("db: password hunter2 rejected")
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "boom", Domain: "test", Description: "Panics.", Annotations: readOnly,
			Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) {
				panic("hunter2")
			},
		}),
		capabilities.Define(capabilities.Spec[tagIn, capabilities.Result]{
			Name: "progress", Domain: "test", Description: "Reports progress.", Annotations: readOnly,
			Handler: func(ctx context.Context, call *capabilities.Call, in tagIn) (capabilities.Result, error) {
				mark := call.Caller.UserID + "/" + in.Tag
				if err := call.Progress(ctx, 1, 3, mark); err != nil {
					return capabilities.Result{}, err
				}
				if f.gate != nil {
					if err := f.gate.wait(ctx); err != nil {
						return capabilities.Result{}, err
					}
				}
				for i := 2; i <= 3; i++ {
					if err := call.Progress(ctx, float64(i), 3, mark); err != nil {
						return capabilities.Result{}, err
					}
				}
				if err := call.Log(ctx, capabilities.LogInfo, "test", mark); err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.TextResult(mark), nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "ask", Domain: "test", Description: "Asks the user.", Annotations: readOnly,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				ans, err := call.Elicit(ctx, capabilities.ElicitRequest{
					Message: "name?",
					Schema:  json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`),
				})
				if err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.TextResult(fmt.Sprintf("%s:%v", ans.Action, ans.Content["name"])), nil
			},
		}),
	))
	verifier := TokenVerifierFunc(func(_ context.Context, token string) (TokenInfo, error) {
		aud := []string{"https://mcp.test/mcp"}
		exp := f.clock.Now().Add(time.Hour)
		switch token {
		case "alice-token":
			return TokenInfo{UserID: "alice", Scopes: []string{"mcp"}, Audience: aud, ExpiresAt: exp, Grant: "g-alice-1"}, nil
		case "alice-grant2-token": // another client of alice's: another grant
			return TokenInfo{UserID: "alice", Scopes: []string{"mcp"}, Audience: aud, ExpiresAt: exp, Grant: "g-alice-2"}, nil
		case "alice-admin-token": // alice's agent, granted the admin scope
			return TokenInfo{UserID: "alice", Scopes: []string{"mcp", "admin"}, Audience: aud, ExpiresAt: exp, Grant: "g-alice-3"}, nil
		case "alice-notes-token":
			return TokenInfo{UserID: "alice", Scopes: []string{"mcp", "notes:write"}, Audience: aud, ExpiresAt: exp}, nil
		case "bob-token":
			return TokenInfo{UserID: "bob", Scopes: []string{"mcp"}, Audience: aud, ExpiresAt: exp}, nil
		case "admin-token": // an admin who granted the admin scope
			return TokenInfo{UserID: "admin", Scopes: []string{"mcp", "admin"}, Audience: aud, ExpiresAt: exp}, nil
		case "admin-mcp-token": // an admin who did not
			return TokenInfo{UserID: "admin", Scopes: []string{"mcp"}, Audience: aud, ExpiresAt: exp}, nil
		case "expired-token":
			return TokenInfo{UserID: "alice", Audience: aud, ExpiresAt: f.clock.Now().Add(-time.Second)}, nil
		case "foreign-token":
			return TokenInfo{UserID: "alice", Audience: []string{"https://other.test/mcp"}, ExpiresAt: exp}, nil
		case "suspended-token":
			return TokenInfo{}, capabilities.Errorf(capabilities.CodeAccountSuspended, "suspended")
		case "ghost-token":
			return TokenInfo{UserID: "ghost", Audience: aud, ExpiresAt: exp}, nil
		}
		return TokenInfo{}, ErrInvalidToken
	})
	opts := Options{
		Registry: f.reg, Verifier: verifier, Loader: f.loader, BaseURL: "https://mcp.test",
		Logger: slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		now:    f.clock.Now,
	}
	for _, fn := range tweak {
		fn(&opts)
	}
	srv, err := New(opts)
	must(t, err)
	f.srv = srv
	mux := http.NewServeMux()
	mux.Handle(Path, srv)
	hs := httptest.NewServer(mux)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		srv.Close()
	})
	f.url = hs.URL + Path
	return f
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// request sends one raw HTTP request to the endpoint.
func (f *fixture) request(method, token, sid, body string) *http.Response {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.t.Context(), method, f.url, strings.NewReader(body))
	must(f.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if sid != "" {
		req.Header.Set(sessionHeader, sid)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if method != http.MethodPost || !strings.Contains(body, `"initialize"`) {
		req.Header.Set(versionHeader, testProtocol)
	}
	resp, err := http.DefaultClient.Do(req)
	must(f.t, err)
	f.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func rpc(id int, method string, params any) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return string(b)
}

// initialize opens a session for token and returns its id.
func (f *fixture) initialize(token string) string {
	f.t.Helper()
	resp := f.request(http.MethodPost, token, "", rpc(1, "initialize", map[string]any{
		"protocolVersion": testProtocol,
		"capabilities":    map[string]any{"elicitation": map[string]any{}},
		"clientInfo":      map[string]any{"name": "test", "version": "1"},
	}))
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("initialize: %s: %s", resp.Status, readAll(resp))
	}
	sid := resp.Header.Get(sessionHeader)
	if sid == "" {
		f.t.Fatal("initialize returned no session id")
	}
	readAll(resp)
	f.request(http.MethodPost, token, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return sid
}

func readAll(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// messages decodes a response body: one JSON message, or an SSE stream.
func messages(t testing.TB, resp *http.Response) []map[string]any {
	t.Helper()
	var out []map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m map[string]any
				must(t, json.Unmarshal([]byte(data), &m))
				out = append(out, m)
			}
		}
		return out
	}
	var m map[string]any
	must(t, json.NewDecoder(resp.Body).Decode(&m))
	return append(out, m)
}

// result returns the final response message of a body.
func result(t testing.TB, resp *http.Response) map[string]any {
	t.Helper()
	msgs := messages(t, resp)
	for _, m := range msgs {
		if _, ok := m["id"]; ok && m["method"] == nil {
			return m
		}
	}
	t.Fatalf("no response in %v", msgs)
	return nil
}

// sseReader returns a function reading the next message of an SSE stream,
// or nil at its end.
func sseReader(resp *http.Response) func() map[string]any {
	sc := bufio.NewScanner(resp.Body)
	return func() map[string]any {
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m map[string]any
				if json.Unmarshal([]byte(data), &m) == nil {
					return m
				}
			}
		}
		return nil
	}
}
