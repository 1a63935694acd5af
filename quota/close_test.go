package quota_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Close waits for the plan alerts being recorded in the background (their
// writes would otherwise outlive the store their server closes next), and
// a crossing after Close records none.
func TestMeterCloseWaitsForItsAlerts(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		ann := addUser(t, s, 1)
		plans := quota.NewPlans(s)
		started, release := make(chan struct{}, 4), make(chan struct{})
		var recorded atomic.Int32
		plans.OnAlert = func(_ context.Context, _ bun.IDB, a quota.Alert) error {
			started <- struct{}{}
			<-release
			recorded.Add(1)
			return nil
		}
		if _, err := plans.Save(ctx, quota.Plan{Name: "small", Execute: quota.Window{Daily: n(5)}}); err != nil {
			t.Fatal(err)
		}
		if err := plans.Set(ctx, 1, "small", 0); err != nil {
			t.Fatal(err)
		}
		m := quota.New(s, quota.Limits{Classes: map[string]string{"execute": quota.MeterExecute}, Flush: time.Hour}, nil)
		m.SetPlans(plans)
		for range 4 { // the fourth use crosses 80 % of 5
			if err := m.Allow(ctx, ann, "execute"); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("no alert started at 80 %")
		}
		closed := make(chan struct{})
		go func() { m.Close(); close(closed) }()
		select {
		case <-closed:
			t.Fatal("Close returned while an alert was being recorded")
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		<-closed
		if got := recorded.Load(); got != 1 {
			t.Fatalf("%d alerts recorded when Close returned, want 1", got)
		}
		// The fifth use crosses 100 %: after Close, nothing is recorded.
		if err := m.Allow(ctx, ann, "execute"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
			t.Fatal("an alert started after Close")
		case <-time.After(100 * time.Millisecond):
		}
	})
}
