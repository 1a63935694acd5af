package mcp

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// openListen opens a 2026-07-28 subscriptions/listen stream for token.
func (f *fixture) openListen(token string, notifications map[string]any) (*http.Response, func() map[string]any) {
	f.t.Helper()
	body := rpc(9, "subscriptions/listen", map[string]any{
		"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		},
		"notifications": notifications,
	})
	req, _ := http.NewRequestWithContext(f.t.Context(), http.MethodPost, f.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(versionHeader, "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := http.DefaultClient.Do(req)
	must(f.t, err)
	f.t.Cleanup(func() { resp.Body.Close() })
	next := sseReader(resp)
	ack := next()
	meta, _ := ack["params"].(map[string]any)["_meta"].(map[string]any)
	if ack["method"] != "notifications/subscriptions/acknowledged" || meta["io.modelcontextprotocol/subscriptionId"] != float64(9) {
		f.t.Fatalf("listen: first frame %v", ack)
	}
	return resp, next
}

// TestListenStreamsArePerCaller: a listen stream hears that the tools
// changed only when the tools its caller can see changed, and hears about
// a resource only while its caller passes the resource's guard.
func TestListenStreamsArePerCaller(t *testing.T) {
	f := newFixture(t)
	read := func(_ context.Context, _ *capabilities.Call, uri string, _ map[string]string) ([]capabilities.ResourceContents, error) {
		return []capabilities.ResourceContents{{URI: uri, Text: "x"}}, nil
	}
	must(t, f.reg.RegisterResource(capabilities.Resource{Template: "test://docs/{owner}", Name: "doc", Read: read,
		Allow: func(_ context.Context, call *capabilities.Call, _ string, p map[string]string) (bool, error) {
			return p["owner"] == call.Caller.UserID, nil
		}}))
	filter := map[string]any{"toolsListChanged": true, "resourceSubscriptions": []string{"test://docs/alice"}}
	_, alice := f.openListen("alice-token", filter)
	_, admin := f.openListen("admin-token", filter)

	// An admin-only tool appears: only the admin's stream is told.
	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "adminExtra", Domain: "test", Description: "Admins only.", Annotations: readOnly,
		Requires: capabilities.Requirement{Role: capabilities.RoleAdmin},
		Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) {
			return capabilities.TextResult("ok"), nil
		},
	})))
	f.srv.syncRegistry()
	if m := admin(); m["method"] != "notifications/tools/list_changed" {
		t.Fatalf("admin's stream carried %v, want tools/list_changed", m)
	}
	// alice's doc changed: alice is told, the admin (who subscribed to it
	// but does not own it) is not.
	f.srv.NotifyResourceUpdated(t.Context(), "test://docs/alice")
	m := alice()
	if m["method"] != "notifications/resources/updated" {
		t.Fatalf("alice's first frame after the changes = %v, want resources/updated (and no tools/list_changed)", m)
	}
	if meta, _ := m["params"].(map[string]any)["_meta"].(map[string]any); meta["io.modelcontextprotocol/subscriptionId"] != float64(9) {
		t.Fatalf("untagged frame %v", m)
	}
	done := make(chan map[string]any, 1)
	go func() { done <- admin() }()
	select {
	case m := <-done:
		t.Fatalf("admin's stream carried %v", m)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestListenStreamEndsWithToken: a listen stream ends once its token stops
// verifying, with its final result.
func TestListenStreamEndsWithToken(t *testing.T) {
	var revoked atomic.Bool
	f := newFixture(t, func(o *Options) {
		o.recheck = 20 * time.Millisecond
		inner := o.Verifier
		o.Verifier = TokenVerifierFunc(func(ctx context.Context, token string) (TokenInfo, error) {
			if token == "alice-token" && revoked.Load() {
				return TokenInfo{}, ErrInvalidToken
			}
			return inner.VerifyToken(ctx, token)
		})
	})
	_, next := f.openListen("alice-token", map[string]any{"toolsListChanged": true})
	revoked.Store(true)
	done := make(chan map[string]any, 1)
	go func() { done <- next() }()
	select {
	case m := <-done:
		if res, _ := m["result"].(map[string]any); res["resultType"] != "complete" {
			t.Fatalf("after revocation the stream carried %v, want its final result", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("listen stream still open 5 s after its token was revoked")
	}
}

// TestListenStreamsPerUserBounded: opening more listen streams than
// MaxListensPerUser ends the user's oldest (with its final result); other
// users' streams are untouched; beyond MaxSessions in all, 503.
func TestListenStreamsPerUserBounded(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxListensPerUser = 2; o.MaxSessions = 4 })
	filter := map[string]any{"toolsListChanged": true}
	_, bob := f.openListen("bob-token", filter)
	_, first := f.openListen("alice-token", filter)
	f.openListen("alice-token", filter)
	f.openListen("alice-token", filter) // ends alice's first
	done := make(chan map[string]any, 2)
	go func() { done <- first() }()
	select {
	case m := <-done:
		if res, _ := m["result"].(map[string]any); res["resultType"] != "complete" {
			t.Fatalf("alice's oldest stream carried %v, want its final result", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("alice's oldest stream still open after she opened a third")
	}
	go func() { done <- bob() }()
	select {
	case m := <-done:
		t.Fatalf("bob's stream ended or carried %v", m)
	case <-time.After(200 * time.Millisecond):
	}
	f.openListen("admin-token", filter) // 4 open: bob, alice ×2, admin
	body := rpc(9, "subscriptions/listen", map[string]any{
		"_meta":         map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": map[string]any{}},
		"notifications": filter,
	})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer admin-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(versionHeader, "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a fifth stream: %s, want 503", resp.Status)
	}
}

// TestListenListChangesUseFreshRoles: a stream opened by an admin who has
// since lost the role is not told that admin-only tools changed (the
// roles of the request that opened it are not carried on), and is told
// when tools it can see now change.
func TestListenListChangesUseFreshRoles(t *testing.T) {
	f := newFixture(t)
	_, admin := f.openListen("admin-token", map[string]any{"toolsListChanged": true})
	f.loader.Set(capabilitiestest.User("admin"))
	define := func(name string, req capabilities.Requirement) {
		must(t, f.reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: name, Domain: "test", Description: "Extra.", Annotations: readOnly, Requires: req,
			Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) {
				return capabilities.TextResult("ok"), nil
			},
		})))
		f.srv.syncRegistry()
	}
	// A tool everyone sees: the stream is told (and its view is now the
	// caller's current one).
	define("everyoneExtra", capabilities.Requirement{})
	if m := admin(); m["method"] != "notifications/tools/list_changed" {
		t.Fatalf("frame = %v", m)
	}
	// An admin-only tool: the caller cannot see it any more, so no frame.
	define("adminExtra", capabilities.Requirement{Role: capabilities.RoleAdmin})
	done := make(chan map[string]any, 1)
	go func() { done <- admin() }()
	select {
	case m := <-done:
		t.Fatalf("a second frame %v: the stream heard of the admin-only tool", m)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestGETStreamsPerSessionBounded: a session holds at most
// maxStreamsPerSession GET streams; opening another ends the oldest.
func TestGETStreamsPerSessionBounded(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-token")
	open := func() *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.url, nil)
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set(versionHeader, testProtocol)
		req.Header.Set(sessionHeader, sid)
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET stream: %s", resp.Status)
		}
		return resp
	}
	first := open()
	for range maxStreamsPerSession + 5 {
		open()
	}
	if got := f.srv.Stats().Streams; got > maxStreamsPerSession {
		t.Fatalf("%d GET streams open on one session, want at most %d", got, maxStreamsPerSession)
	}
	ended := make(chan struct{})
	go func() { readAll(first); close(ended) }()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the oldest GET stream is still open")
	}
}

// TestStreamsEndWhenAccountSuspended: a verifier need not know about
// account state; a listen stream and a GET stream still end once their
// user is suspended (the recheck loads the account as a request would).
func TestStreamsEndWhenAccountSuspended(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.recheck = 20 * time.Millisecond })
	_, next := f.openListen("alice-token", map[string]any{"toolsListChanged": true})
	sid := f.initialize("alice-token")
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.url, nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(versionHeader, testProtocol)
	req.Header.Set(sessionHeader, sid)
	get, err := http.DefaultClient.Do(req)
	must(t, err)
	defer get.Body.Close()

	suspended := capabilitiestest.User("alice")
	suspended.State = capabilities.AccountSuspended
	f.loader.Set(suspended)
	listenDone, getDone := make(chan map[string]any, 1), make(chan struct{})
	go func() { listenDone <- next() }()
	go func() { readAll(get); close(getDone) }()
	select {
	case m := <-listenDone:
		if res, _ := m["result"].(map[string]any); res["resultType"] != "complete" {
			t.Fatalf("after suspension the listen stream carried %v, want its final result", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("listen stream still open 5 s after its user was suspended")
	}
	select {
	case <-getDone:
	case <-time.After(5 * time.Second):
		t.Fatal("GET stream still open 5 s after its user was suspended")
	}
}
