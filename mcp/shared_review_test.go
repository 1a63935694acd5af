package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/cluster"
)

// racingSessions runs afterLoad once, between reading a record and
// returning it: another replica ends the session in that instant.
type racingSessions struct {
	*memSessions
	mu        sync.Mutex
	afterLoad func(id string)
}

func (r *racingSessions) LoadSession(ctx context.Context, id string) (SessionRecord, error) {
	rec, err := r.memSessions.LoadSession(ctx, id)
	r.mu.Lock()
	hook := r.afterLoad
	r.afterLoad = nil
	r.mu.Unlock()
	if hook != nil && err == nil {
		hook(id)
	}
	return rec, err
}

// TestSharedSessionEndedWhileAdoptedIsNotServed: replica B loads a session
// for its first request there while replica A ends it (DELETE); A's notice
// reaches B before B has cached the session, so it finds nothing to drop.
// B must not go on serving the ended session from its cache.
func TestSharedSessionEndedWhileAdoptedIsNotServed(t *testing.T) {
	group := cluster.NewLoopback()
	store := &racingSessions{memSessions: newMemSessions()}
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	b := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	sid := a.initialize("alice-token")
	store.mu.Lock()
	store.afterLoad = func(id string) {
		if resp := a.request(http.MethodDelete, "alice-token", id, ""); resp.StatusCode != http.StatusOK {
			t.Errorf("DELETE on A: %d", resp.StatusCode)
		}
	}
	store.mu.Unlock()
	b.request(http.MethodPost, "alice-token", sid, rpc(2, "ping", nil)).Body.Close() // races the DELETE
	if resp := b.request(http.MethodPost, "alice-token", sid, rpc(3, "ping", nil)); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("session deleted on A, used again on B: %d", resp.StatusCode)
	}
}

// TestSharedSessionStreamEndsWhenSessionEndedDuringGap: a session's GET
// stream is on A; while A's bus is down the session is deleted on B. Once
// A's bus is back, A must notice (the notice was lost) and end the stream
// rather than carry it on for a session that no longer exists.
func TestSharedSessionStreamEndsWhenSessionEndedDuringGap(t *testing.T) {
	a, b, busA, _ := replicas(t)
	sid := a.initialize("alice-token")
	stream := sseReader(a.request(http.MethodGet, "alice-token", sid, ""))
	streamReady(t, a, sid, stream)
	busA.Disconnect()
	if resp := b.request(http.MethodDelete, "alice-token", sid, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE on B: %d", resp.StatusCode)
	}
	busA.Reconnect()
	ended := make(chan map[string]any, 1)
	go func() { ended <- stream() }()
	select {
	case m := <-ended:
		if m != nil {
			t.Fatalf("the ended session's stream carried %v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream of a session deleted during the gap is still open on A")
	}
	if _, ok := a.srv.sessions.cached(sid); ok {
		t.Fatal("A still caches the deleted session")
	}
}

// TestSharedSessionEndedWithoutNoticeIsNotServedForever: a session ended
// in the store whose notice never went out (the publication failed, or the
// bus lost it before noticing the break) is refused by a replica holding a
// cached copy once the copy is due for a check, however healthy the bus.
func TestSharedSessionEndedWithoutNoticeIsNotServedForever(t *testing.T) {
	group := cluster.NewLoopback()
	store := newMemSessions()
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	b := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	sid := a.initialize("alice-token")
	if resp := b.request(http.MethodPost, "alice-token", sid, rpc(2, "ping", nil)); resp.StatusCode != http.StatusOK {
		t.Fatalf("ping on B: %d", resp.StatusCode)
	}
	if _, err := store.DeleteSession(t.Context(), sid); err != nil { // ended; no notice
		t.Fatal(err)
	}
	b.clock.Advance(31 * time.Second) // the promised bound is 30 s
	if resp := b.request(http.MethodPost, "alice-token", sid, rpc(3, "ping", nil)); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("session ended without a notice, still served by B's cache after 31 s: %d", resp.StatusCode)
	}
}

// TestSharedSessionStreamEndsWhenEndedWithoutNotice: the GET stream of a
// session ended elsewhere without a notice reaching this replica ends at
// the stream's next periodic check once the cached copy is due.
func TestSharedSessionStreamEndsWhenEndedWithoutNotice(t *testing.T) {
	group := cluster.NewLoopback()
	store := newMemSessions()
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions, o.recheck = group.Join(), store, 20*time.Millisecond })
	sid := a.initialize("alice-token")
	stream := sseReader(a.request(http.MethodGet, "alice-token", sid, ""))
	streamReady(t, a, sid, stream)
	if _, err := store.DeleteSession(t.Context(), sid); err != nil { // ended elsewhere; no notice
		t.Fatal(err)
	}
	a.clock.Advance(31 * time.Second)
	ended := make(chan map[string]any, 1)
	go func() { ended <- stream() }()
	select {
	case m := <-ended:
		if m != nil {
			t.Fatalf("the ended session's stream carried %v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream of a session ended without a notice is still open")
	}
}

// TestServerRequestIDsCarryNoCounter: the id of an elicitation or sampling
// request reaches the client; it must not tell it how many such requests
// the replica sent other sessions in between.
func TestServerRequestIDsCarryNoCounter(t *testing.T) {
	var p pendingRequests
	p.prefix = "enclave-0123abcd-"
	first, _, done := p.add("alice")
	done()
	for range 40 {
		_, _, done := p.add("bob")
		done()
	}
	second, _, done := p.add("alice")
	done()
	var a, b string
	must(t, json.Unmarshal(first, &a))
	must(t, json.Unmarshal(second, &b))
	common := 0
	for common < min(len(a), len(b)) && a[common] == b[common] {
		common++
	}
	if common >= len(p.prefix)+8 || len(a) < len(p.prefix)+16 || !strings.HasPrefix(a, p.prefix) {
		t.Fatalf("request ids %q and %q: want the replica's prefix and a random part", a, b)
	}
}

// TestSharedSessionCopiesDoNotFillReplica: sessions created on A and used
// on B fill B's session table as cached copies; at B's MaxSessions they
// must make room for a new session rather than refuse it with 503, and
// the shed copies keep working (loaded from the shared store again).
func TestSharedSessionCopiesDoNotFillReplica(t *testing.T) {
	group := cluster.NewLoopback()
	store := newMemSessions()
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	b := newFixture(t, func(o *Options) { o.Bus, o.Sessions, o.MaxSessions = group.Join(), store, 2 })
	alice, bob := a.initialize("alice-token"), a.initialize("bob-token")
	for _, c := range []struct{ token, sid string }{{"alice-token", alice}, {"bob-token", bob}} {
		if resp := b.request(http.MethodPost, c.token, c.sid, rpc(2, "ping", nil)); resp.StatusCode != http.StatusOK {
			t.Fatalf("ping on B: %d", resp.StatusCode)
		}
	}
	resp := b.request(http.MethodPost, "admin-token", "", rpc(1, "initialize", map[string]any{
		"protocolVersion": testProtocol, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"},
	}))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize on B with its table full of copies: %d", resp.StatusCode)
	}
	resp.Body.Close()
	for _, c := range []struct{ token, sid string }{{"alice-token", alice}, {"bob-token", bob}} {
		if resp := b.request(http.MethodPost, c.token, c.sid, rpc(3, "ping", nil)); resp.StatusCode != http.StatusOK {
			t.Fatalf("a shed copy on B: %d", resp.StatusCode)
		}
	}
}

// TestStreamedRequestsDoNotAccumulate: with resumable streams on, a POST
// whose response became an SSE stream (a progress notice) is recorded in
// the event log; nothing of it is kept in memory once the request is
// done (memory growing with every streamed call).
func TestStreamedRequestsDoNotAccumulate(t *testing.T) {
	store := &memEvents{memSessions: newMemSessions(), events: map[string][]memEvent{}}
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions = cluster.NewLoopback().Join(), store })
	sid := a.initialize("alice-token")
	for i := range 20 {
		resp := a.request(http.MethodPost, "alice-token", sid, rpc(10+i, "tools/call", map[string]any{
			"name": "progress", "arguments": map[string]any{"tag": "t"}, "_meta": map[string]any{"progressToken": "p"},
		}))
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("call %d was not streamed: %s", i, resp.Header.Get("Content-Type"))
		}
		readAll(resp)
	}
	if got := a.srv.sessions.internalCount(); got != 0 {
		t.Fatalf("%d per-request ids still held after 20 answered calls", got)
	}
	// The recorded events are still there for a client that resumes.
	store.emu.Lock()
	n := len(store.events[SessionHash(sid)])
	store.emu.Unlock()
	if n < 20 {
		t.Fatalf("%d events recorded for 20 streamed calls", n)
	}
}

// internalCount is how many per-request ids are live.
func (s *sessionStore) internalCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.internal)
}
