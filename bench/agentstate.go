package main

// Agent state: memorySearch latency over a large corpus, and the account
// export of one bucket of many keys with its peak heap. Each runs in a
// process of its own (bench memory-search, bench bucket-export), so that
// sizes share no heap.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/memory/memorybench"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// Targets of the agent state issue.
const (
	targetSearchP50ms  = 10.0 // memorySearch p50 at 100k memories on SQLite
	targetSearchP99ms  = 50.0 // and p99
	targetSearchMine   = 100_000
	targetExportGrowth = 2.0 // peak heap of the 1M-key export within this × the 10k figure
)

// MemorySearchResult is one database's memorySearch run.
type MemorySearchResult struct {
	DB           string  `json:"db"`
	Unmerged     bool    `json:"unmerged_index,omitempty"`
	Total        int     `json:"total_memories"`
	BuildSeconds float64 `json:"build_seconds"`
	Cached       bool    `json:"cached"`
	Users        []struct {
		Memories int `json:"memories"`
		memorybench.Latency
		// CPUms is this process's CPU time per search (on PostgreSQL the
		// database server's is not in it).
		CPUms float64 `json:"process_cpu_ms_per_search"`
	} `json:"users"`
}

// memorySearchMain builds (or reuses) the corpus and times Service.Search
// for each measured user: -queries searches each, one at a time, after
// 20 unmeasured ones.
func memorySearchMain(args []string) error {
	fs := flag.NewFlagSet("memory-search", flag.ContinueOnError)
	db := fs.String("db", "sqlite", "sqlite or postgres (ENCLAVE_TEST_POSTGRES)")
	total := fs.Int("total", 1_000_000, "memories of all users")
	mine := fs.String("mine", "10000,100000", "the measured users' memories")
	cache := fs.String("cache", "", "directory keeping the SQLite corpus between runs (empty: build afresh)")
	queries := fs.Int("queries", 500, "measured searches per user")
	unmerged := fs.Bool("unmerged", false, "SQLite: leave the full-text index as the inserts left it, not merged as the server's index lane keeps it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	layout := memorybench.Layout{Total: *total, Unmerged: *unmerged}
	for _, f := range strings.Split(*mine, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-mine %q: want positive counts", *mine)
		}
		layout.Targets = append(layout.Targets, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "enclave-memsearch-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var s *storage.Store
	var built memorybench.Built
	switch {
	case *db == "postgres":
		u, drop, err := pgSchema(ctx, dir, os.Getenv("ENCLAVE_TEST_POSTGRES"))
		if err != nil {
			return err
		}
		defer drop()
		if s, err = storage.Open(ctx, storage.Config{DataDir: dir, DatabaseURL: u}); err != nil {
			return err
		}
		if _, err := migrations.Apply(ctx, s.DB); err != nil {
			s.Close()
			return err
		}
		if built, err = memorybench.Build(ctx, s, layout); err != nil {
			s.Close()
			return err
		}
	case *cache != "":
		if s, built, err = memorybench.CachedSQLite(ctx, *cache, dir, layout); err != nil {
			return err
		}
	default:
		if s, built, err = memorybench.CachedSQLite(ctx, dir, dir, layout); err != nil {
			return err
		}
	}
	defer s.Close()
	svc, err := memory.New(memory.Config{Store: s, Registry: capabilities.NewRegistry(capabilities.Options{}),
		Owners: func(context.Context, capabilities.Caller) (capabilities.Owner, error) {
			return capabilities.Owner{}, nil
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	res := MemorySearchResult{DB: *db, Unmerged: *unmerged && *db == "sqlite", Total: built.Rows, BuildSeconds: built.Seconds, Cached: built.Cached}
	qs := memorybench.NewCorpus(7).Queries(*queries)
	for i, o := range built.Targets {
		c0 := cpuTime()
		lat, err := memorybench.Measure(ctx, qs, 20, func(ctx context.Context, q string) (int, error) {
			out, err := svc.Search(ctx, o, memory.SearchInput{Query: q})
			return len(out.Memories), err
		})
		if err != nil {
			return err
		}
		u := res.Users
		u = append(u, struct {
			Memories int `json:"memories"`
			memorybench.Latency
			CPUms float64 `json:"process_cpu_ms_per_search"`
		}{Memories: layout.Targets[i], Latency: lat, CPUms: (cpuTime() - c0).Seconds() * 1000 / float64(lat.Queries+lat.WarmQuery)})
		res.Users = u
	}
	b, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", b)
	return nil
}

// cpuTime is this process's CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runMemorySearch runs bench memory-search in a fresh process.
func runMemorySearch(self, logDir string, core int, db string, total int, mine, cache string) (MemorySearchResult, error) {
	argv := []string{self, "memory-search", "-db", db, "-total", strconv.Itoa(total), "-mine", mine}
	if db == "sqlite" && cache != "" {
		argv = append(argv, "-cache", cache)
	}
	p, err := startProc("memory-search-"+db, core, logDir, "", argv...)
	if err != nil {
		return MemorySearchResult{}, err
	}
	defer p.stop(15 * time.Second)
	line, err := p.waitLine("RESULT ", 40*time.Minute)
	if err != nil {
		return MemorySearchResult{}, err
	}
	var r MemorySearchResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return r, err
	}
	for _, u := range r.Users {
		fmt.Printf("  %d of %d memories: p50 %.2f ms, p99 %.2f ms (%.2f CPU-ms per search in process)\n", u.Memories, r.Total, u.P50ms, u.P99ms, u.CPUms)
	}
	return r, nil
}

func printMemorySearch(w io.Writer, rs []MemorySearchResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## memorySearch: one user's memories among all users'\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| db\t user's memories\t all memories\t searches\t p50 ms\t p90 ms\t p99 ms\t max ms\t results/search\t process CPU-ms/search\t corpus built s\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	for _, r := range rs {
		build := fmt.Sprintf("%.0f", r.BuildSeconds)
		if r.Cached {
			build = "cached"
		}
		for _, u := range r.Users {
			fmt.Fprintf(tw, "| %s\t %d\t %d\t %d\t %.2f\t %.2f\t %.2f\t %.2f\t %.1f\t %.2f\t %s\t\n", r.DB, u.Memories, r.Total, u.Queries,
				u.P50ms, u.P90ms, u.P99ms, u.MaxMs, u.PerQuery, u.CPUms, build)
		}
	}
	tw.Flush()
	for _, r := range rs {
		for _, u := range r.Users {
			if r.DB == "sqlite" && u.Memories == targetSearchMine {
				ok := u.P50ms <= targetSearchP50ms && u.P99ms <= targetSearchP99ms
				fmt.Fprintf(w, "\n- memorySearch at %d memories on SQLite, p50 ≤ %.0f ms and p99 ≤ %.0f ms: %s (p50 %.2f ms, p99 %.2f ms)\n", u.Memories,
					targetSearchP50ms, targetSearchP99ms, map[bool]string{true: "REACHED", false: "NOT reached"}[ok], u.P50ms, u.P99ms)
			}
		}
	}
}

// BucketExportResult is the account export of one bucket of Keys keys.
type BucketExportResult struct {
	DB             string  `json:"db"`
	Keys           int     `json:"keys"`
	FillSeconds    float64 `json:"fill_seconds"`
	ExportSeconds  float64 `json:"export_seconds"`
	ExportMiB      float64 `json:"export_document_mib"`
	ExportPeakHeap float64 `json:"export_peak_heap_mib"`
	ExportPeakRSS  float64 `json:"export_peak_rss_mib"`
	HeapBeforeMiB  float64 `json:"heap_before_mib"`
	Exported       int64   `json:"exported_keys"`
}

// bucketExportMain fills one bucket of a user with -keys keys (about 100
// bytes each, straight into the tables, the counters set to match) and
// measures Lifecycle().WriteExport of the account to a counting writer:
// time, peak Go heap (sampled every millisecond) and peak RSS.
func bucketExportMain(args []string) error {
	fs := flag.NewFlagSet("bucket-export", flag.ContinueOnError)
	keys := fs.Int("keys", 10000, "keys of the bucket")
	db := fs.String("db", "sqlite", "sqlite or postgres (ENCLAVE_TEST_POSTGRES)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "enclave-bucket-export-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dbURL := ""
	if *db == "postgres" {
		u, drop, err := pgSchema(ctx, dir, os.Getenv("ENCLAVE_TEST_POSTGRES"))
		if err != nil {
			return err
		}
		defer drop()
		dbURL = u
	}
	srv, err := enclave.New(ctx, enclave.Config{
		DataDir: dir, DatabaseURL: dbURL,
		Accounts: accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1}},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	u, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "owner@example.test", Username: "bucketowner", Password: "bench-password-0123456789", Verified: true})
	if err != nil {
		return err
	}
	res := BucketExportResult{DB: *db, Keys: *keys}
	t0 := time.Now()
	if err := fillBucket(ctx, srv.Store(), u.ID, *keys); err != nil {
		return err
	}
	if *db == "postgres" {
		if _, err := srv.Store().DB.ExecContext(ctx, "ANALYZE storage_entries"); err != nil {
			return err
		}
	}
	res.FillSeconds = time.Since(t0).Seconds()
	owner := storage.Owner{ID: u.ID, StableID: u.StableID}
	heapBefore, _ := heapObjects()
	res.HeapBeforeMiB = heapBefore
	cw := &exportCounter{}
	res.ExportSeconds, res.ExportPeakHeap, res.ExportPeakRSS, err = measured(func() error {
		return srv.Lifecycle().WriteExport(ctx, owner, cw)
	})
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	res.ExportMiB = float64(cw.n) / (1 << 20)
	res.Exported = cw.keys
	if res.Exported != int64(*keys) {
		return fmt.Errorf("the export holds %d keys, want %d", res.Exported, *keys)
	}
	b, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", b)
	return nil
}

// exportCounter counts the bytes of the export and the bench's keys in it
// (each key's name appears once), keeping nothing.
type exportCounter struct {
	n, keys int64
	tail    []byte // the end of the previous write, for a name split across writes
}

var benchKeyMark = []byte(`"entry_key":"key/`)

func (c *exportCounter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	buf := append(c.tail, p...)
	c.keys += int64(strings.Count(string(buf), string(benchKeyMark)))
	// Keep less than one mark, so that no mark is counted twice.
	keep := min(len(buf), len(benchKeyMark)-1)
	c.tail = append(c.tail[:0], buf[len(buf)-keep:]...)
	return len(p), nil
}

// fillBucket writes n keys of about 100 bytes into one bucket of userID,
// 500 a statement, and sets the bucket's and the user's counters to match.
func fillBucket(ctx context.Context, st *storage.Store, userID int64, n int) error {
	now := time.Now().UTC()
	var bucketID int64
	if err := st.DB.NewRaw(`INSERT INTO storage_buckets (user_id, storage_id, kind, bytes, key_count, created_at, updated_at)
		VALUES (?, 'big', 'named', 0, 0, ?, ?) RETURNING id`, userID, now, now).Scan(ctx, &bucketID); err != nil {
		return err
	}
	value := `{"text":"` + strings.Repeat("v", 80) + `"}`
	var bytes int64
	const batch = 500
	for start := 0; start < n; start += 10 * batch {
		err := st.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			for at := start; at < min(n, start+10*batch); at += batch {
				var q strings.Builder
				q.WriteString("INSERT INTO storage_entries (user_id, bucket_id, entry_key, value, bytes, revision, updated_at) VALUES ")
				var args []any
				for i := at; i < min(at+batch, n); i++ {
					if i > at {
						q.WriteString(", ")
					}
					q.WriteString("(?, ?, ?, ?, ?, 1, ?)")
					key := fmt.Sprintf("key/%08d", i)
					args = append(args, userID, bucketID, key, value, len(key)+len(value), now)
					bytes += int64(len(key) + len(value))
				}
				if _, err := tx.NewRaw(q.String(), args...).Exec(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("fill bucket: %w", err)
		}
	}
	if _, err := st.DB.NewRaw("UPDATE storage_buckets SET bytes = ?, key_count = ? WHERE id = ?", bytes, n, bucketID).Exec(ctx); err != nil {
		return err
	}
	_, err := st.DB.NewRaw(`INSERT INTO storage_usage (user_id, bytes, key_count, revision, updated_at) VALUES (?, ?, ?, 1, ?)
		ON CONFLICT (user_id) DO UPDATE SET bytes = excluded.bytes, key_count = excluded.key_count`, userID, bytes, n, now).Exec(ctx)
	return err
}

// heapObjects is the live heap now, after a GC, in MiB.
func heapObjects() (float64, error) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64()) / (1 << 20), nil
}

// runBucketExport runs bench bucket-export in a fresh process.
func runBucketExport(self, logDir string, core int, db string, keys int) (BucketExportResult, error) {
	p, err := startProc(fmt.Sprintf("bucket-export-%s-%d", db, keys), core, logDir, "", self, "bucket-export", "-db", db, "-keys", strconv.Itoa(keys))
	if err != nil {
		return BucketExportResult{}, err
	}
	defer p.stop(15 * time.Second)
	line, err := p.waitLine("RESULT ", 30*time.Minute)
	if err != nil {
		return BucketExportResult{}, err
	}
	var r BucketExportResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return r, err
	}
	fmt.Printf("  export %.2f s, %.1f MiB, peak heap %.1f MiB, peak RSS %.1f MiB\n", r.ExportSeconds, r.ExportMiB, r.ExportPeakHeap, r.ExportPeakRSS)
	return r, nil
}

func printBucketExport(w io.Writer, rs []BucketExportResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Account export of one storage bucket (keys of ~100 bytes)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| db\t keys\t export s\t export MiB\t peak heap MiB\t peak RSS MiB\t heap before MiB\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "| %s\t %d\t %.2f\t %.1f\t %.1f\t %.1f\t %.1f\t\n", r.DB, r.Keys, r.ExportSeconds, r.ExportMiB, r.ExportPeakHeap, r.ExportPeakRSS, r.HeapBeforeMiB)
	}
	tw.Flush()
	byDB := map[string][]BucketExportResult{}
	for _, r := range rs {
		byDB[r.DB] = append(byDB[r.DB], r)
	}
	for _, db := range []string{"sqlite", "postgres"} {
		l := byDB[db]
		if len(l) < 2 {
			continue
		}
		small, large := l[0], l[len(l)-1]
		ok := large.ExportPeakHeap <= targetExportGrowth*small.ExportPeakHeap
		fmt.Fprintf(w, "\n- %s: export peak heap of %d keys within %.0f× that of %d keys: %s (%.1f → %.1f MiB, %.2f×)\n", db, large.Keys, targetExportGrowth, small.Keys,
			map[bool]string{true: "REACHED", false: "NOT reached"}[ok], small.ExportPeakHeap, large.ExportPeakHeap, safeDiv(large.ExportPeakHeap, small.ExportPeakHeap))
	}
}
