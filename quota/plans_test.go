package quota_test

import (
	"context"
	"strings"
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

func n(v int64) *int64 { return &v }

// A user on a small plan is refused after the daily limit, and again after
// the weekly one, each refusal naming its window and when it resets; the
// default plan limits nothing; 80 % and 100 % of each limit are reported
// once per window; usage and the admins' overview follow.
func TestPlansDailyThenWeekly(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		ann, bob := addUser(t, s, 1), addUser(t, s, 2)
		plans := quota.NewPlans(s)
		var mu sync.Mutex
		var alerts []string
		plans.OnAlert = func(_ context.Context, _ bun.IDB, a quota.Alert) error {
			mu.Lock()
			defer mu.Unlock()
			alerts = append(alerts, a.Meter+"/"+a.Window+"/"+a.Period+"/"+map[int]string{80: "80", 100: "100"}[a.Threshold])
			return nil
		}
		if _, err := plans.Save(ctx, quota.Plan{Name: "small", Execute: quota.Window{Daily: n(3), Weekly: n(5)}}); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []quota.Plan{{Name: "Small"}, {Name: "x", Execute: quota.Window{Daily: n(-1)}}, {Name: "x", Execute: quota.Window{Daily: n(5), Weekly: n(3)}}} {
			if _, err := plans.Save(ctx, bad); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
				t.Fatalf("save %+v: %v", bad, err)
			}
		}
		if err := plans.Set(ctx, 1, "small", 0); err != nil {
			t.Fatal(err)
		}
		if err := plans.Set(ctx, 1, "gold", 0); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("an unknown plan: %v", err)
		}
		m := quota.New(s, quota.Limits{Classes: map[string]string{"execute": quota.MeterExecute}, Flush: time.Hour}, nil)
		m.SetPlans(plans)
		// The clock is read by the meter's alert goroutines too.
		var clock atomic.Pointer[time.Time]
		setNow := func(t time.Time) { clock.Store(&t) }
		setNow(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)) // a Monday
		quota.SetNow(m, func() time.Time { return *clock.Load() })

		use := func(c capabilities.Caller, times int) error {
			t.Helper()
			for i := range times {
				if err := m.Allow(ctx, c, "execute"); err != nil {
					return err
				}
				_ = i
			}
			return nil
		}
		if err := use(ann, 3); err != nil {
			t.Fatalf("within the daily limit: %v", err)
		}
		err := use(ann, 1)
		at, _ := capabilities.RetryAfterOf(err)
		if capabilities.CodeOf(err) != capabilities.CodeQuotaExceeded || !strings.Contains(err.Error(), "daily limit of 3") || !at.Equal(time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)) {
			t.Fatalf("past the daily limit: %v (retry after %v)", err, at)
		}
		if err := use(bob, 50); err != nil {
			t.Fatalf("the default plan limits nothing: %v", err)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}

		setNow(clock.Load().AddDate(0, 0, 1)) // Tuesday: 2 more make the week's 5
		if err := use(ann, 2); err != nil {
			t.Fatalf("a new day: %v", err)
		}
		err = use(ann, 1)
		at, _ = capabilities.RetryAfterOf(err)
		if capabilities.CodeOf(err) != capabilities.CodeQuotaExceeded || !strings.Contains(err.Error(), "weekly limit of 5") || !at.Equal(time.Date(2026, 12, 14, 0, 0, 0, 0, time.UTC)) {
			t.Fatalf("past the weekly limit: %v (retry after %v)", err, at)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		u, err := plans.UsageFor(ctx, 1)
		if err != nil || u.Plan != "small" || u.Meters[0].Meter != "execute" || u.Meters[0].Today != 2 || u.Meters[0].Week != 5 || *u.Meters[0].DailyLimit != 3 || *u.Meters[0].WeeklyLimit != 5 {
			t.Fatalf("usage %+v (%v)", u, err)
		}
		top, err := plans.Top(ctx, 10)
		if err != nil || len(top) != 2 || top[0].Username != "cccccccc" || top[0].Total != 50 || top[1].Plan != "small" || top[1].Week["execute"] != 5 {
			t.Fatalf("top %+v (%v)", top, err)
		}

		setNow(clock.Load().AddDate(0, 0, 2)) // Thursday: the week is still used up
		if err := use(ann, 1); err == nil || !strings.Contains(err.Error(), "weekly") {
			t.Fatalf("later in the week: %v", err)
		}
		setNow(time.Date(2026, 12, 14, 0, 0, 1, 0, time.UTC)) // next Monday
		if err := use(ann, 1); err != nil {
			t.Fatalf("a new week: %v", err)
		}

		want := []string{"execute/day/2026-12-07/80", "execute/day/2026-12-07/100", "execute/week/2026-12-07/80", "execute/week/2026-12-07/100"}
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			got := strings.Join(alerts, " ")
			mu.Unlock()
			ok := true
			for _, w := range want {
				ok = ok && strings.Count(got, w) == 1
			}
			if ok && len(strings.Fields(got)) == len(want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("alerts %q, want each of %q once", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Being put on another plan applies at once (the cache is dropped).
		if _, err := plans.Save(ctx, quota.Plan{Name: "tiny", Execute: quota.Window{Daily: n(0)}}); err != nil {
			t.Fatal(err)
		}
		if err := plans.Set(ctx, 2, "tiny", 0); err != nil {
			t.Fatal(err)
		}
		if err := use(bob, 1); capabilities.CodeOf(err) != capabilities.CodeQuotaExceeded {
			t.Fatalf("bob on the tiny plan: %v", err)
		}
	})
}

func TestWeekStart(t *testing.T) {
	for day, want := range map[string]string{"2026-12-07": "2026-12-07", "2026-12-13": "2026-12-07", "2026-12-14": "2026-12-14", "2027-01-01": "2026-12-28"} {
		d, _ := time.Parse(time.DateOnly, day)
		if got := quota.WeekStart(d.Add(23 * time.Hour)).Format(time.DateOnly); got != want {
			t.Errorf("WeekStart(%s) = %s, want %s", day, got, want)
		}
	}
}
