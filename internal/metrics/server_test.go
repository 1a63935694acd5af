package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestNewServerReportsItsSources(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite) // a reader pool of its own
	m := NewServer(ServerSources{Primary: st.DB.DB, Reader: st.Reader.DB, Version: "v9.8.7",
		Queue: func(context.Context) (int, int, error) { return 3, 1, nil }})
	want := `
# HELP enclave_build_info The running version.
# TYPE enclave_build_info gauge
enclave_build_info{version="v9.8.7"} 1
# HELP enclave_jobs_dead Outbox jobs given up after their last attempt.
# TYPE enclave_jobs_dead gauge
enclave_jobs_dead 1
# HELP enclave_jobs_queued Outbox jobs waiting to be delivered (including those to retry).
# TYPE enclave_jobs_queued gauge
enclave_jobs_queued 3
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "enclave_build_info", "enclave_jobs_queued", "enclave_jobs_dead"); err != nil {
		t.Fatal(err)
	}
	pools := func(m *Metrics) map[string]bool {
		families, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, f := range families {
			if f.GetName() != "go_sql_open_connections" {
				continue
			}
			for _, s := range f.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "db_name" {
						seen[l.GetValue()] = true
					}
				}
			}
		}
		return seen
	}
	if got := pools(m); !got["primary"] || !got["reader"] {
		t.Fatalf("pools reported: %v, want primary and reader", got)
	}
	// One pool for both (PostgreSQL): reported once, as the primary.
	one := NewServer(ServerSources{Primary: st.DB.DB, Reader: st.DB.DB, Queue: func(context.Context) (int, int, error) { return 0, 0, nil }})
	if got := pools(one); !got["primary"] || got["reader"] {
		t.Fatalf("pools reported for a shared pool: %v, want the primary alone", got)
	}
}

func TestDailyOverview(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	now := time.Date(2026, 3, 9, 15, 0, 0, 0, time.UTC)
	d := NewDaily()
	d.add(now, true)
	d.add(now, true)
	d.add(now, false)
	d.add(now.AddDate(0, 0, -1), false)
	days, err := d.Overview(st.Reader)(ctx, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(days) != 3 {
		t.Fatalf("%d days, want 3", len(days))
	}
	if days[0].Day != "2026-03-07" || days[0].Calls != 0 || days[0].Denials != 0 ||
		days[1].Day != "2026-03-08" || days[1].Calls != 0 || days[1].Denials != 1 ||
		days[2].Day != "2026-03-09" || days[2].Calls != 2 || days[2].Denials != 1 {
		t.Fatalf("days: %+v", days)
	}
}
