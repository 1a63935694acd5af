package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"gocloud.dev/blob"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// eachDialectTTL is storagetest.EachDialect with stores whose write leases
// last ttl; replica opens another store on the same database and blobs,
// as another replica of the server would.
func eachDialectTTL(t *testing.T, ttl time.Duration, fn func(t *testing.T, s *storage.Store, replica func() *storage.Store)) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			cfg := storagetest.Config(t, d)
			cfg.WriteLeaseTTL = ttl
			open := func() *storage.Store {
				s, err := storage.Open(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			s := open()
			if _, err := migrations.Apply(context.Background(), s.DB); err != nil {
				t.Fatal(err)
			}
			fn(t, s, open)
		})
	}
}

// slowWriters is a registry over a store (the deleting replica's, or
// another's), wired like enclave's server (every call that may write holds
// a write lease on its account), with one capability, draftWrite: it says
// it started, blocks until told to go on (whatever its context says: a
// stuck writer), then writes a blob and a row of its caller's, with its
// context, as domain writers do.
type slowWriters struct {
	w       *world
	reg     *capabilities.Registry
	mu      sync.Mutex
	started map[string]chan struct{}
	proceed map[string]chan struct{}
}

func newSlowWriters(t *testing.T, w *world, s *storage.Store) *slowWriters {
	t.Helper()
	ctx := context.Background()
	id := "INTEGER PRIMARY KEY"
	if s.Dialect() == storage.Postgres {
		id = "BIGSERIAL PRIMARY KEY"
	}
	// No foreign key: nothing but the fence keeps a late row out.
	if _, err := s.DB.ExecContext(ctx, "CREATE TABLE drafts (id "+id+", user_id BIGINT NOT NULL, body TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(w.inv.AddTable(storage.Table{Name: "drafts"}), w.inv.AddBlobPrefix(storage.BlobPrefix{Domain: "drafts"})); err != nil {
		t.Fatal(err)
	}
	sw := &slowWriters{w: w, started: map[string]chan struct{}{}, proceed: map[string]chan struct{}{}}
	owners := lifecycle.Owners(w.acc)
	sw.reg = capabilities.NewRegistry(capabilities.Options{Logger: quiet(), WriteLease: lifecycle.WriteLeases(s, owners)})
	err := sw.reg.Register(capabilities.Define(capabilities.Spec[struct{}, struct{}]{
		Name: "draftWrite", Domain: "test", Description: "Writes a draft, slowly.",
		Annotations: &capabilities.Annotations{},
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (struct{}, error) {
			o, err := owners(ctx, call.Caller)
			if err != nil {
				return struct{}{}, err
			}
			started, proceed := sw.gates(o.StableID)
			close(started)
			<-proceed
			if err := s.Bucket.WriteAll(ctx, storage.BlobKey(storage.Owner(o), "drafts", "late.txt"), []byte("written late"), nil); err != nil {
				return struct{}{}, fmt.Errorf("drafts: write blob: %w", err)
			}
			if _, err := s.DB.ExecContext(ctx, "INSERT INTO drafts (user_id, body) VALUES (?, ?)", o.ID, "late"); err != nil {
				return struct{}{}, fmt.Errorf("drafts: write row: %w", err)
			}
			return struct{}{}, nil
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

func (sw *slowWriters) gates(stableID string) (started, proceed chan struct{}) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.started[stableID] == nil {
		sw.started[stableID], sw.proceed[stableID] = make(chan struct{}), make(chan struct{})
	}
	return sw.started[stableID], sw.proceed[stableID]
}

// start invokes draftWrite as o and returns once its handler is blocked;
// the call's error arrives on the channel when it returns.
func (sw *slowWriters) start(t *testing.T, o storage.Owner) <-chan error {
	t.Helper()
	caller, err := sw.w.acc.LoadCaller(context.Background(), o.StableID)
	if err != nil {
		t.Fatal(err)
	}
	caller.AllScopes = true
	started, _ := sw.gates(o.StableID)
	done := make(chan error, 1)
	go func() {
		_, err := sw.reg.Invoke(context.Background(), caller, "draftWrite", json.RawMessage(`{}`))
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("draftWrite as %s returned before it started writing: %v", o.StableID[:8], err)
	case <-time.After(10 * time.Second):
		t.Fatal("draftWrite did not start")
	}
	return done
}

func (sw *slowWriters) release(o storage.Owner) {
	_, proceed := sw.gates(o.StableID)
	close(proceed)
}

// deleteAsync runs a deletion of o; its outcome arrives on the channel.
func deleteAsync(svc *lifecycle.Service, o storage.Owner) <-chan error {
	done := make(chan error, 1)
	go func() {
		res, err := svc.Delete(context.Background(), o)
		if err == nil && !res.Completed {
			err = errors.New("deletion not completed")
		}
		done <- err
	}()
	return done
}

func waitErr(t *testing.T, ch <-chan error, what string, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(limit):
		t.Fatalf("%s did not end within %v", what, limit)
		return nil
	}
}

// leftovers lists what of o survives: blob keys under its prefix, and its
// rows in drafts and account_write_leases, and its account row.
func leftovers(t *testing.T, s *storage.Store, o storage.Owner) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	it := s.Bucket.List(&blob.ListOptions{Prefix: o.StableID + "/"})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, "blob "+obj.Key)
	}
	for _, q := range []struct{ table, col string }{{"drafts", "user_id"}, {"account_write_leases", "user_id"}, {"users", "id"}} {
		n, err := s.DB.NewSelect().Table(q.table).Where("? = ?", bun.Ident(q.col), o.ID).Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("%d rows in %s", n, q.table))
		}
	}
	return out
}

func hasDraft(t *testing.T, s *storage.Store, o storage.Owner) bool {
	t.Helper()
	ctx := context.Background()
	ok, err := s.Bucket.Exists(ctx, storage.BlobKey(o, "drafts", "late.txt"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.DB.NewSelect().Table("drafts").Where("user_id = ?", o.ID).Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ok && n == 1
}

// A writer stuck mid-call when its account's deletion begins: the deletion
// does not wait for it forever (its lease runs out), and once the deletion
// is done the writer, going on, writes neither its blob nor its row and
// answers that the account is being deleted. A writer of another account,
// stuck alongside, is not held up and writes what it meant to.
func TestDeletionFencesAStuckWriter(t *testing.T) {
	ttl := 1500 * time.Millisecond
	eachDialectTTL(t, ttl, func(t *testing.T, s *storage.Store, _ func() *storage.Store) {
		w := setup(t, s)
		sw := newSlowWriters(t, w, s)
		aliceCall := sw.start(t, w.alice)
		bobCall := sw.start(t, w.bob)

		start := time.Now()
		err := waitErr(t, deleteAsync(w.svc, w.alice), "alice's deletion", ttl+storage.WriteLeaseSkew+15*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < ttl {
			t.Fatalf("the deletion took %v: it did not wait for the lease (ttl %v)", took, ttl)
		}
		sw.release(w.alice)
		err = waitErr(t, aliceCall, "alice's stuck call", 10*time.Second)
		if capabilities.CodeOf(err) != capabilities.CodeAccountDeleting {
			t.Fatalf("alice's writer after her deletion answered %v, want %s", err, capabilities.CodeAccountDeleting)
		}
		if e := err.(*capabilities.Error); strings.Contains(e.Message, "context") || strings.Contains(e.Message, "drafts") {
			t.Fatalf("alice's writer was told %q", e.Message)
		}
		if left := leftovers(t, s, w.alice); len(left) > 0 {
			t.Fatalf("after alice's deletion, left: %v", left)
		}

		sw.release(w.bob)
		if err := waitErr(t, bobCall, "bob's call", 10*time.Second); err != nil {
			t.Fatalf("bob's writer: %v", err)
		}
		if !hasDraft(t, s, w.bob) {
			t.Fatal("bob's draft is missing")
		}
	})
}

// A writer on another replica that goes on while the deletion waits for
// it (before its replica learns of the deletion) writes what it meant to,
// before the clean-up, which then removes it: the deletion finishes only
// after the writer's call returned, and nothing of the account is left.
func TestDeletionWaitsForAWriterOnAnotherReplica(t *testing.T) {
	ttl := 10 * time.Second // long: the other replica renews the lease only after the writer went on
	eachDialectTTL(t, ttl, func(t *testing.T, s *storage.Store, replica func() *storage.Store) {
		w := setup(t, s)
		sw := newSlowWriters(t, w, replica())
		aliceCall := sw.start(t, w.alice)
		deleted := deleteAsync(w.svc, w.alice)
		select {
		case err := <-deleted:
			t.Fatalf("the deletion ended (%v) while a call of the account was still writing", err)
		case <-time.After(300 * time.Millisecond):
		}
		sw.release(w.alice)
		if err := waitErr(t, aliceCall, "alice's call", 10*time.Second); err != nil {
			t.Fatalf("alice's writer, going on before the clean-up: %v", err)
		}
		if err := waitErr(t, deleted, "alice's deletion", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if left := leftovers(t, s, w.alice); len(left) > 0 {
			t.Fatalf("after alice's deletion, left: %v", left)
		}
		if left := leftovers(t, s, w.bob); len(left) != 3 || !strings.HasPrefix(left[1], "blob ") || left[2] != "1 rows in users" {
			t.Fatalf("bob's data: %v", left) // his two note blobs and his account row
		}
	})
}

// A writer on the deleting replica is stopped at once: going on while the
// deletion waits for its call, it writes nothing and answers that the
// account is being deleted, and the deletion finishes as soon as the call
// returned, long before the lease would have run out.
func TestDeletionStopsAWriterOnItsReplica(t *testing.T) {
	ttl := 20 * time.Second
	eachDialectTTL(t, ttl, func(t *testing.T, s *storage.Store, _ func() *storage.Store) {
		w := setup(t, s)
		sw := newSlowWriters(t, w, s)
		aliceCall := sw.start(t, w.alice)
		start := time.Now()
		deleted := deleteAsync(w.svc, w.alice)
		select {
		case err := <-deleted:
			t.Fatalf("the deletion ended (%v) while a call of the account was still running", err)
		case <-time.After(300 * time.Millisecond):
		}
		sw.release(w.alice)
		if err := waitErr(t, aliceCall, "alice's call", 10*time.Second); capabilities.CodeOf(err) != capabilities.CodeAccountDeleting {
			t.Fatalf("alice's writer, going on after the deletion began: %v", err)
		}
		if err := waitErr(t, deleted, "alice's deletion", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took >= ttl/2 {
			t.Fatalf("the deletion took %v: it waited for the lease to run out", took)
		}
		if left := leftovers(t, s, w.alice); len(left) > 0 {
			t.Fatalf("after alice's deletion, left: %v", left)
		}
	})
}

// With a bound shorter than a stuck writer's lease, the deletion gives up
// with the stage "active writers", having removed nothing; the account
// stays marked (new calls that may write are refused), and a retry after
// the writer's call returned completes.
func TestDeletionGivesUpOnActiveWriters(t *testing.T) {
	eachDialectTTL(t, time.Minute, func(t *testing.T, s *storage.Store, _ func() *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		sw := newSlowWriters(t, w, s)
		impatient := lifecycle.New(s, w.inv, w.acc, lifecycle.Options{Logger: quiet(), WriterWait: 3 * time.Second})
		aliceCall := sw.start(t, w.alice)
		res, err := impatient.Delete(ctx, w.alice)
		var de *lifecycle.DeleteError
		if !errors.As(err, &de) || de.Stage != "active writers" || !errors.Is(err, storage.ErrActiveWriters) || res.Completed {
			t.Fatalf("deletion with a writer still running: %+v, %v", res, err)
		}
		for surface, n := range res.Deleted {
			if n > 0 {
				t.Fatalf("the refused deletion removed %d from %s", n, surface)
			}
		}
		if n, _ := storage.CountRows(ctx, s.DB, storage.Table{Name: "notes", OwnerColumn: "user_id"}, w.alice); n != 30 {
			t.Fatalf("alice's notes after the refused deletion: %d", n)
		}
		// The account stays marked: new calls that may write are refused.
		caller, err := w.acc.LoadCaller(ctx, w.alice.StableID)
		if err != nil {
			t.Fatal(err)
		}
		caller.AllScopes = true
		if _, err := sw.reg.Invoke(ctx, caller, "draftWrite", json.RawMessage(`{}`)); capabilities.CodeOf(err) != capabilities.CodeAccountDeleting {
			t.Fatalf("a new write call of the account marked deleting: %v", err)
		}
		sw.release(w.alice)
		if err := waitErr(t, aliceCall, "alice's call", 10*time.Second); capabilities.CodeOf(err) != capabilities.CodeAccountDeleting {
			t.Fatalf("alice's writer, stopped by the deletion: %v", err)
		}
		if res, err := impatient.Delete(ctx, w.alice); err != nil || !res.Completed {
			t.Fatalf("retry: %+v, %v", res, err)
		}
		if left := leftovers(t, s, w.alice); len(left) > 0 {
			t.Fatalf("after alice's deletion, left: %v", left)
		}
	})
}

// BenchmarkInvokeWrite is a call of a capability that may write, with and
// without its write lease: the lease's cost on the hot path.
func BenchmarkInvokeWrite(b *testing.B) {
	for _, d := range storagetest.Dialects() {
		for _, leased := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/lease=%v", d, leased), func(b *testing.B) {
				s := storagetest.Open(b, d)
				acc, err := accounts.New(context.Background(), s, accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}, Logger: quiet()})
				if err != nil {
					b.Fatal(err)
				}
				u, err := acc.Identity.Signup(context.Background(), accounts.SignupInput{Email: "bench@example.com", Username: "bench", Password: "correct horse battery bench"})
				if err != nil {
					b.Fatal(err)
				}
				o := storage.Owner{ID: u.ID, StableID: u.StableID}
				opts := capabilities.Options{Logger: quiet()}
				if leased {
					opts.WriteLease = lifecycle.WriteLeases(s, lifecycle.Owners(acc))
				}
				reg := capabilities.NewRegistry(opts)
				if err := reg.Register(capabilities.Define(capabilities.Spec[struct{}, struct{}]{
					Name: "noop", Domain: "test", Description: "Writes nothing.", Annotations: &capabilities.Annotations{},
					Handler: func(context.Context, *capabilities.Call, struct{}) (struct{}, error) { return struct{}{}, nil },
				})); err != nil {
					b.Fatal(err)
				}
				caller, err := acc.LoadCaller(context.Background(), o.StableID)
				if err != nil {
					b.Fatal(err)
				}
				caller.AllScopes = true
				args := json.RawMessage(`{}`)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := reg.Invoke(context.Background(), caller, "noop", args); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
