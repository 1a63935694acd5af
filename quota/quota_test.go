package quota_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func addUser(t *testing.T, s *storage.Store, id int64) capabilities.Caller {
	t.Helper()
	stable := strings.Repeat(string(rune('a'+id)), 64)
	now := time.Now().UTC()
	_, err := s.DB.NewRaw("INSERT INTO users (id, stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
		id, stable, stable[:8]+"@example.com", stable[:8], now, now).Exec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return capabilities.Caller{UserID: stable}
}

// With one replica the limit is exact, even under concurrent calls and
// flushes; two replicas converge through SQL; a deleted user's counts are
// dropped, not retried for ever.
func TestMeter(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		ann := addUser(t, s, 1)
		lim := quota.Limits{Daily: map[string]int64{quota.DefaultClass: 50}, Flush: time.Hour}
		m := quota.New(s, lim, nil)
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 20 {
					if m.Allow(ctx, ann, "x") == nil {
						allowed.Add(1)
					}
				}
			})
		}
		wg.Go(func() {
			for range 10 {
				if err := m.Flush(ctx); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Wait()
		if n := allowed.Load(); n != 50 {
			t.Fatalf("allowed %d calls, limit 50", n)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		usage, err := quota.UsageOf(ctx, s.DB, 1)
		if err != nil || len(usage) != 1 || usage[0].Calls != 50 {
			t.Fatalf("usage %+v %v", usage, err)
		}

		// Two replicas, 10 calls each while neither has flushed: the
		// overshoot the docs bound; after a flush both see the total.
		bob := addUser(t, s, 2)
		lim.Daily[quota.DefaultClass] = 15
		a, b := quota.New(s, lim, nil), quota.New(s, lim, nil)
		for range 10 {
			if a.Allow(ctx, bob, "x") != nil || b.Allow(ctx, bob, "x") != nil {
				t.Fatal("refused under the limit on each replica")
			}
		}
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Flush(ctx); err != nil { // a reads b's counts back
			t.Fatal(err)
		}
		if a.Allow(ctx, bob, "x") == nil || b.Allow(ctx, bob, "x") == nil {
			t.Fatal("a replica allowed a call past the reconciled total")
		}

		// A class without a limit is not counted; an anonymous caller neither.
		if m.Allow(ctx, ann, "y") == nil && len(lim.Classes) == 0 {
			// "y" is in the default class: refused, as ann is at her limit.
			t.Fatal("default class not applied")
		}
		if err := quota.New(s, quota.Limits{Daily: map[string]int64{"other": 1}}, nil).Allow(ctx, ann, "x"); err != nil {
			t.Fatalf("unlimited class refused: %v", err)
		}

		// The user goes away with counts pending: the flush drops them.
		carol := addUser(t, s, 3)
		if err := m.Allow(ctx, carol, "x"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB.NewDelete().Table("users").Where("id = 3").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatalf("flush after the user's deletion: %v", err)
		}
		if n, _ := s.DB.NewSelect().Table("quota_usage").Where("user_id = 3").Count(ctx); n != 0 {
			t.Fatal("a counter for a deleted user")
		}
	})
}

// The meter's hot path against one SQL UPSERT per call (see bench/ for the
// whole server).
func BenchmarkAllow(b *testing.B) {
	s := storagetest.Open(b, storage.SQLite)
	ann := capabilities.Caller{UserID: strings.Repeat("b", 64)}
	now := time.Now().UTC()
	if _, err := s.DB.NewRaw("INSERT INTO users (id, stable_user_id, email, username, created_at, updated_at) VALUES (1, ?, 'b@example.com', 'bb', ?, ?)",
		ann.UserID, now, now).Exec(context.Background()); err != nil {
		b.Fatal(err)
	}
	m := quota.New(s, quota.Limits{Daily: map[string]int64{quota.DefaultClass: 1 << 40}}, nil)
	ctx := context.Background()
	for b.Loop() {
		if err := m.Allow(ctx, ann, "x"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWithDefaultClass: a domain's default class and limit fill only what
// the operator left unset, and the limits given are not changed.
func TestWithDefaultClass(t *testing.T) {
	op := quota.Limits{Daily: map[string]int64{"runs": 7}, Classes: map[string]string{"execute": "default"}}
	got := op.WithDefaultClass("runs", 100, "execute", "packageSave", "pkg_*")
	if got.Classes["execute"] != "default" || got.Classes["packageSave"] != "runs" || got.Classes["pkg_*"] != "runs" {
		t.Fatalf("classes %v", got.Classes)
	}
	if got.Daily["runs"] != 7 {
		t.Fatalf("the operator's limit was replaced: %v", got.Daily)
	}
	if len(op.Classes) != 1 || len(op.Daily) != 1 {
		t.Fatalf("the given limits changed: %+v", op)
	}
	fresh := quota.Limits{}.WithDefaultClass("remote", 500, "mcp_*")
	if fresh.Daily["remote"] != 500 || fresh.ClassOf("mcp_a__b") != "remote" || fresh.ClassOf("memorySave") == "remote" {
		t.Fatalf("from nothing: %+v", fresh)
	}
}
