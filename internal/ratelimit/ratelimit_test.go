package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// fakeClock is a settable clock for tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestLimiterSlidingWindow(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clock := newFakeClock()
		l := New(s, clock.Now)
		lim := Limit{Requests: 3, Window: time.Minute}

		type step struct {
			advance   time.Duration
			bucket    string
			allowed   bool
			remaining int
			retry     time.Duration
		}
		steps := []step{
			{0, "a", true, 2, 0},
			{10 * time.Second, "a", true, 1, 0},
			{10 * time.Second, "a", true, 0, 0},
			// Full: the oldest hit (t=0) leaves the window at t=60s.
			{10 * time.Second, "a", false, 0, 30 * time.Second},
			{0, "b", true, 2, 0}, // another bucket is independent
			// Refused requests are not counted: at t=60s one slot opens.
			{30 * time.Second, "a", true, 0, 0},
			{0, "a", false, 0, 10 * time.Second},
			{10 * time.Second, "a", true, 0, 0},
			{50 * time.Second, "a", true, 1, 0}, // t=120s: the t=60s hit has left, the t=70s one remains
		}
		for i, st := range steps {
			clock.Advance(st.advance)
			d, err := l.Allow(ctx, st.bucket, lim)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if d.Allowed != st.allowed || d.Remaining != st.remaining || d.RetryAfter != st.retry {
				t.Fatalf("step %d (%s at +%s): got %+v, want allowed=%v remaining=%d retry=%s",
					i, st.bucket, clock.Now().Sub(newFakeClock().Now()), d, st.allowed, st.remaining, st.retry)
			}
		}
	})
}

// Concurrent requests from several replicas (separate stores on one
// database) never admit more than the limit.
func TestLimiterHoldsAcrossReplicas(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			cfg := storagetest.Config(t, d)
			const replicas, perReplica, limit = 3, 12, 10
			clock := newFakeClock()
			var limiters []*Limiter
			for i := range replicas {
				s, err := storage.Open(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				if i == 0 {
					if _, err := migrations.Apply(ctx, s.DB); err != nil {
						t.Fatal(err)
					}
				}
				limiters = append(limiters, New(s, clock.Now))
			}
			var allowed, refused atomic.Int64
			var wg sync.WaitGroup
			for _, l := range limiters {
				for range perReplica {
					wg.Go(func() {
						d, err := l.Allow(ctx, "credential:ip:192.0.2.1", Limit{Requests: limit, Window: time.Minute})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							allowed.Add(1)
						} else {
							refused.Add(1)
						}
					})
				}
			}
			wg.Wait()
			if allowed.Load() != limit || refused.Load() != replicas*perReplica-limit {
				t.Fatalf("allowed %d, refused %d; want %d and %d", allowed.Load(), refused.Load(), limit, replicas*perReplica-limit)
			}
		})
	}
}

func TestLimiterSweep(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		clock := newFakeClock()
		l := New(s, clock.Now)
		for _, b := range []string{"x", "y", "z"} {
			if _, err := l.Allow(ctx, b, Limit{}); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Hour)
		if _, err := l.Allow(ctx, "x", Limit{}); err != nil {
			t.Fatal(err)
		}
		if err := l.Sweep(ctx, clock.Now().Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
		n, err := s.DB.NewSelect().Table("rate_limit_hits").Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("%d rows after sweep, want 1 (the recent hit)", n)
		}
	})
}
