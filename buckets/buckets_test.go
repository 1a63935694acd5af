package buckets_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestBuckets(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := setup(t, s, buckets.Options{})
		a := f.aliceC

		t.Run("set, get, list, delete", func(t *testing.T) {
			var r1, r2 struct{ Revision int64 }
			f.must(t, a, "storageSet", set("notes", "todo/1", map[string]any{"text": "milk"}), &r1)
			// A value is kept exactly as sent: this number has more digits
			// than a float64 holds.
			f.must(t, a, "storageSet", json.RawMessage(`{"storageId":"notes","key":"todo/2","value":{"n":12345678901234567890123}}`), &r2)
			if r1.Revision <= 0 || r2.Revision <= r1.Revision {
				t.Fatalf("revisions %d, %d: want increasing", r1.Revision, r2.Revision)
			}
			var g getOut
			f.must(t, a, "storageGet", map[string]any{"storageId": "notes", "key": "todo/2"}, &g)
			if !g.Found || string(g.Value) != `{"n":12345678901234567890123}` || g.Revision != r2.Revision {
				t.Fatalf("get: %+v %s", g, g.Value)
			}
			f.must(t, a, "storageSet", set("notes", "nothing", nil), nil)
			f.must(t, a, "storageGet", map[string]any{"storageId": "notes", "key": "nothing"}, &g)
			if !g.Found || string(g.Value) != "null" {
				t.Fatalf("a stored null: %+v %s", g, g.Value)
			}
			var miss getOut
			f.must(t, a, "storageGet", map[string]any{"storageId": "notes", "key": "missing"}, &miss)
			if miss.Found || len(miss.Value) != 0 || miss.Revision != 0 {
				t.Fatalf("a missing key: %+v", miss)
			}
			var l listOut
			f.must(t, a, "storageList", map[string]any{"storageId": "notes", "prefix": "todo/"}, &l)
			if !slices.Equal(l.names(), []string{"todo/1", "todo/2"}) || l.Keys[0].Bytes != int64(len("todo/1")+len(`{"text":"milk"}`)) {
				t.Fatalf("list: %+v", l)
			}
			var d struct{ Deleted bool }
			f.must(t, a, "storageDelete", map[string]any{"storageId": "notes", "key": "todo/1"}, &d)
			if !d.Deleted {
				t.Fatal("delete of a key that exists: deleted false")
			}
			f.must(t, a, "storageDelete", map[string]any{"storageId": "notes", "key": "todo/1"}, &d)
			if d.Deleted {
				t.Fatal("second delete: deleted true")
			}
			if counted, stored := f.usage(t, f.alice); counted != stored || stored.Keys != 2 {
				t.Fatalf("counters %+v, rows %+v", counted, stored)
			}
		})

		t.Run("list pages with a cursor", func(t *testing.T) {
			ops := make([]map[string]any, 0, 25)
			for i := range 25 {
				ops = append(ops, map[string]any{"op": "set", "key": fmt.Sprintf("k%02d", i), "value": i})
			}
			f.must(t, a, "storageTransact", map[string]any{"storageId": "paged", "ops": ops}, nil)
			var all []string
			cursor := ""
			for pages := 0; ; pages++ {
				var l listOut
				f.must(t, a, "storageList", map[string]any{"storageId": "paged", "limit": 10, "cursor": cursor}, &l)
				all = append(all, l.names()...)
				if cursor = l.NextCursor; cursor == "" {
					if pages != 2 {
						t.Fatalf("%d pages, want 3", pages+1)
					}
					break
				}
			}
			if len(all) != 25 || !slices.IsSorted(all) {
				t.Fatalf("pages gave %v", all)
			}
			_, err := f.invoke(a, "storageList", map[string]any{"storageId": "paged", "cursor": "bm90IGEgY3Vyc29y"})
			wantCode(t, err, capabilities.CodeInvalidInput)
		})

		t.Run("prefixes are exact ranges, in code point order", func(t *testing.T) {
			keys := []string{"a", "a/", "a/b", "a/\U0010FFFF", "a/\U0010FFFFz", "a0", "a\uD7FF", "a\uD7FFx", "a\uE000", "b", "é", "é/x"}
			var ops []map[string]any
			for _, k := range keys {
				ops = append(ops, map[string]any{"op": "set", "key": k, "value": true})
			}
			f.must(t, a, "storageTransact", map[string]any{"storageId": "prefixes", "ops": ops}, nil)
			for prefix, want := range map[string][]string{
				"":             keys,
				"a/":           {"a/", "a/b", "a/\U0010FFFF", "a/\U0010FFFFz"},
				"a/\U0010FFFF": {"a/\U0010FFFF", "a/\U0010FFFFz"},
				"a\uD7FF":      {"a\uD7FF", "a\uD7FFx"},
				"é":            {"é", "é/x"},
				"c":            nil,
			} {
				var l listOut
				f.must(t, a, "storageList", map[string]any{"storageId": "prefixes", "prefix": prefix, "limit": 100}, &l)
				if !slices.Equal(l.names(), want) {
					t.Errorf("prefix %q: %q, want %q", prefix, l.names(), want)
				}
			}
		})

		t.Run("buckets lists sizes, drop frees the budget", func(t *testing.T) {
			f.must(t, a, "storageSet", set("exec:run_0123", "x", "scratch"), nil)
			var b bucketsOut
			f.must(t, a, "storageBuckets", map[string]any{}, &b)
			byID := map[string]int{}
			for i, x := range b.Buckets {
				byID[x.StorageID] = i
			}
			ex, ok := byID["exec:run_0123"]
			if !ok || b.Buckets[ex].Kind != "exec" || b.Buckets[ex].Keys != 1 || b.Buckets[ex].Bytes != int64(len("x")+len(`"scratch"`)) {
				t.Fatalf("buckets: %+v", b)
			}
			var sum int64
			for _, x := range b.Buckets {
				sum += x.Bytes
			}
			if b.Usage.Bytes != sum || b.Usage.MaxBytes != buckets.DefaultMaxBytes || b.Usage.MaxKeys != buckets.DefaultMaxKeys {
				t.Fatalf("usage %+v, bucket bytes %d", b.Usage, sum)
			}
			var d buckets.Dropped
			f.must(t, a, "storageDrop", map[string]any{"storageId": "paged"}, &d)
			if !d.Dropped || d.Keys != 25 {
				t.Fatalf("drop: %+v", d)
			}
			f.must(t, a, "storageDrop", map[string]any{"storageId": "paged"}, &d)
			if d.Dropped {
				t.Fatal("second drop: dropped true")
			}
			var after bucketsOut
			f.must(t, a, "storageBuckets", map[string]any{}, &after)
			if after.Usage.Bytes != b.Usage.Bytes-b.Buckets[byID["paged"]].Bytes || len(after.Buckets) != len(b.Buckets)-1 {
				t.Fatalf("after drop: %+v", after)
			}
			if counted, stored := f.usage(t, f.alice); counted != stored {
				t.Fatalf("counters %+v, rows %+v", counted, stored)
			}
		})

		t.Run("deleting a bucket's last key removes the bucket", func(t *testing.T) {
			f.must(t, a, "storageSet", set("short-lived", "k", 1), nil)
			f.must(t, a, "storageDelete", map[string]any{"storageId": "short-lived", "key": "k"}, nil)
			n, err := s.DB.NewSelect().Table("storage_buckets").Where("user_id = ? AND storage_id = 'short-lived'", f.alice.ID).Count(context.Background())
			if err != nil || n != 0 {
				t.Fatalf("%d rows (%v)", n, err)
			}
		})
	})
}

func TestStorageIDs(t *testing.T) {
	for _, id := range []string{"exec:run_0123abc", "package:weather", "job:weather:daily-digest", "notes", "My.Notes_2-x", strings.Repeat("n", 64)} {
		if _, err := buckets.ParseID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"", "exec:", "exec:run 1", "exec:a:b", "package:", "package:Weather", "package:-x", "job:weather", "job:weather:", "job::daily",
		"jobs:x", ":x", "-notes", ".notes", "no tes", "notes/1", strings.Repeat("n", 65), "élan", "exec:" + strings.Repeat("r", 65)} {
		_, err := buckets.ParseID(id)
		wantCode(t, err, capabilities.CodeInvalidInput)
	}
	got, _ := buckets.ParseID(buckets.JobStorageID("weather", "daily"))
	if got.Kind != buckets.KindJob || got.Bound != "weather" || got.String() != "job:weather:daily" {
		t.Fatalf("job id parsed as %+v", got)
	}
	if got, _ := buckets.ParseID(buckets.ExecStorageID("run_1")); got.Kind != buckets.KindExec || got.Bound != "run_1" {
		t.Fatalf("exec id parsed as %+v", got)
	}
	if got, _ := buckets.ParseID(buckets.PackageStorageID("weather")); got.Kind != buckets.KindPackage || got.Bound != "weather" {
		t.Fatalf("package id parsed as %+v", got)
	}
}

func TestCrossUser(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := setup(t, s, buckets.Options{})
		a, b := f.aliceC, f.bobC
		for i := range 3 {
			f.must(t, a, "storageSet", set("shared-name", fmt.Sprintf("secret/%d", i), "alice's"), nil)
		}
		f.must(t, a, "storageSet", set("exec:run_1", "k", "alice's"), nil)
		var page listOut
		f.must(t, a, "storageList", map[string]any{"storageId": "shared-name", "limit": 1}, &page)
		if page.NextCursor == "" {
			t.Fatal("want a next cursor")
		}

		var g getOut
		f.must(t, b, "storageGet", map[string]any{"storageId": "shared-name", "key": "secret/0"}, &g)
		if g.Found {
			t.Fatal("bob reads alice's value")
		}
		var l listOut
		f.must(t, b, "storageList", map[string]any{"storageId": "shared-name", "prefix": "secret/"}, &l)
		if len(l.Keys) != 0 {
			t.Fatalf("bob lists alice's keys: %v", l.names())
		}
		// Alice's cursor gives bob nothing of hers.
		f.must(t, b, "storageList", map[string]any{"storageId": "shared-name", "cursor": page.NextCursor}, &l)
		if len(l.Keys) != 0 {
			t.Fatalf("bob pages alice's keys: %v", l.names())
		}
		var bl bucketsOut
		f.must(t, b, "storageBuckets", map[string]any{}, &bl)
		if len(bl.Buckets) != 0 || bl.Usage.Bytes != 0 {
			t.Fatalf("bob sees buckets %+v", bl)
		}
		var d buckets.Dropped
		f.must(t, b, "storageDrop", map[string]any{"storageId": "shared-name"}, &d)
		f.must(t, b, "storageDelete", map[string]any{"storageId": "exec:run_1", "key": "k"}, nil)
		if d.Dropped {
			t.Fatal("bob dropped alice's bucket")
		}
		// A compare-and-set on alice's revision is about bob's own key.
		_, err := f.invoke(b, "storageSet", map[string]any{"storageId": "shared-name", "key": "secret/0", "value": "bob's", "ifRevision": 1})
		wantCode(t, err, capabilities.CodeConflict)

		// The same id of two users is two buckets.
		f.must(t, b, "storageSet", set("shared-name", "secret/0", "bob's"), nil)
		f.must(t, a, "storageGet", map[string]any{"storageId": "shared-name", "key": "secret/0"}, &g)
		if string(g.Value) != `"alice's"` {
			t.Fatalf("alice's value is now %s", g.Value)
		}
		f.must(t, b, "storageGet", map[string]any{"storageId": "shared-name", "key": "secret/0"}, &g)
		if string(g.Value) != `"bob's"` {
			t.Fatalf("bob's value is %s", g.Value)
		}
		f.must(t, a, "storageList", map[string]any{"storageId": "shared-name"}, &l)
		if len(l.Keys) != 3 {
			t.Fatalf("alice has %v", l.names())
		}
		f.must(t, a, "storageGet", map[string]any{"storageId": "exec:run_1", "key": "k"}, &g)
		if !g.Found {
			t.Fatal("bob's delete removed alice's key")
		}
		for _, o := range []storage.Owner{f.alice, f.bob} {
			if counted, stored := f.usage(t, o); counted != stored {
				t.Fatalf("user %d: counters %+v, rows %+v", o.ID, counted, stored)
			}
		}
	})
}

func TestBadInput(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := setup(t, s, buckets.Options{})
		a := f.aliceC
		huge := `"` + strings.Repeat("x", buckets.MaxValueBytes) + `"`
		for _, c := range []struct {
			name, capability string
			args             any
		}{
			{"invalid id", "storageSet", set("no spaces", "k", 1)},
			{"scoped id of no form", "storageSet", set("other:thing", "k", 1)},
			{"get with invalid id", "storageGet", map[string]any{"storageId": "", "key": "k"}},
			{"list with invalid id", "storageList", map[string]any{"storageId": "exec:"}},
			{"drop with invalid id", "storageDrop", map[string]any{"storageId": "package:UPPER"}},
			{"empty key", "storageSet", set("notes", "", 1)},
			{"key too long", "storageSet", set("notes", strings.Repeat("k", buckets.MaxKeyBytes+1), 1)},
			{"key with NUL", "storageSet", set("notes", "a\x00b", 1)},
			{"value over 1 MiB", "storageSet", json.RawMessage(`{"storageId":"notes","key":"k","value":` + huge + `}`)},
			{"missing value", "storageSet", map[string]any{"storageId": "notes", "key": "k"}},
			{"negative revision", "storageSet", map[string]any{"storageId": "notes", "key": "k", "value": 1, "ifRevision": -1}},
			{"unknown field", "storageSet", map[string]any{"storageId": "notes", "key": "k", "value": 1, "owner": "bob"}},
			{"prefix too long", "storageList", map[string]any{"storageId": "notes", "prefix": strings.Repeat("p", buckets.MaxKeyBytes+1)}},
			{"limit out of range", "storageList", map[string]any{"storageId": "notes", "limit": 5000}},
			{"transact: no ops", "storageTransact", map[string]any{"storageId": "notes", "ops": []any{}}},
			{"transact: unknown op", "storageTransact", map[string]any{"storageId": "notes", "ops": []any{map[string]any{"op": "put", "key": "k", "value": 1}}}},
			{"transact: a key twice", "storageTransact", map[string]any{"storageId": "notes", "ops": []any{
				map[string]any{"op": "set", "key": "k", "value": 1}, map[string]any{"op": "delete", "key": "k"}}}},
			{"transact: one bad value refuses all", "storageTransact", json.RawMessage(`{"storageId":"notes","ops":[{"op":"set","key":"ok","value":1},{"op":"set","key":"big","value":` + huge + `}]}`)},
			{"transact: too many ops", "storageTransact", map[string]any{"storageId": "notes", "ops": func() []any {
				var ops []any
				for i := range buckets.MaxTransactOps + 1 {
					ops = append(ops, map[string]any{"op": "set", "key": fmt.Sprint(i), "value": i})
				}
				return ops
			}()}},
		} {
			t.Run(c.name, func(t *testing.T) {
				_, err := f.invoke(a, c.capability, c.args)
				wantCode(t, err, capabilities.CodeInvalidInput)
				if e, _ := errors.AsType[*capabilities.Error](err); len(e.Message) > 300 {
					t.Fatalf("message of %d bytes", len(e.Message))
				}
			})
		}
		// Invalid JSON cannot travel inside valid arguments: the service
		// refuses it itself.
		_, err := f.svc.Set(context.Background(), f.alice, "notes", "k", json.RawMessage(`{"unterminated":`), nil)
		wantCode(t, err, capabilities.CodeInvalidInput)
		_, err = f.svc.Set(context.Background(), f.alice, "notes", "k", json.RawMessage("\"\xff\""), nil) // not UTF-8
		wantCode(t, err, capabilities.CodeInvalidInput)
		for _, table := range []string{"storage_entries", "storage_buckets", "storage_usage"} {
			if n := f.rows(t, table, f.alice); n != 0 {
				t.Errorf("refused writes left %d rows in %s", n, table)
			}
		}
		// An escaped NUL is JSON text like any other.
		if _, err := f.svc.Set(context.Background(), f.alice, "notes", "k", json.RawMessage(`"\u0000"`), nil); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCompareAndSet(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := setup(t, s, buckets.Options{})
		a := f.aliceC
		cas := func(value any, rev int64) (int64, error) {
			b, err := f.invoke(a, "storageSet", map[string]any{"storageId": "counter", "key": "n", "value": value, "ifRevision": rev})
			var out struct{ Revision int64 }
			_ = json.Unmarshal(b, &out)
			return out.Revision, err
		}
		r1, err := cas(1, 0) // create only
		if err != nil {
			t.Fatal(err)
		}
		_, err = cas(99, 0)
		wantCode(t, err, capabilities.CodeConflict)
		r2, err := cas(2, r1)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cas(99, r1) // stale
		wantCode(t, err, capabilities.CodeConflict)
		var g getOut
		f.must(t, a, "storageGet", map[string]any{"storageId": "counter", "key": "n"}, &g)
		if string(g.Value) != "2" || g.Revision != r2 {
			t.Fatalf("after conflicts: %s at %d", g.Value, g.Revision)
		}
		_, err = f.invoke(a, "storageDelete", map[string]any{"storageId": "counter", "key": "n", "ifRevision": r1})
		wantCode(t, err, capabilities.CodeConflict)
		f.must(t, a, "storageDelete", map[string]any{"storageId": "counter", "key": "n", "ifRevision": r2}, nil)
		// A key deleted and made again never gets an old revision back.
		r3, err := cas(3, 0)
		if err != nil || r3 <= r2 {
			t.Fatalf("recreated at %d after %d (%v)", r3, r2, err)
		}
		_, err = cas(99, r1)
		wantCode(t, err, capabilities.CodeConflict)

		t.Run("concurrent increments lose nothing", func(t *testing.T) {
			const workers, each = 4, 5
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for done := 0; done < each; {
						b, err := f.invoke(a, "storageGet", map[string]any{"storageId": "counter", "key": "n"})
						var g getOut
						if err == nil {
							err = json.Unmarshal(b, &g)
						}
						if err != nil {
							t.Error(err)
							return
						}
						var n int
						_ = json.Unmarshal(g.Value, &n)
						if _, err := cas(n+1, g.Revision); err == nil {
							done++
						} else if capabilities.CodeOf(err) != capabilities.CodeConflict {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			f.must(t, a, "storageGet", map[string]any{"storageId": "counter", "key": "n"}, &g)
			if string(g.Value) != fmt.Sprint(3+workers*each) {
				t.Fatalf("counter %s, want %d", g.Value, 3+workers*each)
			}
		})
	})
}

func TestTransactIsAllOrNothing(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := setup(t, s, buckets.Options{})
		a := f.aliceC
		var r struct{ Revision int64 }
		f.must(t, a, "storageSet", set("tx", "keep", "v1"), &r)
		_, err := f.invoke(a, "storageTransact", map[string]any{"storageId": "tx", "ops": []any{
			map[string]any{"op": "set", "key": "new", "value": "written?"},
			map[string]any{"op": "delete", "key": "keep"},
			map[string]any{"op": "set", "key": "guard", "value": 1, "ifRevision": 12345},
		}})
		wantCode(t, err, capabilities.CodeConflict)
		var l listOut
		f.must(t, a, "storageList", map[string]any{"storageId": "tx"}, &l)
		if !slices.Equal(l.names(), []string{"keep"}) {
			t.Fatalf("a failed transaction left %v", l.names())
		}
		var out buckets.TransactOutput
		f.must(t, a, "storageTransact", map[string]any{"storageId": "tx", "ops": []any{
			map[string]any{"op": "set", "key": "new", "value": "yes", "ifRevision": 0},
			map[string]any{"op": "delete", "key": "keep", "ifRevision": r.Revision},
			map[string]any{"op": "delete", "key": "never-was"},
		}}, &out)
		if len(out.Results) != 3 || out.Results[0].Revision <= r.Revision || !out.Results[1].Deleted || out.Results[2].Deleted {
			t.Fatalf("results %+v", out.Results)
		}
		f.must(t, a, "storageList", map[string]any{"storageId": "tx"}, &l)
		if !slices.Equal(l.names(), []string{"new"}) {
			t.Fatalf("after the transaction: %v", l.names())
		}
		if counted, stored := f.usage(t, f.alice); counted != stored {
			t.Fatalf("counters %+v, rows %+v", counted, stored)
		}
	})
}

func TestBudget(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := setup(t, s, buckets.Options{MaxBytes: 1000, MaxKeys: 5})
		a := f.aliceC
		value := `"` + strings.Repeat("v", 396) + `"` // 398 bytes + a 2-byte key: 400
		f.must(t, a, "storageSet", json.RawMessage(`{"storageId":"b","key":"k1","value":`+value+`}`), nil)
		f.must(t, a, "storageSet", json.RawMessage(`{"storageId":"b","key":"k2","value":`+value+`}`), nil)
		before, _ := f.usage(t, f.alice)

		_, err := f.invoke(a, "storageSet", json.RawMessage(`{"storageId":"other","key":"k3","value":`+value+`}`))
		wantCode(t, err, capabilities.CodeQuotaExceeded)
		if e, _ := errors.AsType[*capabilities.Error](err); !strings.Contains(e.Message, "800 of your 1000 bytes") {
			t.Fatalf("message %q", e.Message)
		}
		after, stored := f.usage(t, f.alice)
		if after != before || stored != before || f.rows(t, "storage_buckets", f.alice) != 1 {
			t.Fatalf("a refused write changed the counters %+v → %+v (rows %+v)", before, after, stored)
		}
		// Overwriting a key costs only the difference; shrinking always
		// passes.
		f.must(t, a, "storageSet", json.RawMessage(`{"storageId":"b","key":"k2","value":`+value[:len(value)-100]+`"}`), nil)
		f.must(t, a, "storageSet", set("b", "k3", strings.Repeat("v", 150)), nil)
		if counted, stored := f.usage(t, f.alice); counted != stored || counted.Bytes > 1000 {
			t.Fatalf("counters %+v, rows %+v", counted, stored)
		}

		// The key limit.
		f.must(t, a, "storageSet", set("b", "k4", 1), nil)
		f.must(t, a, "storageSet", set("b", "k5", 1), nil)
		_, err = f.invoke(a, "storageSet", set("b", "k6", 1))
		wantCode(t, err, capabilities.CodeQuotaExceeded)
		f.must(t, a, "storageSet", set("b", "k5", 2), nil) // replacing adds no key
		// Bob's budget is his own.
		f.must(t, f.bobC, "storageSet", json.RawMessage(`{"storageId":"b","key":"k1","value":`+value+`}`), nil)
	})
}

// Twenty writers race for the last bytes of a budget: exactly as many as
// fit succeed, the rest are refused, and the counter equals the stored
// bytes, never over the limit.
func TestBudgetRace(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		const limit, entry = 10_000, 500
		f := setup(t, s, buckets.Options{MaxBytes: limit})
		a := f.aliceC
		// 9,000 bytes in use: room for two more entries of 500.
		var ops []map[string]any
		for i := range 18 {
			ops = append(ops, map[string]any{"op": "set", "key": fmt.Sprintf("f%02d", i), "value": strings.Repeat("x", entry-3-2)})
		}
		f.must(t, a, "storageTransact", map[string]any{"storageId": "fill", "ops": ops}, nil)
		if c, _ := f.usage(t, f.alice); c.Bytes != 9000 {
			t.Fatalf("filled %d bytes", c.Bytes)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[capabilities.Code]int{}
		for i := range 20 {
			wg.Go(func() {
				id := fmt.Sprintf("race-%d", i%3) // some writers share a bucket
				_, err := f.invoke(a, "storageSet", set(id, fmt.Sprintf("w%02d", i), strings.Repeat("y", entry-3-2)))
				code := capabilities.Code("ok")
				if err != nil {
					code = capabilities.CodeOf(err)
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if codes["ok"] != 2 || codes[capabilities.CodeQuotaExceeded] != 18 {
			t.Fatalf("outcomes %v: want 2 ok, 18 quota_exceeded", codes)
		}
		counted, stored := f.usage(t, f.alice)
		if counted != stored || counted.Bytes != limit {
			t.Fatalf("counters %+v, rows %+v, limit %d", counted, stored, limit)
		}
		var bl bucketsOut
		f.must(t, a, "storageBuckets", map[string]any{}, &bl)
		var sum int64
		for _, b := range bl.Buckets {
			sum += b.Bytes
		}
		if sum != stored.Bytes {
			t.Fatalf("bucket counters sum to %d, rows %d", sum, stored.Bytes)
		}
	})
}

func TestReconcile(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := setup(t, s, buckets.Options{})
		f.must(t, f.aliceC, "storageSet", set("a", "k", "value"), nil)
		f.must(t, f.aliceC, "storageSet", set("b", "k", "value"), nil)
		f.must(t, f.bobC, "storageSet", set("a", "k", "value"), nil)
		if n, err := f.svc.Reconcile(ctx, 10); err != nil || n != 0 {
			t.Fatalf("nothing drifted: %d corrected (%v)", n, err)
		}
		// Tamper: alice's counters, one of her buckets' counters, an
		// empty bucket row left behind.
		for _, q := range []string{
			"UPDATE storage_usage SET bytes = 7, key_count = 40 WHERE user_id = 1",
			"UPDATE storage_buckets SET bytes = 1, key_count = 9 WHERE user_id = 1 AND storage_id = 'a'",
		} {
			if _, err := s.DB.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.DB.ExecContext(ctx, "INSERT INTO storage_buckets (user_id, storage_id, kind, created_at, updated_at) VALUES (1, 'empty', 'named', ?, ?)", time.Now(), time.Now()); err != nil {
			t.Fatal(err)
		}
		// One user per call: the sweep goes on where it stopped.
		if n, err := f.svc.Reconcile(ctx, 1); err != nil || n != 1 {
			t.Fatalf("first sweep corrected %d (%v)", n, err)
		}
		if n, err := f.svc.Reconcile(ctx, 1); err != nil || n != 0 {
			t.Fatalf("bob needed no correction: %d (%v)", n, err)
		}
		counted, stored := f.usage(t, f.alice)
		if counted != stored || stored.Keys != 2 {
			t.Fatalf("counters %+v, rows %+v", counted, stored)
		}
		var bl bucketsOut
		f.must(t, f.aliceC, "storageBuckets", map[string]any{}, &bl)
		if len(bl.Buckets) != 2 || bl.Buckets[0].StorageID != "a" || bl.Buckets[0].Keys != 1 || bl.Buckets[0].Bytes != int64(len("k")+len(`"value"`)) {
			t.Fatalf("buckets after reconcile: %+v", bl.Buckets)
		}
		for range 2 { // to the end of the users, then around from the first
			if n, err := f.svc.Reconcile(ctx, 10); err != nil || n != 0 {
				t.Fatalf("second pass corrected %d (%v)", n, err)
			}
		}
	})
}

func TestExportAndDeletion(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := setup(t, s, buckets.Options{})
		inv := storage.NewInventory()
		if err := buckets.RegisterInventory(inv); err != nil {
			t.Fatal(err)
		}
		f.must(t, f.aliceC, "storageSet", set("notes", "k1", map[string]any{"a": 1}), nil)
		f.must(t, f.aliceC, "storageSet", set("package:weather", "k2", "v"), nil)
		f.must(t, f.bobC, "storageSet", set("notes", "k1", "bob's"), nil)

		table, _ := inv.Table("storage_entries")
		page, err := storage.ExportRows(ctx, s.Reader, table, f.alice, storage.PageRequest{Limit: 1})
		if err != nil || len(page.Items) != 1 || page.Next == "" {
			t.Fatalf("first page %+v (%v)", page, err)
		}
		rest, err := storage.ExportRows(ctx, s.Reader, table, f.alice, storage.PageRequest{Cursor: page.Next, Limit: 10})
		if err != nil || len(rest.Items) != 1 || rest.Next != "" {
			t.Fatalf("second page %+v (%v)", rest, err)
		}
		values := []any{page.Items[0]["value"], rest.Items[0]["value"]}
		if values[0] != `{"a":1}` || values[1] != `"v"` {
			t.Fatalf("exported values %v", values)
		}
		for _, name := range []string{"storage_buckets", "storage_usage"} {
			table, _ := inv.Table(name)
			if n, err := storage.CountRows(ctx, s.Reader, table, f.alice); err != nil || n == 0 {
				t.Fatalf("%s: %d rows to export (%v)", name, n, err)
			}
			if _, err := storage.ExportRows(ctx, s.Reader, table, f.alice, storage.PageRequest{}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}

		err = s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			_, err := inv.DeleteRows(ctx, tx, f.alice)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{"storage_entries", "storage_buckets", "storage_usage"} {
			if n := f.rows(t, table, f.alice); n != 0 {
				t.Errorf("%s: %d of alice's rows left", table, n)
			}
			if n := f.rows(t, table, f.bob); n == 0 {
				t.Errorf("%s: bob's rows went too", table)
			}
		}
	})
}

func TestRetentionRemovesUnboundBuckets(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := setup(t, s, buckets.Options{})
		a := f.aliceC
		now := time.Now().UTC()
		exec := func(q string, args ...any) {
			t.Helper()
			if _, err := s.DB.NewRaw(q, args...).Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		exec("INSERT INTO code_runs (id, user_id, kind, status, started_at, duration_ms) VALUES ('run_kept', 1, 'execute', 'succeeded', ?, 1)", now)
		exec("INSERT INTO code_packages (user_id, name, latest_version, created_at, updated_at) VALUES (1, 'kept', 1, ?, ?)", now, now)
		// Bob's package of the same name keeps nothing of alice's.
		exec("INSERT INTO code_packages (user_id, name, latest_version, created_at, updated_at) VALUES (2, 'gone', 1, ?, ?)", now, now)
		for _, id := range []string{"exec:run_kept", "exec:run_gone", "exec:run_fresh", "package:kept", "package:gone", "job:kept:daily", "job:gone:daily", "named"} {
			f.must(t, a, "storageSet", set(id, "k", id), nil)
		}
		f.must(t, f.bobC, "storageSet", set("exec:run_gone", "k", "bob's, old but bound to nothing either"), nil)
		// Everything but exec:run_fresh was last written two hours ago.
		exec("UPDATE storage_buckets SET updated_at = ? WHERE storage_id <> 'exec:run_fresh'", now.Add(-2*time.Hour))

		set := retention.NewSet()
		if err := set.Add(buckets.RetentionPolicies(buckets.RetentionOptions{})...); err != nil {
			t.Fatal(err)
		}
		p, _ := set.Policy("storage_buckets")
		n, err := p.Purge(ctx, s.DB, now, 100)
		if err != nil || n != 4 {
			t.Fatalf("purged %d (%v), want 4", n, err)
		}
		var bl bucketsOut
		f.must(t, a, "storageBuckets", map[string]any{}, &bl)
		var left []string
		for _, b := range bl.Buckets {
			left = append(left, b.StorageID)
		}
		if want := []string{"exec:run_fresh", "exec:run_kept", "job:kept:daily", "named", "package:kept"}; !slices.Equal(left, want) {
			t.Fatalf("left %v, want %v", left, want)
		}
		if counted, stored := f.usage(t, f.alice); counted != stored || stored.Keys != 5 {
			t.Fatalf("counters %+v, rows %+v", counted, stored)
		}
		if counted, stored := f.usage(t, f.bob); counted != stored || stored.Keys != 0 {
			t.Fatalf("bob: counters %+v, rows %+v", counted, stored)
		}
		if n, err := p.Purge(ctx, s.DB, now, 100); err != nil || n != 0 {
			t.Fatalf("second purge %d (%v)", n, err)
		}
	})
}
