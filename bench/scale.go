package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// ScaleResult is one export+deletion measurement.
type ScaleResult struct {
	DB              string  `json:"db"`
	Rows            int     `json:"rows"`
	FillSeconds     float64 `json:"fill_seconds"`
	RSSBeforeMiB    float64 `json:"rss_before_mib"`
	ExportSeconds   float64 `json:"export_seconds"`
	ExportMiB       float64 `json:"export_document_mib"`
	ExportPeakHeap  float64 `json:"export_peak_heap_mib"`
	ExportPeakRSS   float64 `json:"export_peak_rss_mib"`
	DeleteSeconds   float64 `json:"delete_seconds"`
	DeletePeakHeap  float64 `json:"delete_peak_heap_mib"`
	DeletePeakRSS   float64 `json:"delete_peak_rss_mib"`
	DeletedRows     int64   `json:"deleted_rows"`
	OtherUserIntact bool    `json:"other_user_intact"`
}

// runScale runs one size in a fresh process, so that sizes do not share a
// heap or a peak.
func runScale(self, logDir string, core int, db string, rows int) (ScaleResult, error) {
	p, err := startProc(fmt.Sprintf("scale-%s-%d", db, rows), core, logDir, "", self, "scale-one", "-db", db, "-rows", strconv.Itoa(rows))
	if err != nil {
		return ScaleResult{}, err
	}
	defer p.stop(15 * time.Second)
	line, err := p.waitLine("RESULT ", 15*time.Minute)
	if err != nil {
		return ScaleResult{}, err
	}
	var r ScaleResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return r, err
	}
	fmt.Printf("  export %.2f s (peak heap %.1f MiB, peak RSS %.1f MiB); delete %.2f s (peak heap %.1f MiB, peak RSS %.1f MiB)\n",
		r.ExportSeconds, r.ExportPeakHeap, r.ExportPeakRSS, r.DeleteSeconds, r.DeletePeakHeap, r.DeletePeakRSS)
	return r, nil
}

// scaleOneMain fills one user's bench_items with -rows rows (and a second
// user's with a few), then measures WriteExport of the first account to a
// discarding writer and its Delete: time, peak Go heap (sampled every
// millisecond) and peak RSS (VmHWM, reset before each step).
func scaleOneMain(args []string) error {
	fs := flag.NewFlagSet("scale-one", flag.ContinueOnError)
	rows := fs.Int("rows", 10000, "rows owned by the measured user")
	db := fs.String("db", "sqlite", "sqlite or postgres (ENCLAVE_TEST_POSTGRES)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "enclave-scale-*")
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
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := enclave.New(ctx, enclave.Config{
		DataDir: dir, DatabaseURL: dbURL, Migrations: []migrations.Source{benchMigrations},
		Accounts: accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1}},
		Logger:   logger,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.Inventory().AddTable(storage.Table{Name: "bench_items"}); err != nil {
		return err
	}
	acc := srv.Accounts()
	u, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "owner@example.test", Username: "scaleowner", Password: "bench-password-0123456789", Verified: true})
	if err != nil {
		return err
	}
	other, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "other@example.test", Username: "scaleother", Password: "bench-password-0123456789", Verified: true})
	if err != nil {
		return err
	}
	var res ScaleResult
	res.DB, res.Rows = *db, *rows
	t0 := time.Now()
	if err := fill(ctx, srv.Store(), other.ID, 0, 10); err != nil {
		return err
	}
	if err := fill(ctx, srv.Store(), u.ID, 10, *rows); err != nil {
		return err
	}
	if *db == "postgres" {
		// As autovacuum would on a table that did not just get filled: the
		// planner needs statistics to pick the (user_id, id) index.
		if _, err := srv.Store().DB.ExecContext(ctx, "ANALYZE bench_items"); err != nil {
			return err
		}
	}
	res.FillSeconds = time.Since(t0).Seconds()
	owner := storage.Owner{ID: u.ID, StableID: u.StableID}

	rssBefore, _ := statusKiB("self", "VmRSS")
	res.RSSBeforeMiB = float64(rssBefore) / 1024
	var cw countingWriter
	res.ExportSeconds, res.ExportPeakHeap, res.ExportPeakRSS, err = measured(func() error {
		return srv.Lifecycle().WriteExport(ctx, owner, &cw)
	})
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	res.ExportMiB = float64(cw.n) / (1 << 20)
	var del map[string]int64
	res.DeleteSeconds, res.DeletePeakHeap, res.DeletePeakRSS, err = measured(func() error {
		r, err := srv.Lifecycle().Delete(ctx, owner)
		del = r.Deleted
		if err == nil && !r.Completed {
			err = errors.New("not completed")
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	res.DeletedRows = del["sql:bench_items"]
	var left, otherLeft int
	if err := srv.Store().DB.NewRaw("SELECT COUNT(*) FROM bench_items WHERE user_id = ?", u.ID).Scan(ctx, &left); err != nil {
		return err
	}
	if err := srv.Store().DB.NewRaw("SELECT COUNT(*) FROM bench_items WHERE user_id = ?", other.ID).Scan(ctx, &otherLeft); err != nil {
		return err
	}
	if left != 0 || res.DeletedRows != int64(*rows) {
		return fmt.Errorf("delete left %d rows, removed %d of %d", left, res.DeletedRows, *rows)
	}
	res.OtherUserIntact = otherLeft == 10
	b, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", b)
	return nil
}

// fill inserts n rows for userID with ids from first+1, 1,000 a statement.
func fill(ctx context.Context, st *storage.Store, userID int64, first, n int) error {
	body := strings.Repeat("lorem ipsum dolor sit amet ", 8) // ~200 bytes
	now := time.Now().UTC()
	const batch = 1000
	for done := 0; done < n; done += batch {
		k := min(batch, n-done)
		var q strings.Builder
		q.WriteString("INSERT INTO bench_items (id, user_id, title, body, created_at) VALUES ")
		args := make([]any, 0, 5*k)
		for i := range k {
			if i > 0 {
				q.WriteString(",")
			}
			q.WriteString("(?, ?, ?, ?, ?)")
			id := first + done + i + 1
			args = append(args, id, userID, "item "+strconv.Itoa(id), body, now)
		}
		if _, err := st.DB.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
	}
	return nil
}

// measured runs f after a GC and a reset of the peak RSS, and returns its
// time, the peak Go heap during it and the peak RSS (VmHWM) after it.
func measured(f func() error) (secs, peakHeapMiB, peakRSSMiB float64, err error) {
	runtime.GC()
	debug.FreeOSMemory()
	// Writing 5 to clear_refs resets VmHWM to the current RSS.
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var peak uint64
	wg.Go(func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	t0 := time.Now()
	err = f()
	secs = time.Since(t0).Seconds()
	close(stop)
	wg.Wait()
	hwm, _ := statusKiB("self", "VmHWM")
	return secs, float64(peak) / (1 << 20), float64(hwm) / 1024, err
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

var _ io.Writer = (*countingWriter)(nil)

func printScaling(w io.Writer, rs []ScaleResult) {
	fmt.Fprintf(w, "\n## Account export and deletion (one user's rows in a registered table)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| db\t rows\t export s\t export MiB\t export peak heap MiB\t export peak RSS MiB\t delete s\t delete peak heap MiB\t delete peak RSS MiB\t RSS before MiB\t other user intact\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "| %s\t %d\t %.2f\t %.1f\t %.1f\t %.1f\t %.2f\t %.1f\t %.1f\t %.1f\t %v\t\n", r.DB, r.Rows, r.ExportSeconds, r.ExportMiB,
			r.ExportPeakHeap, r.ExportPeakRSS, r.DeleteSeconds, r.DeletePeakHeap, r.DeletePeakRSS, r.RSSBeforeMiB, r.OtherUserIntact)
	}
	tw.Flush()
	if len(rs) >= 2 {
		first, last := rs[0], rs[len(rs)-1]
		if first.DB == last.DB {
			fmt.Fprintf(w, "\nflat memory (%s, %d → %d rows): export peak heap %.1f → %.1f MiB, delete peak heap %.1f → %.1f MiB\n",
				first.DB, first.Rows, last.Rows, first.ExportPeakHeap, last.ExportPeakHeap, first.DeletePeakHeap, last.DeletePeakHeap)
		}
	}
}
