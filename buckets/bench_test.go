package buckets_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// BenchmarkStorageSet, BenchmarkStorageGet and BenchmarkPlainCapability
// run through Registry.Invoke on SQLite: the plain capability (no SQL) is
// the baseline the storage calls compare with in the same run.
func BenchmarkStorageSet(b *testing.B) {
	f := setup(b, storagetest.Open(b, storage.SQLite), buckets.Options{})
	args := make([]json.RawMessage, 1000)
	for i := range args {
		args[i] = json.RawMessage(fmt.Sprintf(`{"storageId":"bench","key":"k%04d","value":{"n":%d,"text":"a short value"}}`, i, i))
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := f.reg.Invoke(context.Background(), f.aliceC, "storageSet", args[i%len(args)]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStorageGet(b *testing.B) {
	f := setup(b, storagetest.Open(b, storage.SQLite), buckets.Options{})
	args := make([]json.RawMessage, 1000)
	for i := range args {
		f.must(b, f.aliceC, "storageSet", set("bench", fmt.Sprintf("k%04d", i), map[string]any{"n": i, "text": "a short value"}), nil)
		args[i] = json.RawMessage(fmt.Sprintf(`{"storageId":"bench","key":"k%04d"}`, i))
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		res, err := f.reg.Invoke(context.Background(), f.aliceC, "storageGet", args[i%len(args)])
		if err != nil || !res.Structured.(buckets.GetOutput).Found {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlainCapability(b *testing.B) {
	f := setup(b, storagetest.Open(b, storage.SQLite), buckets.Options{})
	type in struct {
		StorageID string `json:"storageId"`
		Key       string `json:"key"`
	}
	if err := f.reg.Register(capabilities.Define(capabilities.Spec[in, buckets.GetOutput]{
		Name: "benchEcho", Domain: "bench", Title: "Echo", Description: "Answers without touching storage.",
		Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
		Requires:    capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.ReadUserOwn}},
		Handler: func(context.Context, *capabilities.Call, in) (buckets.GetOutput, error) {
			return buckets.GetOutput{Found: true, Value: json.RawMessage(`{"n":1}`), Revision: 1}, nil
		},
	})); err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"storageId":"bench","key":"k0001"}`)
	for b.Loop() {
		if _, err := f.reg.Invoke(context.Background(), f.aliceC, "benchEcho", args); err != nil {
			b.Fatal(err)
		}
	}
}

// fillEntries writes n entries of about 100 bytes into one of o's buckets
// directly, in batches: the fast way to a large bucket.
func fillEntries(t testing.TB, f *fixture, o storage.Owner, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	var bucketID int64
	if err := f.store.DB.NewRaw(`INSERT INTO storage_buckets (user_id, storage_id, kind, bytes, key_count, created_at, updated_at)
		VALUES (?, 'big', 'named', 0, 0, ?, ?) RETURNING id`, o.ID, now, now).Scan(ctx, &bucketID); err != nil {
		t.Fatal(err)
	}
	value := `{"text":"` + strings.Repeat("v", 80) + `"}`
	const batch = 500
	for start := 0; start < n; start += batch {
		var q strings.Builder
		q.WriteString("INSERT INTO storage_entries (user_id, bucket_id, entry_key, value, bytes, revision, updated_at) VALUES ")
		var args []any
		for i := start; i < min(start+batch, n); i++ {
			if i > start {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, 1, ?)")
			key := fmt.Sprintf("key/%08d", i)
			args = append(args, o.ID, bucketID, key, value, len(key)+len(value), now)
		}
		if _, err := f.store.DB.NewRaw(q.String(), args...).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// exportPeak pages through o's entries as the account export does and
// returns how many rows it saw and the most heap live after any page
// (beyond what was live before).
func exportPeak(t testing.TB, f *fixture, o storage.Owner) (rows int, peak uint64) {
	t.Helper()
	inv := storage.NewInventory()
	if err := buckets.RegisterInventory(inv); err != nil {
		t.Fatal(err)
	}
	table, _ := inv.Table("storage_entries")
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	cursor := ""
	for {
		page, err := storage.ExportRows(context.Background(), f.store.Reader, table, o, storage.PageRequest{Cursor: cursor, Limit: storage.MaxPageLimit})
		if err != nil {
			t.Fatal(err)
		}
		rows += len(page.Items)
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc > base && ms.HeapAlloc-base > peak {
			peak = ms.HeapAlloc - base
		}
		if cursor = page.Next; cursor == "" {
			runtime.KeepAlive(page)
			return rows, peak
		}
		runtime.KeepAlive(page)
	}
}

// A bucket of ten times the keys exports in about the same memory: the
// export pages by the entries' id.
func TestExportMemoryIsBounded(t *testing.T) {
	small, large := 2_000, 20_000
	if testing.Short() {
		small, large = 1_000, 5_000
	}
	f := setup(t, storagetest.Open(t, storage.SQLite), buckets.Options{})
	fillEntries(t, f, f.alice, small)
	fillEntries(t, f, f.bob, large)
	n1, p1 := exportPeak(t, f, f.alice)
	n2, p2 := exportPeak(t, f, f.bob)
	if n1 != small || n2 != large {
		t.Fatalf("exported %d and %d rows, want %d and %d", n1, n2, small, large)
	}
	t.Logf("peak live heap: %d keys %d KiB, %d keys %d KiB", small, p1>>10, large, p2>>10)
	if p2 > 2*p1+512<<10 {
		t.Fatalf("exporting %d keys held %d KiB, %d keys %d KiB: memory grows with the bucket", large, p2>>10, small, p1>>10)
	}
}

// BenchmarkExportKeys reports the peak live heap of exporting a bucket of
// 10,000 and of 100,000 keys.
func BenchmarkExportKeys(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			f := setup(b, storagetest.Open(b, storage.SQLite), buckets.Options{})
			fillEntries(b, f, f.alice, n)
			var peak uint64
			for b.Loop() {
				_, p := exportPeak(b, f, f.alice)
				peak = max(peak, p)
			}
			b.ReportMetric(float64(peak), "peak-live-B")
		})
	}
}
