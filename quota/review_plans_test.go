package quota_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Concurrent calls do not get past a plan's daily or weekly limit on a
// replica, each threshold is reported once per window however many calls
// cross it together, and the week turns on Monday 00:00 UTC.
func TestReviewPlansUnderConcurrency(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		ann := addUser(t, s, 1)
		plans := quota.NewPlans(s)
		var alerts sync.Map
		var dup atomic.Int32
		plans.OnAlert = func(_ context.Context, _ bun.IDB, a quota.Alert) error {
			if _, loaded := alerts.LoadOrStore(a.Window+"/"+a.Period+"/"+string(rune('0'+a.Threshold/10)), true); loaded {
				dup.Add(1)
			}
			return nil
		}
		if _, err := plans.Save(ctx, quota.Plan{Name: quota.DefaultPlan, Execute: quota.Window{Daily: n(10), Weekly: n(15)}}); err != nil {
			t.Fatal(err)
		}
		m := quota.New(s, quota.Limits{Classes: map[string]string{"execute": quota.MeterExecute}, Flush: time.Hour}, nil)
		m.SetPlans(plans)
		now := time.Date(2026, 12, 13, 23, 0, 0, 0, time.UTC) // a Sunday
		var clock atomic.Pointer[time.Time]
		clock.Store(&now)
		quota.SetNow(m, func() time.Time { return *clock.Load() })

		burst := func() (allowed int, last error) {
			var wg sync.WaitGroup
			var ok atomic.Int32
			var mu sync.Mutex
			for range 40 {
				wg.Go(func() {
					if err := m.Allow(ctx, ann, "execute"); err == nil {
						ok.Add(1)
					} else {
						mu.Lock()
						last = err
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			return int(ok.Load()), last
		}
		if n, err := burst(); n != 10 || capabilities.CodeOf(err) != capabilities.CodeQuotaExceeded {
			t.Fatalf("Sunday: %d allowed (%v), want the daily 10", n, err)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		// Monday 00:00 UTC: a new day and a new week.
		monday := time.Date(2026, 12, 14, 0, 0, 0, 0, time.UTC)
		clock.Store(&monday)
		if n, _ := burst(); n != 10 {
			t.Fatalf("Monday: %d allowed, want 10 (a new week)", n)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		tuesday := monday.Add(24 * time.Hour)
		clock.Store(&tuesday)
		n, err := burst()
		at, _ := capabilities.RetryAfterOf(err)
		if n != 5 || !at.Equal(monday.AddDate(0, 0, 7)) {
			t.Fatalf("Tuesday: %d allowed, refusal %v (retry after %v), want 5 then the next Monday", n, err, at)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			c := 0
			alerts.Range(func(any, any) bool { c++; return true })
			// Sunday: day 80/100 (the week's 10 of 15 is 66 %: none); Monday: day
			// 80/100; Tuesday: week 80/100 (crossed at 12 and 15).
			if c == 6 || time.Now().After(deadline) {
				if c != 6 {
					t.Fatalf("%d distinct alerts, want 6", c)
				}
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if dup.Load() != 0 {
			t.Fatalf("%d alerts reported twice", dup.Load())
		}
	})
}
