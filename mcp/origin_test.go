package mcp

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

func TestOriginRefusedUnlessSameOrListed(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.AllowedOrigins = []string{"https://app.example:8443", "https://Tools.Example/"} })
	own := strings.TrimSuffix(f.url, Path) // http://127.0.0.1:port
	cases := []struct {
		origin []string
		want   int
	}{
		{nil, http.StatusOK},                                  // not a browser
		{[]string{"https://mcp.test"}, http.StatusOK},         // BaseURL's origin
		{[]string{"https://mcp.test:443"}, http.StatusOK},     // the same, default port spelled out
		{[]string{own}, http.StatusOK},                        // the request's own host
		{[]string{"https://app.example:8443"}, http.StatusOK}, // listed
		{[]string{"https://tools.example"}, http.StatusOK},    // listed (normalized)
		{[]string{"https://evil.example"}, http.StatusForbidden},
		{[]string{"https://app.example"}, http.StatusForbidden}, // listed host, other port
		{[]string{"http://mcp.test"}, http.StatusForbidden},     // other scheme
		{[]string{"null"}, http.StatusForbidden},
		{[]string{"https://mcp.test", "https://evil.example"}, http.StatusForbidden},
	}
	for _, c := range cases {
		for _, method := range []string{http.MethodPost, http.MethodGet} {
			body := ""
			if method == http.MethodPost {
				body = rpc(1, "initialize", map[string]any{"protocolVersion": testProtocol, "capabilities": map[string]any{},
					"clientInfo": map[string]any{"name": "t", "version": "1"}})
			}
			req, err := http.NewRequestWithContext(t.Context(), method, f.url, strings.NewReader(body))
			must(t, err)
			req.Header.Set("Authorization", "Bearer alice-token")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for _, o := range c.origin {
				req.Header.Add("Origin", o)
			}
			resp, err := http.DefaultClient.Do(req)
			must(t, err)
			resp.Body.Close()
			got := resp.StatusCode
			if method == http.MethodGet && c.want == http.StatusOK {
				// A GET without a session is refused further on, but not
				// for its origin.
				if got == http.StatusForbidden {
					t.Errorf("GET with Origin %v: 403", c.origin)
				}
				continue
			}
			if got != c.want {
				t.Errorf("%s with Origin %v: %d, want %d", method, c.origin, got, c.want)
			}
		}
	}
}

func TestAllowedOriginsMustBeOrigins(t *testing.T) {
	for _, o := range []string{"app.example", "https://app.example/path", "ftp://app.example", "https://u@app.example"} {
		_, err := New(Options{Registry: capabilities.NewRegistry(capabilities.Options{}), Anonymous: &capabilities.Caller{UserID: "x"},
			BaseURL: "https://mcp.test", AllowedOrigins: []string{o}})
		if err == nil {
			t.Errorf("AllowedOrigins %q accepted", o)
		}
	}
}

// TestStreamEndsWhenTokenStopsVerifying: a GET stream is checked again
// periodically; it ends once its token is revoked or expires, and lives on
// while the token verifies.
func TestStreamEndsWhenTokenStopsVerifying(t *testing.T) {
	var revoked atomic.Bool
	var verifies atomic.Int64
	var f *fixture
	f = newFixture(t, func(o *Options) {
		o.recheck = 20 * time.Millisecond
		inner := o.Verifier
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		o.Verifier = TokenVerifierFunc(func(ctx context.Context, token string) (TokenInfo, error) {
			verifies.Add(1)
			switch {
			case token == "revocable-token" && !revoked.Load():
				return TokenInfo{UserID: "alice", Scopes: []string{"mcp"}, Audience: []string{"https://mcp.test/mcp"}}, nil
			case token == "short-token":
				return TokenInfo{UserID: "bob", Scopes: []string{"mcp"}, Audience: []string{"https://mcp.test/mcp"}, ExpiresAt: start.Add(time.Minute)}, nil
			}
			return inner.VerifyToken(ctx, token)
		})
	})
	ended := func(token string, act func()) {
		t.Helper()
		sid := f.initialize(token)
		next := sseReader(f.request(http.MethodGet, token, sid, ""))
		// The stream lives across several checks while the token verifies.
		before := verifies.Load()
		for deadline := time.Now().Add(5 * time.Second); verifies.Load() < before+3; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the stream's token was not checked again within 5 s", token)
			}
		}
		must(t, f.srv.notifySession(sid, "test/sentinel", nil))
		if m := next(); m["method"] != "test/sentinel" {
			t.Fatalf("%s: stream carried %v, want the sentinel", token, m)
		}
		act()
		done := make(chan map[string]any, 1)
		go func() { done <- next() }()
		select {
		case m := <-done:
			if m != nil {
				t.Fatalf("%s: stream carried %v after the token stopped verifying", token, m)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: stream still open 5 s after the token stopped verifying", token)
		}
	}
	ended("revocable-token", func() { revoked.Store(true) })
	ended("short-token", func() { f.clock.Advance(2 * time.Minute) })
}

// TestResourceUpdatedOnlyToOwners: a per-user resource's change reaches a
// subscriber only while their user passes the resource's guard, ownership
// included.
func TestResourceUpdatedOnlyToOwners(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	owners := map[string]string{"1": "alice", "2": "alice", "3": "bob"}
	must(t, f.reg.RegisterResource(capabilities.Resource{
		Template: "test://docs/{id}", Name: "doc",
		Allow: func(_ context.Context, call *capabilities.Call, _ string, params map[string]string) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return owners[params["id"]] == call.Caller.UserID, nil
		},
		Read: func(_ context.Context, _ *capabilities.Call, uri string, _ map[string]string) ([]capabilities.ResourceContents, error) {
			return []capabilities.ResourceContents{{URI: uri, Text: "x"}}, nil
		},
	}))
	alice, bob := f.initialize("alice-token"), f.initialize("bob-token")
	subscribe := func(token, sid, uri string) {
		if resp := f.request(http.MethodPost, token, sid, rpc(4, "resources/subscribe", map[string]any{"uri": uri})); resp.StatusCode != http.StatusOK {
			t.Fatalf("subscribe %s: %d", uri, resp.StatusCode)
		}
	}
	subscribe("alice-token", alice, "test://docs/1")
	subscribe("alice-token", alice, "test://docs/2")
	subscribe("bob-token", bob, "test://docs/2") // not his: acknowledged, never notified
	subscribe("bob-token", bob, "test://docs/3")
	// Reading follows the same rule: another user's doc is not found.
	if msg := result(t, f.request(http.MethodPost, "bob-token", bob, rpc(5, "resources/read", map[string]any{"uri": "test://docs/1"}))); msg["error"] == nil {
		t.Fatalf("bob read alice's doc: %v", msg)
	}
	aliceStream := sseReader(f.request(http.MethodGet, "alice-token", alice, ""))
	bobStream := sseReader(f.request(http.MethodGet, "bob-token", bob, ""))

	// Doc 3 passes to alice after bob subscribed: bob is no longer told.
	mu.Lock()
	owners["3"] = "alice"
	owners["1"] = "bob" // and alice loses doc 1
	mu.Unlock()
	for _, uri := range []string{"test://docs/1", "test://docs/2", "test://docs/3"} {
		f.srv.NotifyResourceUpdated(t.Context(), uri)
	}
	must(t, f.srv.notifySession(alice, "test/sentinel", nil))
	must(t, f.srv.notifySession(bob, "test/sentinel", nil))
	drain := func(next func() map[string]any) []string {
		var got []string
		for {
			m := next()
			if m == nil || m["method"] == "test/sentinel" {
				return got
			}
			params, _ := m["params"].(map[string]any)
			got = append(got, strings.TrimPrefix(params["uri"].(string), "test://docs/"))
		}
	}
	if got := strings.Join(drain(aliceStream), ","); got != "2" {
		t.Errorf("alice was told about docs %q, want 2", got)
	}
	if got := strings.Join(drain(bobStream), ","); got != "" {
		t.Errorf("bob was told about docs %q, want none", got)
	}
}
