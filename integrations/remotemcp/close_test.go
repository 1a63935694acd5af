package remotemcp_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// heldToolsWrite holds the first write of a read-again tool list until
// release is closed.
type heldToolsWrite struct {
	once     sync.Once
	entered  chan struct{}
	release  chan struct{}
	finished atomic.Bool
}

func (h *heldToolsWrite) matches(e *bun.QueryEvent) bool {
	return strings.HasPrefix(e.Query, "UPDATE") && strings.Contains(e.Query, "remote_mcp_servers") && strings.Contains(e.Query, "tools_at")
}

func (h *heldToolsWrite) BeforeQuery(ctx context.Context, e *bun.QueryEvent) context.Context {
	if h.matches(e) {
		h.once.Do(func() {
			close(h.entered)
			<-h.release
		})
	}
	return ctx
}

func (h *heldToolsWrite) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	if h.matches(e) {
		h.finished.Store(true)
	}
}

// Close waits for a tool list being read again in the background (it
// writes the list to the store, which closes next, or whose PostgreSQL
// schema a test drops) and starts none after it.
func TestCloseWaitsForTheBackgroundRefresh(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	held := &heldToolsWrite{entered: make(chan struct{}), release: make(chan struct{})}
	s.DB = s.DB.WithQueryHook(held)
	t.Cleanup(func() {
		select {
		case <-held.release:
		default:
			close(held.release)
		}
	})
	e := newEnv(t, s, 5*time.Second)
	alice := addUser(t, s, "alice")
	r := newRemote(t, echoTools)
	held.once.Do(func() {}) // Add's own write of the list is not held
	if _, err := e.svc.Add(t.Context(), ownerOf(alice), r.srv.URL, "x"); err != nil {
		t.Fatal(err)
	}
	held.once = sync.Once{}
	e.svc.RefreshSoon(ownerOf(alice), "x") // as the remote's list_changed does
	select {
	case <-held.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the tool list read again was not written")
	}
	closed := make(chan struct{})
	go func() {
		e.svc.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while the tool list read again was still being written")
	case <-time.After(300 * time.Millisecond):
	}
	close(held.release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once the write ended")
	}
	if !held.finished.Load() {
		t.Fatal("Close returned before the write ended")
	}

	// After Close, nothing is read again.
	calls := r.calls.Load()
	e.clock.Add(remotemcp.MinRefreshInterval + time.Second) // not refused as too soon
	e.svc.RefreshSoon(ownerOf(alice), "x")
	time.Sleep(300 * time.Millisecond)
	if n := r.calls.Load() - calls; n != 0 {
		t.Fatalf("%d requests to the remote after Close: its list was read again", n)
	}
}
