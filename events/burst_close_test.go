package events_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Close waits for the alerts being published: once it returns, the
// security.denial_burst event is in the outbox and nothing of the
// publisher uses the store any more. (A server closes its store right
// after; an alert still being written then held its locks while a test's
// PostgreSQL schema was dropped, and the drop failed with a deadlock.)
// An alert after Close is not published. Both counters: the shared one
// publishes from its flush (here, Close's own), the in-memory one from the
// denial that completes the burst.
func TestBurstPublisherCloseWaitsForItsAlerts(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, store *storage.Store) {
		ctx := context.Background()
		ring, err := envelope.Open(ctx, store.DB, store.Keeper)
		if err != nil {
			t.Fatal(err)
		}
		bus, err := events.New(events.Options{Store: store, Jobs: jobs.New(outbox.New(ring), nil), Ring: ring})
		if err != nil {
			t.Fatal(err)
		}
		alerts := func() int {
			t.Helper()
			n, err := store.DB.NewSelect().Table("outbox").Where("topic = ?", jobs.TopicPrefix+"enclave.event").Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
		opts := events.BurstOptions{Threshold: 3, Window: time.Hour}
		for i, bursts := range []*events.DenialBursts{events.NewSharedDenialBursts(store, opts), events.NewDenialBursts(opts)} {
			before := alerts()
			p := &events.BurstPublisher{Bus: bus, Bursts: bursts}
			now := time.Now()
			for range 3 {
				p.Observe(ctx, now, fmt.Sprint("user-", i), "")
			}
			p.Close()
			if got := alerts() - before; got != 1 {
				t.Fatalf("counter %d: %d alerts in the outbox when Close returned, want 1", i, got)
			}
			for range 5 {
				p.Observe(ctx, now, "another", "")
			}
			time.Sleep(300 * time.Millisecond)
			if got := alerts() - before; got != 1 {
				t.Fatalf("counter %d: %d alerts after Close, want the 1 from before it", i, got)
			}
		}
	})
}
