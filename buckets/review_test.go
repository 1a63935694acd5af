package buckets_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A cursor is not signed: its position is input. A forged one with a
// number, a NUL or an over-long key is invalid input on both dialects,
// never an internal (SQL) error, and never a listing restarted silently.
func TestForgedCursorIsInvalidInput(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := setup(t, s, buckets.Options{})
		for i := range 3 {
			f.must(t, f.aliceC, "storageSet", set("b", fmt.Sprintf("k%d", i), i), nil)
		}
		cursor := func(kind, after string) string {
			return base64.RawURLEncoding.EncodeToString([]byte(`{"k":"` + kind + `","a":` + after + `}`))
		}
		long := `"` + strings.Repeat("x", buckets.MaxKeyBytes+1) + `"`
		for _, after := range []string{`5`, `-1`, `"\u0000"`, `"a\u0000b"`, long, `""`, `true`} {
			_, err := f.invoke(f.aliceC, "storageList", map[string]any{"storageId": "b", "cursor": cursor("storage-keys", after)})
			wantCode(t, err, capabilities.CodeInvalidInput)
			_, err = f.invoke(f.aliceC, "storageBuckets", map[string]any{"cursor": cursor("storage-buckets", after)})
			wantCode(t, err, capabilities.CodeInvalidInput)
		}
		// A well-formed cursor still pages, and bob's cursor over the same
		// storage id pages bob's bucket only.
		var page listOut
		f.must(t, f.aliceC, "storageList", map[string]any{"storageId": "b", "cursor": cursor("storage-keys", `"k0"`)}, &page)
		if got := strings.Join(page.names(), ","); got != "k1,k2" {
			t.Fatalf("after k0: %s", got)
		}
		f.must(t, f.bobC, "storageList", map[string]any{"storageId": "b", "cursor": cursor("storage-keys", `"k0"`)}, &page)
		if len(page.Keys) != 0 {
			t.Fatalf("bob sees %v", page.names())
		}
	})
}

// The reconcile lane run in a loop against writers (sets, deletes,
// transactions, drops, on shared buckets) never finds drift, because it
// takes the same lock as every write: it can neither cause drift nor
// report drift that is not there.
func TestReconcileRacingWriters(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := setup(t, s, buckets.Options{})
		stop := make(chan struct{})
		var corrections int
		var lane sync.WaitGroup
		lane.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, err := f.svc.Reconcile(ctx, 10)
				if err != nil {
					t.Error(err)
					return
				}
				corrections += n
			}
		})
		var writers sync.WaitGroup
		for w := range 4 {
			writers.Go(func() {
				c := f.aliceC
				if w == 3 {
					c = f.bobC
				}
				for i := range 40 {
					id, k := fmt.Sprintf("r%d", i%3), fmt.Sprintf("k%d", i%5)
					switch i % 5 {
					case 0, 1:
						_, _ = f.invoke(c, "storageSet", set(id, k, strings.Repeat("v", w*i)))
					case 2:
						_, _ = f.invoke(c, "storageDelete", map[string]any{"storageId": id, "key": k})
					case 3:
						_, _ = f.invoke(c, "storageTransact", map[string]any{"storageId": id, "ops": []map[string]any{
							{"op": "set", "key": k, "value": i}, {"op": "delete", "key": k + "x"}, {"op": "set", "key": k + "y", "value": "yy"}}})
					case 4:
						if i%10 == 4 {
							_, _ = f.invoke(c, "storageDrop", map[string]any{"storageId": id})
						}
					}
				}
			})
		}
		writers.Wait()
		close(stop)
		lane.Wait()
		if corrections != 0 {
			t.Fatalf("reconcile corrected %d users while racing writers", corrections)
		}
		for _, o := range []storage.Owner{f.alice, f.bob} {
			if counted, stored := f.usage(t, o); counted != stored {
				t.Fatalf("user %d: counted %+v, stored %+v", o.ID, counted, stored)
			}
		}
		if n, err := f.svc.Reconcile(ctx, 10); err != nil || n != 0 {
			t.Fatalf("final reconcile: %d, %v", n, err)
		}
	})
}

// A write that passed Invoke's account check but reaches the database
// after the account was marked deleting, or after it was deleted, writes
// nothing and answers account_deleting (no SQL error); the reconcile lane
// skips such an account instead of failing its tick.
func TestWriteAfterAccountDeletionLeavesNothing(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := setup(t, s, buckets.Options{})
		f.must(t, f.aliceC, "storageSet", set("b", "k", 1), nil)
		f.must(t, f.bobC, "storageSet", set("b", "k", 1), nil)
		// bob is marked deleting after his caller was loaded (the caller
		// still says active, as for a write already past Invoke's check).
		if _, err := s.DB.ExecContext(ctx, "UPDATE users SET deleting_at = ? WHERE id = ?", time.Now().UTC(), f.bob.ID); err != nil {
			t.Fatal(err)
		}
		_, err := f.invoke(f.bobC, "storageSet", set("b", "k2", 2))
		wantCode(t, err, capabilities.CodeAccountDeleting)
		_, err = f.invoke(f.bobC, "storageTransact", map[string]any{"storageId": "new", "ops": []map[string]any{{"op": "set", "key": "x", "value": 1}}})
		wantCode(t, err, capabilities.CodeAccountDeleting)
		if n := f.rows(t, "storage_entries", f.bob); n != 1 {
			t.Fatalf("bob has %d entries, want the 1 from before the mark", n)
		}
		// alice is deleted outright (the users row cascades).
		if _, err := s.DB.ExecContext(ctx, "DELETE FROM users WHERE id = ?", f.alice.ID); err != nil {
			t.Fatal(err)
		}
		_, err = f.invoke(f.aliceC, "storageSet", set("b", "k2", 2))
		wantCode(t, err, capabilities.CodeAccountDeleting)
		if n, err := f.svc.Reconcile(ctx, 10); err != nil || n != 0 {
			t.Fatalf("reconcile: %d, %v", n, err)
		}
		if _, err := f.svc.ReconcileUser(ctx, f.alice.ID); err != nil {
			t.Fatal(err)
		}
		for _, tb := range buckets.Tables {
			if n := f.rows(t, tb.Name, f.alice); n != 0 {
				t.Fatalf("%s: %d rows left", tb.Name, n)
			}
		}
	})
}

// A code run's record is written when it ends, so retention must not
// remove the bucket of a run that is still going because it wrote it
// longer ago than the grace: the grace is at least twice the longest run.
func TestRetentionKeepsBucketOfLongRun(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := setup(t, s, buckets.Options{})
		now := time.Now().UTC()
		f.must(t, f.aliceC, "storageSet", set("exec:run_live", "k", "written at the start of a 3-hour run"), nil)
		if _, err := s.DB.NewRaw("UPDATE storage_buckets SET updated_at = ?", now.Add(-2*time.Hour)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		purge := func(o buckets.RetentionOptions) int64 {
			set := retention.NewSet()
			if err := set.Add(buckets.RetentionPolicies(o)...); err != nil {
				t.Fatal(err)
			}
			p, _ := set.Policy("storage_buckets")
			n, err := p.Purge(ctx, s.DB, now, 100)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := purge(buckets.RetentionOptions{RunTimeout: 3 * time.Hour}); n != 0 {
			t.Fatalf("purged %d buckets of a run that may still be going", n)
		}
		if n := purge(buckets.RetentionOptions{Grace: time.Minute, RunTimeout: 3 * time.Hour}); n != 0 {
			t.Fatalf("a short Grace removed %d buckets of a run that may still be going", n)
		}
		// With runs of at most 30 seconds, the run is over: its bucket goes.
		if n := purge(buckets.RetentionOptions{RunTimeout: 30 * time.Second}); n != 1 {
			t.Fatalf("purged %d, want 1", n)
		}
	})
}

// Retention leaves an account being deleted to its deletion (its write
// lock refuses the account), and its buckets do not crowd others out of a
// batch.
func TestRetentionSkipsDeletingAccounts(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := setup(t, s, buckets.Options{})
		now := time.Now().UTC()
		f.must(t, f.bobC, "storageSet", set("exec:run_gone", "k", "bob's"), nil)
		f.must(t, f.aliceC, "storageSet", set("exec:run_gone", "k", "alice's"), nil)
		for _, q := range []string{"UPDATE storage_buckets SET updated_at = ?", "UPDATE users SET deleting_at = ? WHERE id = 2"} {
			if _, err := s.DB.NewRaw(q, now.Add(-2*time.Hour)).Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		set := retention.NewSet()
		if err := set.Add(buckets.RetentionPolicies(buckets.RetentionOptions{})...); err != nil {
			t.Fatal(err)
		}
		p, _ := set.Policy("storage_buckets")
		if n, err := p.Purge(ctx, s.DB, now, 1); err != nil || n != 1 {
			t.Fatalf("purged %d (%v), want alice's 1", n, err)
		}
		if f.rows(t, "storage_buckets", f.alice) != 0 || f.rows(t, "storage_buckets", f.bob) != 1 {
			t.Fatalf("alice has %d buckets, bob %d", f.rows(t, "storage_buckets", f.alice), f.rows(t, "storage_buckets", f.bob))
		}
	})
}

// Prefixes are ranges, not patterns: LIKE wildcards and escapes match
// themselves, and case matters, on both dialects.
func TestPrefixWildcardsAreLiteral(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := setup(t, s, buckets.Options{})
		keys := []string{"%", "%a", "A", "B", "\\", "\\a", "_", "_a", "a", "a%", "a_b", "ab", "b"}
		var ops []map[string]any
		for _, k := range keys {
			ops = append(ops, map[string]any{"op": "set", "key": k, "value": 1})
		}
		f.must(t, f.aliceC, "storageTransact", map[string]any{"storageId": "w", "ops": ops}, nil)
		f.must(t, f.bobC, "storageSet", set("w", "a-bob", 1), nil)
		for prefix, want := range map[string]string{
			"%": "%,%a", "_": "_,_a", "\\": "\\,\\a", "a": "a,a%,a_b,ab", "a_": "a_b", "a%": "a%", "A": "A", "": strings.Join(keys, ","),
		} {
			var l listOut
			f.must(t, f.aliceC, "storageList", map[string]any{"storageId": "w", "prefix": prefix, "limit": 100}, &l)
			if got := strings.Join(l.names(), ","); got != want {
				t.Errorf("prefix %q: %s, want %s", prefix, got, want)
			}
		}
		// Storage ids are case-sensitive on both dialects.
		var g getOut
		f.must(t, f.aliceC, "storageGet", map[string]any{"storageId": "W", "key": "a"}, &g)
		if g.Found {
			t.Fatal("storage id W reads bucket w")
		}
	})
}

// TestExportPagesAreBoundedInBytes: a page of storage_entries ends at
// storage.MaxExportPageBytes of values, so a bucket of large values never
// has a thousand of them read at once; every entry is still exported.
func TestExportPagesAreBoundedInBytes(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := setup(t, s, buckets.Options{})
		big := strings.Repeat("x", 900<<10)
		for i := range 12 {
			f.must(t, f.aliceC, "storageSet", set("docs", fmt.Sprintf("k%02d", i), big), nil)
		}
		inv := storage.NewInventory()
		if err := buckets.RegisterInventory(inv); err != nil {
			t.Fatal(err)
		}
		table, _ := inv.Table("storage_entries")
		seen, pages := 0, 0
		for cursor := ""; ; {
			page, err := storage.ExportRows(ctx, s.Reader, table, f.alice, storage.PageRequest{Cursor: cursor, Limit: storage.MaxPageLimit})
			if err != nil {
				t.Fatal(err)
			}
			var bytes int
			for _, row := range page.Items {
				v, _ := row["value"].(string)
				bytes += len(v)
			}
			if bytes > storage.MaxExportPageBytes {
				t.Fatalf("a page of %d rows holds %d bytes of values", len(page.Items), bytes)
			}
			seen, pages = seen+len(page.Items), pages+1
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		if seen != 12 || pages < 3 {
			t.Fatalf("exported %d entries in %d pages, want 12 in at least 3", seen, pages)
		}
	})
}

// TestTransactBoundsItsBytes: one storageTransact carries at most
// MaxTransactBytes of values together, however many operations it has;
// a refused one writes nothing.
func TestTransactBoundsItsBytes(t *testing.T) {
	ctx := context.Background()
	f := setup(t, storagetest.Open(t, storage.SQLite), buckets.Options{})
	value := []byte(`"` + strings.Repeat("v", buckets.MaxValueBytes-16) + `"`)
	var ops []buckets.Op
	for i := range buckets.MaxTransactBytes/len(value) + 1 {
		ops = append(ops, buckets.Op{Key: fmt.Sprintf("k%d", i), Value: value})
	}
	if _, err := f.svc.Transact(ctx, f.alice, "docs", ops); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
		t.Fatalf("a transaction of %d values of 1 MiB: %v", len(ops), err)
	}
	if _, err := f.svc.Transact(ctx, f.alice, "docs", ops[:len(ops)-2]); err != nil {
		t.Fatalf("a transaction within the bound: %v", err)
	}
}
