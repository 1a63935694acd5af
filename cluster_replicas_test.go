package enclave_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// TestReplicasRunJobsAndSchedulesOnce: three replicas on one PostgreSQL,
// each with its own pools and bus: a schedule ticks once per period, each
// job runs once, and the bus chosen for a postgres:// database links them.
func TestReplicasRunJobsAndSchedulesOnce(t *testing.T) {
	dbURL := storagetest.PostgresSchemaURL(t)
	dataDir := t.TempDir()
	var (
		mu    sync.Mutex
		ticks = map[int64]int{} // period (seconds) -> ticks
		runs  = map[string]int{}
	)
	var servers []*enclave.Server
	for range 3 {
		srv, err := enclave.New(t.Context(), enclave.Config{
			DataDir: dataDir, DatabaseURL: dbURL,
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			Accounts: accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		if _, ok := srv.Bus().(*cluster.Postgres); !ok {
			t.Fatalf("bus on a postgres:// database: %T, want *cluster.Postgres", srv.Bus())
		}
		err = srv.Schedules().Add(schedules.Schedule{Name: "tick", Every: time.Second, Run: func(_ context.Context, tk schedules.Tick) error {
			mu.Lock()
			ticks[tk.At.Unix()]++
			mu.Unlock()
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Jobs().Register("count", func(_ context.Context, j jobs.Job) error {
			var id string
			_ = json.Unmarshal(j.Payload, &id)
			mu.Lock()
			runs[id]++
			mu.Unlock()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, srv)
	}
	const n = 30
	for i := range n {
		if err := servers[i%3].Jobs().Enqueue(t.Context(), servers[i%3].Store().DB, "count", "", string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(func() { srv.RunBackground(ctx) })
	}
	time.Sleep(4500 * time.Millisecond)
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != n {
		t.Errorf("%d of %d jobs ran", len(runs), n)
	}
	for id, c := range runs {
		if c != 1 {
			t.Errorf("job %q ran %d times", id, c)
		}
	}
	total := 0
	for _, c := range ticks {
		total += c
	}
	// Periods are one second: ticks are at least ~a second apart, whichever
	// replica runs them; three replicas each ticking would give ~3 per second.
	if total < 2 || total > 5 {
		t.Errorf("ticks in 4.5 s across 3 replicas: %d (%v); want 2..5 (once per period)", total, ticks)
	}
}
