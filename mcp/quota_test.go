package mcp

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

// quotaAfter lets each caller make n calls, then refuses with a reset time.
type quotaAfter struct {
	mu    sync.Mutex
	n     int
	calls map[string]int
	reset time.Time
}

func (q *quotaAfter) Allow(_ context.Context, c capabilities.Caller, _ string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls[c.UserID]++
	if q.calls[c.UserID] > q.n {
		return &capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "daily limit reached; retry after " + q.reset.Format(time.RFC3339), RetryAfter: q.reset}
	}
	return nil
}

// A quota refusal of tools/call is the JSON-RPC error CodeQuotaExceeded
// with HTTP 200 and data {code, retryAfter}, on a session of an older
// protocol and on a stateless 2026-07-28 request alike; the quota is asked
// once per call.
func TestQuotaRefusalIsJSONRPCError(t *testing.T) {
	q := &quotaAfter{n: 1, calls: map[string]int{}, reset: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}
	f := newFixture(t, func(o *Options) {
		reg := capabilities.NewRegistry(capabilities.Options{Quota: q, Logger: slog.New(slog.DiscardHandler)})
		must(t, reg.Register(capabilities.Define(capabilities.Spec[echoIn, echoOut]{
			Name: "echo", Domain: "test", Description: "Echoes text.", Annotations: readOnly,
			Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
				return echoOut{Echo: in.Text}, nil
			},
		})))
		o.Registry = reg
	})
	check := func(what string, status int, msg map[string]any) {
		t.Helper()
		e, _ := msg["error"].(map[string]any)
		data, _ := e["data"].(map[string]any)
		if status != http.StatusOK || e == nil || e["code"] != float64(CodeQuotaExceeded) || msg["result"] != nil ||
			data["code"] != "quota_exceeded" || data["retryAfter"] != "2026-01-02T00:00:00Z" || msg["id"] != float64(7) {
			t.Fatalf("%s: status %d, %v", what, status, msg)
		}
	}
	sid := f.initialize("alice-token")
	call := rpc(7, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "hi"}})
	if resp := f.request(http.MethodPost, "alice-token", sid, call); resp.StatusCode != http.StatusOK || result(t, resp)["result"] == nil {
		t.Fatal("first call refused")
	}
	resp := f.request(http.MethodPost, "alice-token", sid, call)
	check("session", resp.StatusCode, result(t, resp))

	status, msg := f.modernCall("alice-token", "tools/call", "echo", map[string]any{"name": "echo", "arguments": map[string]any{"text": "hi"}}, map[string]any{})
	check("2026-07-28", status, msg)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.calls["alice"] != 3 {
		t.Fatalf("quota asked %d times for 3 calls", q.calls["alice"])
	}
}
