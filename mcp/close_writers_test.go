package mcp

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/cluster"
)

// heldPurge is an EventLog whose first PurgeEvents is held until release
// is closed: a session's cleanup still writing when its server closes.
type heldPurge struct {
	*memEvents
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (h *heldPurge) PurgeEvents(ctx context.Context, hash string) error {
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.entered)
		<-h.release
	}
	return h.memEvents.PurgeEvents(ctx, hash)
}

// TestCloseWaitsForTheCleanupOfADroppedSession: a session ended on
// another replica is released here in the background, which purges its
// recorded events from the store; Close waits for that write (a store
// closed, or a PostgreSQL schema dropped, after Close must not meet it),
// and starts no such work after it.
func TestCloseWaitsForTheCleanupOfADroppedSession(t *testing.T) {
	group := cluster.NewLoopback()
	mem := &memEvents{memSessions: newMemSessions(), events: map[string][]memEvent{}}
	held := &heldPurge{memEvents: mem, entered: make(chan struct{}), release: make(chan struct{})}
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), mem })
	b := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), held })
	t.Cleanup(func() {
		select {
		case <-held.release:
		default:
			close(held.release)
		}
	})
	alice := a.initialize("alice-token")
	if resp := b.request(http.MethodPost, "alice-token", alice, rpc(2, "tools/list", nil)); resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/list on B: %s %s", resp.Status, readAll(resp))
	}
	if _, cached := b.srv.sessions.cached(alice); !cached {
		t.Fatal("B did not adopt the session")
	}
	// Ended on A: B drops its copy and releases it in the background.
	if resp := a.request(http.MethodDelete, "alice-token", alice, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE on A: %s", resp.Status)
	}
	select {
	case <-held.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("B never purged the dropped session's events")
	}

	closed := make(chan struct{})
	go func() {
		_ = b.srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while the dropped session's cleanup was still writing to the store")
	case <-time.After(300 * time.Millisecond):
	}
	close(held.release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return once the cleanup ended")
	}

	// After Close, no background work of shared sessions starts.
	ran := make(chan struct{})
	b.srv.goShared(func() { close(ran) })
	select {
	case <-ran:
		t.Fatal("background work started after Close")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestNothingStartsInTheBackgroundOnceClosing: a request still in flight
// while Close waits (a GET opening its session's stream, a call turning
// into a task) must not add to what Close waits for, or start work that
// outlives it: background refuses once Close has begun, and a session's
// stream is not started.
func TestNothingStartsInTheBackgroundOnceClosing(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-token")
	if f.srv.sessionStream(sid) == nil {
		t.Fatal("no stream for a live session before Close")
	}
	sid2 := f.initialize("alice-token")
	if err := f.srv.Close(); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	if f.srv.background(func() { ran <- struct{}{} }) {
		t.Fatal("background started work after Close")
	}
	if f.srv.sessionStream(sid2) != nil {
		t.Fatal("a session's stream was started after Close")
	}
	select {
	case <-ran:
		t.Fatal("the refused work ran")
	case <-time.After(50 * time.Millisecond):
	}
}
