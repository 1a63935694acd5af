package metrics

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCounters(t *testing.T) {
	m := New()
	m.ObserveHTTP("oauth_register", http.StatusTooManyRequests, time.Millisecond)
	m.ObserveHTTP("mcp", 200, time.Millisecond)
	m.ObserveCall("", "unknown")
	m.ObserveCall("whoami", "allowed")
	m.JobHandled("mail", "retried")
	m.JobHandled("mail", "dead")
	m.LaneRan("audit-retention", nil)
	m.LaneRan("audit-retention", errors.New("x"))
	m.TokenRefused("expired")
	m.Purged("audit_events", 500)
	m.Purged("audit_events", 20)
	for _, tc := range []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(m.rateLimited.WithLabelValues("oauth_register")), 1, "429 counted as a rate-limit refusal"},
		{testutil.ToFloat64(m.rateLimited.WithLabelValues("mcp")), 0, "a 200 is no refusal"},
		{testutil.ToFloat64(m.calls.WithLabelValues("(unknown)", "unknown")), 1, "unknown names share one label"},
		{testutil.ToFloat64(m.jobs.WithLabelValues("mail", "dead")), 1, "dead job"},
		{testutil.ToFloat64(m.laneRuns.WithLabelValues("audit-retention", "error")), 1, "failed lane run"},
		{testutil.ToFloat64(m.laneRuns.WithLabelValues("audit-retention", "ok")), 1, "lane run"},
		{testutil.ToFloat64(m.tokenRefusals.WithLabelValues("expired")), 1, "token refusal"},
		{testutil.ToFloat64(m.purged.WithLabelValues("audit_events")), 520, "rows purged by retention"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.what, tc.got, tc.want)
		}
	}
}

// The daily rollup adds to SQL on each flush (never per call), keeps what a
// failed flush could not write, and reads table plus pending counts.
func TestDailyRollup(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		d := NewDaily()
		for range 3 {
			d.add(now, true)
		}
		d.add(now, false)
		d.add(now.AddDate(0, 0, -2), true)
		if err := d.Flush(ctx, st.DB); err != nil {
			t.Fatal(err)
		}
		d.add(now, true) // pending, not flushed
		days, err := d.Read(ctx, st.Reader, 30, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(days) != 30 || days[29].Calls != 4 || days[29].Denials != 1 || days[27].Calls != 1 || !days[29].Day.Equal(now.Truncate(24*time.Hour)) {
			t.Fatalf("days: last %+v, two before %+v", days[29], days[27])
		}
		// A second flush adds to the rows.
		if err := d.Flush(ctx, st.DB); err != nil {
			t.Fatal(err)
		}
		fresh := NewDaily() // as after a restart
		days, _ = fresh.Read(ctx, st.Reader, 30, now)
		if days[29].Calls != 4 || days[29].Denials != 1 {
			t.Fatalf("after a restart: %+v", days[29])
		}
		// A flush that fails keeps its counts for the next one.
		fresh.add(now, false)
		broken, cancel := context.WithCancel(ctx)
		cancel()
		if err := fresh.Flush(broken, st.DB); err == nil || !strings.Contains(err.Error(), "flush") {
			t.Fatalf("flush on a cancelled context: %v", err)
		}
		if err := fresh.Flush(ctx, st.DB); err != nil {
			t.Fatal(err)
		}
		days, _ = NewDaily().Read(ctx, st.Reader, 30, now)
		if days[29].Denials != 2 {
			t.Fatalf("the failed flush lost a count: %+v", days[29])
		}
		if err := Purge(ctx, st.DB, 24*time.Hour, now); err != nil {
			t.Fatal(err)
		}
		days, _ = NewDaily().Read(ctx, st.Reader, 30, now)
		if days[27].Calls != 0 || days[29].Calls != 4 {
			t.Fatalf("purge: %+v %+v", days[27], days[29])
		}
	})
}

// TestObserveHTTPSeries: requests land on their own (route, status)
// series, however many times each is seen.
func TestObserveHTTPSeries(t *testing.T) {
	m := New()
	for range 3 {
		m.ObserveHTTP("mcp", 200, time.Millisecond)
	}
	m.ObserveHTTP("mcp", 401, time.Millisecond)
	m.ObserveHTTP("web", 200, time.Millisecond)
	for _, tc := range []struct {
		route, status string
		want          float64
	}{{"mcp", "200", 3}, {"mcp", "401", 1}, {"web", "200", 1}, {"web", "401", 0}} {
		if got := testutil.ToFloat64(m.httpRequests.WithLabelValues(tc.route, tc.status)); got != tc.want {
			t.Errorf("%s %s: %v requests, want %v", tc.route, tc.status, got, tc.want)
		}
	}
	if n := testutil.CollectAndCount(m.httpDuration); n != 2 {
		t.Errorf("%d duration series, want 2 (one per route)", n)
	}
}

// BenchmarkObserveHTTP: the access log's per-request metrics, through the
// kept series and through the vectors' label lookups (as before).
func BenchmarkObserveHTTP(b *testing.B) {
	m := New()
	b.Run("kept", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.ObserveHTTP("mcp", 200, time.Millisecond)
		}
	})
	b.Run("vectors", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.httpRequests.WithLabelValues("mcp", strconv.Itoa(200)).Inc()
			m.httpDuration.WithLabelValues("mcp").Observe(time.Millisecond.Seconds())
		}
	})
}
