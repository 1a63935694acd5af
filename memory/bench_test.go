package memory_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/memory/memorybench"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// BenchmarkMemorySearch searches the memories of one user among many:
// by default users of 10,000 and of 100,000 memories among 1,000,000 in
// all (the rest owned by users of 10,000 each; see package memorybench
// for the corpus), on SQLite and, when ENCLAVE_TEST_POSTGRES is set,
// PostgreSQL. It reports the latency percentiles of one search (ms).
//
//	ENCLAVE_BENCH_MEMORY_TOTAL   memories in all (default 1000000)
//	ENCLAVE_BENCH_MEMORIES       the measured users' counts (default 10000,100000)
//	ENCLAVE_BENCH_CACHE          where the SQLite corpus is kept between
//	                             runs (default $TMPDIR/enclave-memorybench;
//	                             "off" builds it afresh in the test's
//	                             temporary directory)
//
// The SQLite file is reused only while the layout, the corpus and the
// migrations are the same; PostgreSQL's corpus is built in a fresh schema
// each run.
func BenchmarkMemorySearch(b *testing.B) {
	layout := memorybench.Layout{Total: envInt(b, "ENCLAVE_BENCH_MEMORY_TOTAL", 1_000_000), Targets: []int{10_000, 100_000}}
	if v := os.Getenv("ENCLAVE_BENCH_MEMORIES"); v != "" {
		layout.Targets = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("ENCLAVE_BENCH_MEMORIES=%q: want positive counts, comma-separated", v)
			}
			layout.Targets = append(layout.Targets, n)
		}
	}
	queries := memorybench.NewCorpus(7).Queries(500)
	for _, d := range storagetest.Dialects() {
		b.Run(string(d), func(b *testing.B) {
			s, built := benchCorpus(b, d, layout)
			b.Logf("%s: %d memories, built in %.1f s (cached: %v)", d, built.Rows, built.Seconds, built.Cached)
			svc, err := memory.New(memory.Config{Store: s, Registry: capabilities.NewRegistry(capabilities.Options{}),
				Owners: func(context.Context, capabilities.Caller) (capabilities.Owner, error) {
					return capabilities.Owner{}, nil
				},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			for i, o := range built.Targets {
				b.Run(fmt.Sprintf("mine=%d/total=%d", layout.Targets[i], layout.Total), func(b *testing.B) {
					ctx := context.Background()
					for _, q := range queries[:20] { // warm the caches
						if _, err := svc.Search(ctx, o, memory.SearchInput{Query: q}); err != nil {
							b.Fatal(err)
						}
					}
					lat := make([]time.Duration, 0, b.N)
					found := 0
					for i := 0; b.Loop(); i++ {
						start := time.Now()
						out, err := svc.Search(ctx, o, memory.SearchInput{Query: queries[i%len(queries)]})
						lat = append(lat, time.Since(start))
						if err != nil {
							b.Fatal(err)
						}
						found += len(out.Memories)
					}
					slices.Sort(lat)
					pct := func(p float64) float64 {
						return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
					}
					b.ReportMetric(pct(0.50), "p50-ms")
					b.ReportMetric(pct(0.99), "p99-ms")
					b.ReportMetric(float64(found)/float64(len(lat)), "results/op")
				})
			}
		})
	}
}

// benchCorpus returns a store holding layout's corpus on dialect d.
func benchCorpus(b *testing.B, d storage.Dialect, layout memorybench.Layout) (*storage.Store, memorybench.Built) {
	b.Helper()
	ctx := context.Background()
	if d == storage.SQLite {
		dir := os.Getenv("ENCLAVE_BENCH_CACHE")
		switch dir {
		case "":
			dir = filepath.Join(os.TempDir(), "enclave-memorybench")
		case "off":
			dir = b.TempDir()
		}
		s, built, err := memorybench.CachedSQLite(ctx, dir, b.TempDir(), layout)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s, built
	}
	s := storagetest.Open(b, d)
	built, err := memorybench.Build(ctx, s, layout)
	if err != nil {
		b.Fatal(err)
	}
	return s, built
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
