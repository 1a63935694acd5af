package mcp

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/enclave-mcp/enclave/cluster"
)

// failingSessions is a shared session store that can stop answering, as
// during a database outage.
type failingSessions struct {
	*memSessions
	down atomic.Bool
}

func (f *failingSessions) LoadSession(ctx context.Context, id string) (SessionRecord, error) {
	if f.down.Load() {
		return SessionRecord{}, errors.New("connection refused")
	}
	return f.memSessions.LoadSession(ctx, id)
}

// A session the shared store cannot look up (its database is down) is not
// "not found": the request gets 503 with Retry-After, so that the client
// keeps its session and retries, instead of a 404 that ends the session.
// (With the caller cache, the bearer check no longer fails first during
// an outage.)
func TestSharedSessionStoreOutageIs503(t *testing.T) {
	group := cluster.NewLoopback()
	store := &failingSessions{memSessions: newMemSessions()}
	busA, busB := group.Join(), group.Join()
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions = busA, store })
	b := newFixture(t, func(o *Options) { o.Bus, o.Sessions = busB, store })
	sid := a.initialize("alice-token")
	store.down.Store(true)
	resp := b.request(http.MethodPost, "alice-token", sid, rpc(2, "tools/list", nil))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("session lookup during a store outage: %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	store.down.Store(false)
	if resp := b.request(http.MethodPost, "alice-token", sid, rpc(3, "tools/list", nil)); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the outage: %d", resp.StatusCode)
	}
	if resp := b.request(http.MethodPost, "bob-token", sid, rpc(4, "tools/list", nil)); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another user's session after the outage: %d", resp.StatusCode)
	}
}
