package events_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// burstWrites counts the statements that write denial counters.
type burstWrites struct{ n atomic.Int64 }

func (w *burstWrites) BeforeQuery(ctx context.Context, e *bun.QueryEvent) context.Context {
	if strings.Contains(e.Query, events.BurstTable) && !strings.HasPrefix(strings.TrimSpace(e.Query), "SELECT") {
		w.n.Add(1)
	}
	return ctx
}

func (w *burstWrites) AfterQuery(context.Context, *bun.QueryEvent) {}

// A flood of refused tokens from one client (a made-up token costs its
// sender nothing, and /mcp answers it before any rate limit) must not
// cost the shared database a write per refusal, on the request's path:
// the denials are gathered and written a few at a time, and every one is
// still counted.
func TestSharedDenialCountingCoalescesAFlood(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, store *storage.Store) {
		writes := &burstWrites{}
		store.DB.AddQueryHook(writes)
		p := &events.BurstPublisher{Bursts: events.NewSharedDenialBursts(store, events.BurstOptions{Threshold: 1 << 20, Window: time.Hour})}
		ctx := context.Background()
		now := time.Now()
		const flood = 500
		start := time.Now()
		for range flood {
			p.Observe(ctx, now, "", "203.0.113.7")
		}
		if n := writes.n.Load(); n > 0 {
			t.Fatalf("%d writes of the counters on the requests' path (%d refusals in %v)", n, flood, time.Since(start))
		}
		var total int
		deadline := time.Now().Add(10 * time.Second)
		for {
			if err := store.DB.NewRaw("SELECT COALESCE(SUM(count), 0) FROM "+events.BurstTable+" WHERE scope = 'network'").Scan(ctx, &total); err != nil {
				t.Fatal(err)
			}
			if total >= flood || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if total != flood {
			t.Fatalf("counted %d of %d refusals", total, flood)
		}
		if n := writes.n.Load(); n > 3 {
			t.Fatalf("%d writes for %d refusals of one network, want a few", n, flood)
		}
	})
}

// A flood from ever new networks (an IPv6 sender holds tens of thousands
// of /64s) is bounded too: a flush writes at most about a thousand
// subjects, the rest counted together as the untracked subject, and every
// denial is still counted.
func TestSharedDenialCountingBoundsANetworkFlood(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, store *storage.Store) {
		writes := &burstWrites{}
		store.DB.AddQueryHook(writes)
		p := &events.BurstPublisher{Bursts: events.NewSharedDenialBursts(store, events.BurstOptions{Threshold: 1 << 20, Window: time.Hour})}
		ctx := context.Background()
		now := time.Now()
		const flood = 5000
		for i := range flood {
			p.Observe(ctx, now, "", fmt.Sprintf("2001:db8:%x:%x::1", i>>16, i&0xffff))
		}
		if n := writes.n.Load(); n > 0 {
			t.Fatalf("%d writes of the counters on the requests' path", n)
		}
		var total, untracked int
		deadline := time.Now().Add(20 * time.Second)
		for {
			if err := store.DB.NewRaw("SELECT COALESCE(SUM(count), 0) FROM "+events.BurstTable+" WHERE scope = 'network'").Scan(ctx, &total); err != nil {
				t.Fatal(err)
			}
			if total >= flood || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := store.DB.NewRaw("SELECT COALESCE(SUM(count), 0) FROM "+events.BurstTable+" WHERE scope = 'network' AND subject = ?", events.UntrackedSubject).Scan(ctx, &untracked); err != nil {
			t.Fatal(err)
		}
		if total != flood || untracked < flood-1100 {
			t.Fatalf("counted %d of %d refusals, %d of them untracked", total, flood, untracked)
		}
		if n := writes.n.Load(); n > 1100 {
			t.Fatalf("%d writes for %d refusals, want at most about a thousand", n, flood)
		}
	})
}

// Close writes what the shared counter gathered (a shutdown loses none of
// the last denials) and counts nothing after it.
func TestSharedDenialCountingCloseWritesWhatWasGathered(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, store *storage.Store) {
		p := &events.BurstPublisher{Bursts: events.NewSharedDenialBursts(store, events.BurstOptions{Threshold: 1 << 20, Window: time.Hour})}
		ctx := context.Background()
		now := time.Now()
		for range 7 {
			p.Observe(ctx, now, "", "203.0.113.9")
		}
		p.Close() // at once: the scheduled flush has not run
		p.Observe(ctx, now, "", "203.0.113.9")
		count := func() int {
			var total int
			if err := store.DB.NewRaw("SELECT COALESCE(SUM(count), 0) FROM "+events.BurstTable+" WHERE scope = 'network'").Scan(ctx, &total); err != nil {
				t.Fatal(err)
			}
			return total
		}
		if got := count(); got != 7 {
			t.Fatalf("after Close: %d denials counted, want the 7 gathered before it", got)
		}
		time.Sleep(400 * time.Millisecond) // past a flush interval
		if got := count(); got != 7 {
			t.Fatalf("%d denials counted: one observed after Close was counted", got)
		}
		p.Close() // twice: nothing to do
	})
}
