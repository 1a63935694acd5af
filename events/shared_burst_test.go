package events_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Two counters on one database (two replicas) add up their denials: the
// burst fires when their sum crosses the threshold, exactly once, and the
// subject then stays quiet for the cooldown on both.
func TestSharedDenialBurstsFireOnceAcrossReplicas(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, store *storage.Store) {
		ctx := context.Background()
		opts := events.BurstOptions{Threshold: 10, Window: time.Hour, Cooldown: 6 * time.Hour}
		replicas := []*events.DenialBursts{events.NewSharedDenialBursts(store, opts), events.NewSharedDenialBursts(store, opts)}
		t0 := time.Date(2026, 5, 1, 10, 5, 0, 0, time.UTC)
		burst := func(at time.Time, n int) (fired int32, maxCount int64) {
			var wg sync.WaitGroup
			var most atomic.Int64
			for i := range n {
				wg.Go(func() {
					c, fire, err := replicas[i%2].CountShared(ctx, at, "network", "subject-a")
					if err != nil {
						t.Error(err)
						return
					}
					if fire {
						atomic.AddInt32(&fired, 1)
					}
					for {
						m := most.Load()
						if int64(c) <= m || most.CompareAndSwap(m, int64(c)) {
							break
						}
					}
				})
			}
			wg.Wait()
			return fired, most.Load()
		}
		// Five on each replica: neither alone reaches ten, together they do.
		if fired, _ := burst(t0, 9); fired != 0 {
			t.Fatalf("%d alerts below the threshold", fired)
		}
		if fired, most := burst(t0.Add(time.Second), 11); fired != 1 || most != 20 {
			t.Fatalf("%d alerts (want exactly one across replicas), count %d (want 20)", fired, most)
		}
		// Another subject is counted apart.
		if n, fire, err := replicas[0].CountShared(ctx, t0, "network", "subject-b"); err != nil || n != 1 || fire {
			t.Fatalf("another subject: %d %v %v", n, fire, err)
		}
		// The next window crosses again, within the cooldown: quiet.
		if fired, _ := burst(t0.Add(time.Hour), 12); fired != 0 {
			t.Fatalf("%d alerts within the cooldown", fired)
		}
		// After the cooldown it fires again, once.
		if fired, _ := burst(t0.Add(7*time.Hour), 12); fired != 1 {
			t.Fatalf("%d alerts after the cooldown, want 1", fired)
		}
		// Retention removes windows older than the window and cooldown.
		var rows int
		if err := store.DB.NewRaw("SELECT COUNT(*) FROM denial_burst_counts").Scan(ctx, &rows); err != nil || rows != 4 {
			t.Fatalf("%d rows, %v", rows, err)
		}
		n, err := retention.PurgeAge(ctx, store.DB, events.BurstRetention(opts), t0.Add(7*time.Hour+time.Minute), 1000)
		if err != nil || n != 2 {
			t.Fatalf("retention removed %d rows (want the first window's 2), %v", n, err)
		}
		// A plain counter refuses to count in SQL.
		if _, _, err := events.NewDenialBursts(opts).CountShared(ctx, t0, "user", "x"); err == nil {
			t.Fatal("an in-memory counter counted in SQL")
		}
	})
}

// Refused /mcp tokens count for the alert: made-up tokens per client
// network, one resolved to its user (a suspended account's) for that user
// too; the
// alert's subjects are the UserHash and IPHash of the refusals' audit rows.
// Two replicas serve the requests and one alert per subject is published.
func TestRefusedTokensRaiseTheDenialBurst(t *testing.T) {
	var mu sync.Mutex
	var seen []events.BurstAlert
	enclavetest.Each(t, enclavetest.Options{
		Config: enclave.Config{DenialBurst: events.BurstOptions{Threshold: 4, Window: time.Hour}},
		Setup: func(srv *enclave.Server) error {
			return srv.Events().Subscribe("alerts", func(_ context.Context, e events.Event) error {
				var a events.BurstAlert
				if err := json.Unmarshal(e.Data, &a); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, a)
				return nil
			}, events.SecurityDenialBurst)
		},
	}, func(t *testing.T, s *enclavetest.Server) {
		mu.Lock()
		seen = nil
		mu.Unlock()
		ctx := context.Background()
		other := s.Replica(t)
		post := func(base, token string) int {
			req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		alerts := func() []events.BurstAlert {
			mu.Lock()
			defer mu.Unlock()
			return append([]events.BurstAlert(nil), seen...)
		}
		// Made-up tokens, two on each replica: one network alert.
		for i := range 4 {
			base := s.URL
			if i%2 == 1 {
				base = other.URL
			}
			if code := post(base, "made-up-token"); code != http.StatusUnauthorized {
				t.Fatalf("made-up token: %d", code)
			}
		}
		waitFor(t, 10*time.Second, "the network alert", func() bool { return len(alerts()) >= 1 })
		if a := alerts()[0]; a.Scope != "network" || a.Count != 4 || a.Subject != s.Audit().HashIP("127.0.0.1") {
			t.Fatalf("alert %+v, want the network of 127.0.0.1", a)
		}

		// A token the verifier resolved to its user (here: of a suspended
		// account) is counted for that user too.
		ann := s.CreateUser(t, "ann")
		token := ann.Token(t)
		if _, err := s.Accounts().Lifecycle.Suspend(ctx, ann.ID); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			base := s.URL
			if i%2 == 1 {
				base = other.URL
			}
			if code := post(base, token); code != http.StatusForbidden {
				t.Fatalf("suspended account's token: %d", code)
			}
		}
		waitFor(t, 10*time.Second, "the user alert", func() bool { return len(alerts()) >= 2 })
		time.Sleep(300 * time.Millisecond)
		got := alerts()
		if len(got) != 2 {
			t.Fatalf("%d alerts, want one per subject: %+v", len(got), got)
		}
		user := got[1]
		if user.Scope != "user" || user.Subject != s.Audit().HashUser(ann.StableID) {
			t.Fatalf("alert %+v, want ann's", user)
		}
		// The audit rows of the refusals carry the alerts' subjects.
		page, err := s.Audit().Query(ctx, audit.Filter{Category: audit.CategoryMCP, Result: audit.ResultDenied}, storage.PageRequest{Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		matched := 0
		for _, e := range page.Items {
			if e.UserHash == user.Subject {
				matched++
				if e.IPHash != got[0].Subject {
					t.Fatalf("audit row IPHash %q, the network alert names %q", e.IPHash, got[0].Subject)
				}
			}
		}
		if matched != 4 {
			t.Fatalf("%d audit rows of ann's refusals, want 4", matched)
		}
	})
}
