package storage_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// openLeases opens a migrated store of dialect d whose write leases last ttl.
func openLeases(t testing.TB, d storage.Dialect, ttl time.Duration) *storage.Store {
	t.Helper()
	cfg := storagetest.Config(t, d)
	cfg.WriteLeaseTTL = ttl
	s, err := storage.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := migrations.Apply(context.Background(), s.DB); err != nil {
		t.Fatal(err)
	}
	return s
}

// openReplicas opens n stores of dialect d on one migrated database (as
// n replicas would), whose leases last ttl.
func openReplicas(t testing.TB, d storage.Dialect, ttl time.Duration, n int) []*storage.Store {
	t.Helper()
	cfg := storagetest.Config(t, d)
	cfg.WriteLeaseTTL = ttl
	var out []*storage.Store
	for range n {
		s, err := storage.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		out = append(out, s)
	}
	if _, err := migrations.Apply(context.Background(), out[0].DB); err != nil {
		t.Fatal(err)
	}
	return out
}

// eachLeaseDialect is storagetest.EachDialect with stores whose leases
// last ttl.
func eachLeaseDialect(t *testing.T, ttl time.Duration, fn func(t *testing.T, s *storage.Store)) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) { fn(t, openLeases(t, d, ttl)) })
	}
}

// leaseUser inserts an account row named name.
func leaseUser(t testing.TB, s *storage.Store, name string) storage.Owner {
	t.Helper()
	sum := sha256.Sum256([]byte(name))
	o := storage.Owner{StableID: hex.EncodeToString(sum[:])}
	now := time.Now().UTC()
	err := s.DB.NewRaw("INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
		o.StableID, name+"@example.com", name, now, now).Scan(context.Background(), &o.ID)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func markDeleting(t testing.TB, s *storage.Store, o storage.Owner) {
	t.Helper()
	if _, err := s.DB.NewUpdate().Table("users").Set("deleting_at = ?", time.Now().UTC()).Where("id = ?", o.ID).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func leaseRows(t testing.TB, s *storage.Store, o storage.Owner) int {
	t.Helper()
	n, err := s.DB.NewSelect().Table("account_write_leases").Where("user_id = ?", o.ID).Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

func TestWriteLeaseTakeReleaseAndReuse(t *testing.T) {
	ttl := 2 * time.Second // the row lingers a quarter of it after the last call
	eachLeaseDialect(t, ttl, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice := leaseUser(t, s, "alice")
		lctx, release, err := s.WriteLease(ctx, alice, "noteCreate")
		if err != nil {
			t.Fatal(err)
		}
		if err := storage.CheckWrite(lctx); err != nil {
			t.Fatalf("CheckWrite under a live lease = %v", err)
		}
		token := leaseToken(t, s, alice)
		// A call made from within the call uses the same lease.
		inner, innerRelease, err := s.WriteLease(lctx, alice, "noteUpdate")
		if err != nil || inner != lctx {
			t.Fatalf("nested lease: %v (same context: %v)", err, inner == lctx)
		}
		innerRelease()
		if storage.CheckWrite(lctx) != nil {
			t.Fatal("the nested release ended the outer lease")
		}
		// Another call of the account at the same time shares the row.
		other, otherRelease, err := s.WriteLease(ctx, alice, "noteDelete")
		if err != nil {
			t.Fatal(err)
		}
		if leaseRows(t, s, alice) != 1 || leaseToken(t, s, alice) != token {
			t.Fatal("a concurrent call of the account took a row of its own")
		}
		release()
		release() // a second release does nothing
		if err := storage.CheckWrite(lctx); err == nil {
			t.Fatal("CheckWrite after release = nil: a goroutine left over from the call could still write")
		}
		if err := storage.CheckWrite(other); err != nil {
			t.Fatalf("one call's release ended the other's lease: %v", err)
		}
		otherRelease()
		// The idle row stays a moment for the account's next call...
		next, nextRelease, err := s.WriteLease(ctx, alice, "noteCreate")
		if err != nil {
			t.Fatal(err)
		}
		if leaseToken(t, s, alice) != token || storage.CheckWrite(next) != nil {
			t.Fatal("the next call did not reuse the idle lease")
		}
		nextRelease()
		// ...and then goes, well before it would expire.
		deadline := time.Now().Add(ttl * 3 / 4)
		for leaseRows(t, s, alice) != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the idle lease's row is still there")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// A context without a lease is not checked.
		if err := storage.CheckWrite(ctx); err != nil {
			t.Fatalf("CheckWrite without a lease = %v", err)
		}
	})
}

func leaseToken(t testing.TB, s *storage.Store, o storage.Owner) string {
	t.Helper()
	var token string
	if err := s.DB.NewSelect().Table("account_write_leases").Column("token").Where("user_id = ?", o.ID).Scan(context.Background(), &token); err != nil {
		t.Fatal(err)
	}
	return token
}

// An account marked deleting gets no lease. FenceWriters ends at once the
// lease this process holds (its call's context ends with ErrWriteFenced),
// and waits for the call to return. Another account's lease goes on.
func TestFenceWritersEndsLocalLeases(t *testing.T) {
	ttl := time.Minute // no renewal during the test: the fence is FenceWriters'
	eachLeaseDialect(t, ttl, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice, bob, carol := leaseUser(t, s, "alice"), leaseUser(t, s, "bob"), leaseUser(t, s, "carol")
		markDeleting(t, s, carol)
		if _, _, err := s.WriteLease(ctx, carol, "noteCreate"); !errors.Is(err, storage.ErrWriteFenced) {
			t.Fatalf("lease on an account marked deleting: %v", err)
		}
		lctx, release, err := s.WriteLease(ctx, alice, "noteCreate")
		if err != nil {
			t.Fatal(err)
		}
		bctx, bobRelease, err := s.WriteLease(ctx, bob, "noteCreate")
		if err != nil {
			t.Fatal(err)
		}
		defer bobRelease()
		markDeleting(t, s, alice)
		fenced := make(chan error, 1)
		go func() { fenced <- s.FenceWriters(ctx, alice, time.Minute) }()
		select {
		case <-lctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("FenceWriters did not end the lease this process holds")
		}
		if err := storage.CheckWrite(lctx); !errors.Is(err, storage.ErrWriteFenced) {
			t.Fatalf("CheckWrite after the fence = %v", err)
		}
		if _, _, err := s.WriteLease(ctx, alice, "noteCreate"); !errors.Is(err, storage.ErrWriteFenced) {
			t.Fatalf("a new call of the fenced account got a lease: %v", err)
		}
		// The row stays until the call returns: the fence waits for it.
		select {
		case err := <-fenced:
			t.Fatalf("FenceWriters returned %v while the call still held its lease", err)
		case <-time.After(100 * time.Millisecond):
		}
		release()
		select {
		case err := <-fenced:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("FenceWriters did not return after the release")
		}
		if err := storage.CheckWrite(bctx); err != nil {
			t.Fatalf("bob's lease ended: %v", err)
		}
	})
}

// Across replicas: a lease held by another replica keeps FenceWriters
// waiting (ErrActiveWriters when the wait is short); once the account is
// marked, that replica's next renewal is refused, its call's context ends
// with ErrWriteFenced, and the fence is done when the call returns. A
// lease of another account renews on.
func TestFenceWritersAcrossReplicas(t *testing.T) {
	ttl := 900 * time.Millisecond
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			rs := openReplicas(t, d, ttl, 2)
			a, b := rs[0], rs[1]
			alice, bob := leaseUser(t, a, "alice"), leaseUser(t, a, "bob")
			lctx, release, err := b.WriteLease(ctx, alice, "noteCreate")
			if err != nil {
				t.Fatal(err)
			}
			bctx, bobRelease, err := b.WriteLease(ctx, bob, "noteCreate")
			if err != nil {
				t.Fatal(err)
			}
			defer bobRelease()
			if err := a.FenceWriters(ctx, alice, 50*time.Millisecond); !errors.Is(err, storage.ErrActiveWriters) {
				t.Fatalf("FenceWriters with another replica's live lease = %v", err)
			}
			if storage.CheckWrite(lctx) != nil {
				t.Fatal("a replica's fence of an account not marked ended another replica's lease")
			}
			markDeleting(t, a, alice)
			fenced := make(chan error, 1)
			go func() { fenced <- a.FenceWriters(ctx, alice, time.Minute) }()
			select {
			case <-lctx.Done():
			case <-time.After(ttl + 5*time.Second):
				t.Fatal("the other replica's lease of an account marked deleting was renewed")
			}
			if err := storage.CheckWrite(lctx); !errors.Is(err, storage.ErrWriteFenced) {
				t.Fatalf("CheckWrite after the fence = %v", err)
			}
			select {
			case err := <-fenced:
				t.Fatalf("FenceWriters returned %v while the other replica's call held its lease", err)
			case <-time.After(100 * time.Millisecond):
			}
			release()
			select {
			case err := <-fenced:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("FenceWriters did not return after the release")
			}
			time.Sleep(ttl + 100*time.Millisecond)
			if err := storage.CheckWrite(bctx); err != nil {
				t.Fatalf("bob's lease ended: %v", err)
			}
		})
	}
}

// A writer that never returns does not hold a deletion forever: its lease
// runs out TTL after its last renewal, and FenceWriters ends WriteLeaseSkew
// later.
func TestFenceWritersEndsAtExpiry(t *testing.T) {
	ttl := 300 * time.Millisecond
	eachLeaseDialect(t, ttl, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice := leaseUser(t, s, "alice")
		lctx, release, err := s.WriteLease(ctx, alice, "stuck")
		if err != nil {
			t.Fatal(err)
		}
		defer release() // never before the wait: a stuck call
		markDeleting(t, s, alice)
		start := time.Now()
		if err := s.FenceWriters(ctx, alice, time.Minute); err != nil {
			t.Fatal(err)
		}
		if took, most := time.Since(start), ttl+storage.WriteLeaseSkew+2*time.Second; took > most {
			t.Fatalf("FenceWriters took %v, more than %v", took, most)
		}
		if storage.CheckWrite(lctx) == nil {
			t.Fatal("the stuck call's lease is still live after FenceWriters")
		}
	})
}

// A marking that races leases being taken: every lease taken is one that
// FenceWriters, asked right after the marking, sees; none is taken after.
func TestWriteLeaseRacesMarking(t *testing.T) {
	defer storage.SetLeaseSharing(false)() // one row per lease, as from many replicas
	eachLeaseDialect(t, time.Minute, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		for round := range 5 {
			o := leaseUser(t, s, "racer"+string(rune('a'+round)))
			var taken atomic.Int64
			var wg sync.WaitGroup
			var mu sync.Mutex
			var releases []func()
			stop := make(chan struct{})
			for range 4 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						_, release, err := s.WriteLease(ctx, o, "race")
						if errors.Is(err, storage.ErrWriteFenced) {
							return
						}
						if err != nil {
							t.Error(err)
							return
						}
						taken.Add(1)
						mu.Lock()
						releases = append(releases, release)
						mu.Unlock()
					}
				})
			}
			time.Sleep(20 * time.Millisecond)
			markDeleting(t, s, o)
			seen := leaseRows(t, s, o)
			close(stop)
			wg.Wait()
			if got := int(taken.Load()); got != seen || leaseRows(t, s, o) != seen {
				t.Fatalf("round %d: %d leases taken, %d seen right after the marking, %d now", round, got, seen, leaseRows(t, s, o))
			}
			for _, r := range releases {
				r()
			}
		}
	})
}

// BenchmarkWriteLease is the cost a call that may write pays for its
// lease: "shared", calls of an account in a row (they share the lease
// row); "own-row", every call taking a row of its own (one insert and one
// delete on the primary: the first call of a burst, or the calls of
// accounts that write once in a while).
func BenchmarkWriteLease(b *testing.B) {
	for _, d := range storagetest.Dialects() {
		for _, shared := range []bool{true, false} {
			name := "shared"
			if !shared {
				name = "own-row"
			}
			b.Run(string(d)+"/"+name, func(b *testing.B) {
				defer storage.SetLeaseSharing(shared)()
				s := openLeases(b, d, time.Minute)
				o := leaseUser(b, s, "bench")
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					_, release, err := s.WriteLease(ctx, o, "bench")
					if err != nil {
						b.Fatal(err)
					}
					release()
				}
			})
		}
	}
}

// heldLeaseWrite holds the first statement of verb on lease rows until
// release is closed: a lease's write still running when its store closes.
type heldLeaseWrite struct {
	verb     string
	once     sync.Once
	entered  chan struct{}
	release  chan struct{}
	finished atomic.Bool
}

func newHeldLeaseWrite(verb string) *heldLeaseWrite {
	return &heldLeaseWrite{verb: verb, entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldLeaseWrite) matches(e *bun.QueryEvent) bool {
	return strings.HasPrefix(e.Query, h.verb) && strings.Contains(e.Query, "account_write_leases")
}

func (h *heldLeaseWrite) BeforeQuery(ctx context.Context, e *bun.QueryEvent) context.Context {
	if h.matches(e) {
		h.once.Do(func() {
			close(h.entered)
			<-h.release
		})
	}
	return ctx
}

func (h *heldLeaseWrite) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	if h.matches(e) {
		h.finished.Store(true)
	}
}

// closeWaitsFor checks that s.Close waits for the write held, once it has
// begun: no lease's write outlives its store, to meet a closed database or
// a PostgreSQL schema being dropped.
func closeWaitsFor(t *testing.T, s *storage.Store, held *heldLeaseWrite) {
	t.Helper()
	select {
	case <-held.entered:
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s of a lease row", held.verb)
	}
	closed := make(chan struct{})
	go func() {
		_ = s.Close()
		close(closed)
	}()
	select {
	case <-closed:
		close(held.release)
		t.Fatalf("Close returned while a lease's %s was still running", held.verb)
	case <-time.After(300 * time.Millisecond):
	}
	close(held.release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("Close did not return once the %s ended", held.verb)
	}
	if !held.finished.Load() {
		t.Fatalf("Close returned before the %s ended", held.verb)
	}
}

// Close waits for the delete of a lease's row dropped just before it (on
// a goroutine of its own).
func TestCloseWaitsForTheDeleteOfADroppedLease(t *testing.T) {
	defer storage.SetLeaseSharing(false)() // released: dropped at once
	eachLeaseDialect(t, time.Minute, func(t *testing.T, s *storage.Store) {
		o := leaseUser(t, s, "ada")
		held := newHeldLeaseWrite("DELETE")
		s.DB = s.DB.WithQueryHook(held)
		_, release, err := s.WriteLease(context.Background(), o, "test")
		if err != nil {
			t.Fatal(err)
		}
		release()
		closeWaitsFor(t, s, held)
	})
}

// Close waits for the renewal of a lease in flight (on its timer).
func TestCloseWaitsForARenewalInFlight(t *testing.T) {
	eachLeaseDialect(t, 300*time.Millisecond, func(t *testing.T, s *storage.Store) {
		o := leaseUser(t, s, "ada")
		held := newHeldLeaseWrite("UPDATE")
		s.DB = s.DB.WithQueryHook(held)
		_, release, err := s.WriteLease(context.Background(), o, "test")
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		closeWaitsFor(t, s, held)
	})
}
