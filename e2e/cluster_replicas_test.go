package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/internal/relclient"
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
		srv := openServer(t, enclave.Config{DataDir: dataDir, DatabaseURL: dbURL, Logger: quiet(), Accounts: fastArgon})
		if _, ok := srv.Bus().(*cluster.Postgres); !ok {
			t.Fatalf("bus on a postgres:// database: %T, want *cluster.Postgres", srv.Bus())
		}
		err := srv.Schedules().Add(schedules.Schedule{Name: "tick", Every: time.Second, Run: func(_ context.Context, tk schedules.Tick) error {
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

// TestReplicasShareMCPSessions: two servers on one PostgreSQL, each with
// its own pools and bus: a session initialized on A is served by B, only
// to its owner, and a DELETE on B ends it on A.
func TestReplicasShareMCPSessions(t *testing.T) {
	dbURL := storagetest.PostgresSchemaURL(t)
	dataDir := t.TempDir()
	lnA, lnB := freeListener(t), freeListener(t)
	base := "http://" + lnA.Addr().String()
	var servers []*enclave.Server
	for _, ln := range []net.Listener{lnA, lnB} {
		srv := openServer(t, enclave.Config{BaseURL: base, DataDir: dataDir, DatabaseURL: dbURL, Logger: quiet(), Accounts: fastArgon})
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = srv.Serve(ctx, ln); close(done) }()
		t.Cleanup(func() { stop(); <-done })
		servers = append(servers, srv)
	}
	const password = "a long password for the replica test"
	for _, who := range []string{"ann", "ben"} {
		if _, _, err := servers[0].Accounts().Identity.CreateUser(t.Context(), accounts.CreateUserInput{Email: who + "@example.com", Username: who, Password: password, Verified: true}); err != nil {
			t.Fatal(err)
		}
	}
	onA, onB := relclient.New(base, nil), relclient.New("http://"+lnB.Addr().String(), nil)
	onA.ForwardedFor, onB.ForwardedFor = "10.7.0.1", "10.7.0.2"
	ann, err := onA.Authorize(t.Context(), "ann@example.com", password)
	if err != nil {
		t.Fatal(err)
	}
	ben, err := onA.Authorize(t.Context(), "ben@example.com", password)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := onA.Open(t.Context(), ann.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	// The same session (id and token) on replica B.
	viaB, err := onB.Open(t.Context(), ann.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	viaB.ID = sess.ID
	if r, err := viaB.Call(t.Context(), "secretSet", map[string]any{"name": "k", "value": "v"}); err != nil || r.IsError {
		t.Fatalf("ann's session on replica B: %v %s", err, r.Text())
	}
	stolen, err := onB.Open(t.Context(), ben.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	stolen.ID = sess.ID
	if _, err := stolen.Call(t.Context(), "secretList", map[string]any{}); relclient.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("ben with ann's session id on replica B: %v", err)
	}
	if err := viaB.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := sess.Call(t.Context(), "secretList", map[string]any{})
		if relclient.StatusOf(err) == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session deleted on B still served on A: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
