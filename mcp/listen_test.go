package mcp

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
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
