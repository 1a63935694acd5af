package workspaces_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/workspaces"
)

// snapSchema is a workspace table each write of the tests below adds a
// row to, and a counter it bumps in the same transaction: a consistent
// copy has as many rows as the counter says.
var snapSchema = migrations.Source{Name: "snapshottest", FS: fstest.MapFS{
	"sqlite/0001_rows.up.sql": {Data: []byte(`CREATE TABLE snap_rows (workspace_id TEXT NOT NULL, n INTEGER NOT NULL, pad BLOB NOT NULL);
CREATE TABLE snap_count (workspace_id TEXT PRIMARY KEY, n INTEGER NOT NULL);`)},
}}

const wsA, wsB = "w_aaaaaaaaaaaaaaaaaaaaaaaaaa", "w_bbbbbbbbbbbbbbbbbbbbbbbbbb"

func snapBump(ctx context.Context, st workspaces.Store, id string) error {
	return st.Update(ctx, id, func(ctx context.Context, tx bun.Tx) error {
		var n int64
		if err := tx.NewRaw("SELECT coalesce(max(n), 0) FROM snap_count WHERE workspace_id = ?", id).Scan(ctx, &n); err != nil {
			return err
		}
		n++
		if _, err := tx.ExecContext(ctx, "INSERT INTO snap_rows (workspace_id, n, pad) VALUES (?, ?, randomblob(2048))", id, n); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO snap_count (workspace_id, n) VALUES (?, ?) ON CONFLICT (workspace_id) DO UPDATE SET n = excluded.n", id, n)
		return err
	})
}

// snapCheck opens a snapshot and returns its counter after checking that
// it is a sound SQLite file whose rows agree with it.
func snapCheck(t *testing.T, path, id string) int64 {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ok string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check of %s: %q %v", path, ok, err)
	}
	var counter, rows int64
	if err := db.QueryRow("SELECT coalesce(max(n), 0) FROM snap_count WHERE workspace_id = ?", id).Scan(&counter); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT count(*) FROM snap_rows WHERE workspace_id = ?", id).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != counter {
		t.Fatalf("copy %s: %d rows but the counter says %d", path, rows, counter)
	}
	return counter
}

// waitWrites waits until the writers made n writes (or one failed).
func waitWrites(t *testing.T, wrote *atomic.Int64, n int64) {
	for wrote.Load() < n && !t.Failed() {
		time.Sleep(time.Millisecond)
	}
}

func snapStore(t *testing.T, dir string) *workspaces.SQLiteStore {
	t.Helper()
	st, err := workspaces.NewSQLiteStore(dir, 0, workspaces.CoreSchema, snapSchema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Snapshot copies a workspace's file under the store's lock while its
// operations keep running: every copy is sound and holds whole operations
// only, the copies grow as the writes go on, and the other workspace is
// not touched.
func TestSnapshotUnderWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := snapStore(t, filepath.Join(dir, "ws"))
	for _, id := range []string{wsA, wsB} {
		if err := snapBump(ctx, st, id); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := st.Files()
	if err != nil || len(ids) != 2 || ids[0] != wsA || ids[1] != wsB {
		t.Fatalf("Files: %v %v", ids, err)
	}

	stop := make(chan struct{})
	var wrote atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := snapBump(ctx, st, wsA); err != nil {
					t.Errorf("write: %v", err)
					return
				}
				wrote.Add(1)
			}
		})
	}
	var last int64
	for i := range 5 {
		waitWrites(t, &wrote, int64(10*(i+1)))
		dst := filepath.Join(dir, "copy-"+string(rune('0'+i))+".db")
		if err := st.Snapshot(ctx, wsA, dst); err != nil {
			t.Fatal(err)
		}
		n := snapCheck(t, dst, wsA)
		if n < last || n < 1 {
			t.Fatalf("copy %d holds %d operations, the one before %d", i, n, last)
		}
		last = n
	}
	close(stop)
	wg.Wait()
	if last <= 1 {
		t.Fatalf("the copies saw no concurrent write (last %d)", last)
	}
	dst := filepath.Join(dir, "b.db")
	if err := st.Snapshot(ctx, wsB, dst); err != nil {
		t.Fatal(err)
	}
	if n := snapCheck(t, dst, wsB); n != 1 {
		t.Fatalf("workspace B's copy: %d", n)
	}
}

// A snapshot of a workspace without a file is an error wrapping
// fs.ErrNotExist and makes no file, with the in-process store and from
// another process's directory alike.
func TestSnapshotNeverCreates(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	wsDir := filepath.Join(dir, "ws")
	st := snapStore(t, wsDir)
	dst := filepath.Join(dir, "copy.db")
	if err := st.Snapshot(ctx, wsA, dst); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Snapshot of a missing file: %v", err)
	}
	if err := workspaces.SnapshotFile(ctx, filepath.Join(wsDir, wsA+".db"), dst); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SnapshotFile of a missing file: %v", err)
	}
	for _, p := range []string{filepath.Join(wsDir, wsA+".db"), dst} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s was created", p)
		}
	}
	if ids, err := st.Files(); err != nil || len(ids) != 0 {
		t.Fatalf("Files: %v %v (the template is not a workspace)", ids, err)
	}
	// The store still creates the file on a write.
	if err := snapBump(ctx, st, wsA); err != nil {
		t.Fatal(err)
	}
	if err := st.Snapshot(ctx, wsA, dst); err != nil {
		t.Fatal(err)
	}
	if n := snapCheck(t, dst, wsA); n != 1 {
		t.Fatalf("copy: %d", n)
	}
}

// SnapshotFile copies a file that another store (standing in for a
// running server) keeps writing: each copy is sound and consistent, and
// the file is not migrated or otherwise changed by the copy.
func TestSnapshotFileOfAnotherWriter(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	wsDir := filepath.Join(dir, "ws")
	st := snapStore(t, wsDir)
	if err := snapBump(ctx, st, wsA); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(wsDir, wsA+".db")
	version := func() int64 {
		db, err := sql.Open("sqlite", src)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var v int64
		if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := version()

	stop := make(chan struct{})
	var wrote atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := snapBump(ctx, st, wsA); err != nil {
				t.Errorf("write: %v", err)
				return
			}
			wrote.Add(1)
		}
	})
	var last int64
	for i := range 4 {
		waitWrites(t, &wrote, int64(10*(i+1)))
		dst := filepath.Join(dir, "copy-"+string(rune('0'+i))+".db")
		if err := workspaces.SnapshotFile(ctx, src, dst); err != nil {
			t.Fatal(err)
		}
		n := snapCheck(t, dst, wsA)
		if n < last {
			t.Fatalf("copy %d went back: %d < %d", i, n, last)
		}
		last = n
	}
	close(stop)
	wg.Wait()
	if v := version(); v != before {
		t.Fatalf("user_version changed from %d to %d", before, v)
	}
	if ids, err := workspaces.ListFiles(wsDir); err != nil || len(ids) != 1 || ids[0] != wsA {
		t.Fatalf("ListFiles: %v %v", ids, err)
	}
	if ids, err := workspaces.ListFiles(filepath.Join(dir, "none")); err != nil || ids != nil {
		t.Fatalf("ListFiles of a missing directory: %v %v", ids, err)
	}
}
