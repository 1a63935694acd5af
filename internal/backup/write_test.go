package backup

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/workspaces"
)

// rowsSchema: each write adds a row and bumps a counter in the same
// transaction, so a consistent copy has as many rows as its counter.
var rowsSchema = migrations.Source{Name: "backuptest", FS: fstest.MapFS{
	"sqlite/0001_rows.up.sql": {Data: []byte(`CREATE TABLE bk_rows (workspace_id TEXT NOT NULL, n INTEGER NOT NULL, pad BLOB NOT NULL);
CREATE TABLE bk_count (workspace_id TEXT PRIMARY KEY, n INTEGER NOT NULL);`)},
}}

const (
	wsA = "w_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	wsB = "w_bbbbbbbbbbbbbbbbbbbbbbbbbb"
	wsC = "w_cccccccccccccccccccccccccc" // a file without a directory entry
)

func bumpRows(ctx context.Context, st workspaces.Store, id string) error {
	return st.Update(ctx, id, func(ctx context.Context, tx bun.Tx) error {
		var n int64
		if err := tx.NewRaw("SELECT coalesce(max(n), 0) FROM bk_count WHERE workspace_id = ?", id).Scan(ctx, &n); err != nil {
			return err
		}
		n++
		if _, err := tx.ExecContext(ctx, "INSERT INTO bk_rows (workspace_id, n, pad) VALUES (?, ?, randomblob(4096))", id, n); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO bk_count (workspace_id, n) VALUES (?, ?) ON CONFLICT (workspace_id) DO UPDATE SET n = excluded.n", id, n)
		return err
	})
}

// restoredCount checks a restored workspace file (integrity_check, rows
// agree with the counter) and returns its counter.
func restoredCount(t *testing.T, path, id string) int64 {
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
	if err := db.QueryRow("SELECT coalesce(max(n), 0) FROM bk_count WHERE workspace_id = ?", id).Scan(&counter); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT count(*) FROM bk_rows WHERE workspace_id = ?", id).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != counter {
		t.Fatalf("%s: %d rows, counter %d: not a consistent copy", path, rows, counter)
	}
	return counter
}

// installation is a data directory with a database, a workspace
// directory naming wsA and wsB, and a workspace store holding their files
// (and wsC's, which the directory does not name).
func installation(t *testing.T) (*storage.Store, storage.Config, *workspaces.SQLiteStore) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	cfg := storage.Config{DataDir: dir}
	st, err := storage.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// The directory table as enclave's migrations make it (only the
	// columns the backup reads; the migrations take seconds under -race).
	if _, err := st.DB.ExecContext(ctx, "CREATE TABLE workspaces (id TEXT PRIMARY KEY, name TEXT NOT NULL, created_at TIMESTAMP NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{wsA, wsB} {
		if _, err := st.DB.ExecContext(ctx, "INSERT INTO workspaces (id, name, created_at) VALUES (?, ?, ?)", id, id, time.Now().UTC()); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := workspaces.NewSQLiteStore(filepath.Join(dir, WorkspacesDir), 0, workspaces.CoreSchema, rowsSchema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	for _, id := range []string{wsA, wsB, wsC} {
		if err := bumpRows(ctx, ws, id); err != nil {
			t.Fatal(err)
		}
	}
	return st, cfg, ws
}

// The workspace files are in the archive, listed in the manifest, and come
// back consistent although a writer kept writing during the backup: both
// with the files copied by another process (what "enclave backup" does
// next to a running server) and under the store's own lock. A file whose
// workspace is not in the directory is left out.
func TestWriteWorkspaceFilesUnderWrites(t *testing.T) {
	ctx := context.Background()
	st, cfg, ws := installation(t)

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
				if err := bumpRows(ctx, ws, wsA); err != nil {
					t.Errorf("write during the backup: %v", err)
					return
				}
				wrote.Add(1)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	waitFor := func(n int64) {
		for wrote.Load() < n && !t.Failed() {
			time.Sleep(time.Millisecond)
		}
	}

	for i, opts := range []Options{{Version: "test"}, {Version: "test", WorkspaceFiles: ws}} {
		waitFor(int64(20 * (i + 1)))
		before := wrote.Load() + 1
		var buf bytes.Buffer
		m, err := Write(ctx, st, cfg, opts, &buf)
		if err != nil {
			t.Fatal(err)
		}
		if m.Workspaces != 2 {
			t.Fatalf("workspaces in the archive: %d (%+v)", m.Workspaces, m.Files)
		}
		listed := map[string]File{}
		for _, f := range m.Files {
			listed[f.Path] = f
		}
		for _, id := range []string{wsA, wsB} {
			f, ok := listed["workspaces/"+id+".db"]
			if !ok || f.Size == 0 || len(f.SHA256) != 64 {
				t.Fatalf("manifest entry of %s: %+v", id, f)
			}
		}
		if _, ok := listed["workspaces/"+wsC+".db"]; ok || !strings.Contains(strings.Join(m.Notes, "\n"), "left out 1 workspace file") {
			t.Fatalf("the file of a workspace not in the directory: %+v %v", m.Files, m.Notes)
		}
		entries := readAll(t, buf.Bytes())
		if _, ok := entries["workspaces/"+wsC+".db"]; ok {
			t.Fatal("wsC's file is in the archive")
		}

		dir := filepath.Join(t.TempDir(), "restored")
		if _, err := Restore(bytes.NewReader(buf.Bytes()), dir, RestoreOptions{}); err != nil {
			t.Fatal(err)
		}
		if n := restoredCount(t, filepath.Join(dir, WorkspacesDir, wsA+".db"), wsA); n < before {
			t.Fatalf("copy %d of wsA holds %d writes; %d had been made before the backup", i, n, before)
		}
		if n := restoredCount(t, filepath.Join(dir, WorkspacesDir, wsB+".db"), wsB); n != 1 {
			t.Fatalf("wsB: %d", n)
		}
		if info, err := os.Stat(filepath.Join(dir, WorkspacesDir, wsA+".db")); err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("restored workspace file: %v %v", info, err)
		}
		// A store opened on the restored directory reads the same state.
		rs, err := workspaces.NewSQLiteStore(filepath.Join(dir, WorkspacesDir), 0, workspaces.CoreSchema, rowsSchema)
		if err != nil {
			t.Fatal(err)
		}
		var rev int64
		err = rs.View(ctx, wsB, func(ctx context.Context, tx bun.Tx) error {
			return tx.NewRaw("SELECT n FROM bk_count WHERE workspace_id = ?", wsB).Scan(ctx, &rev)
		})
		rs.Close()
		if err != nil || rev != 1 {
			t.Fatalf("restored store: %d %v", rev, err)
		}
	}
}

// keyOf returns the data directory's keeper key file and its raw key.
func keyOf(t *testing.T, dir string) (file string, raw []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, KeeperName))
	if err != nil {
		t.Fatal(err)
	}
	raw, err = base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(raw) != 32 {
		t.Fatalf("keeper key: %v", err)
	}
	return string(b), raw
}

// archiveHolds reports whether the uncompressed archive holds the key, in
// its file form or raw.
func archiveHolds(t *testing.T, archive []byte, file string, raw []byte) bool {
	t.Helper()
	var all bytes.Buffer
	for _, b := range readAll(t, archive) {
		all.Write(b)
	}
	return bytes.Contains(all.Bytes(), []byte(strings.TrimSpace(file))) || bytes.Contains(all.Bytes(), raw)
}

// By default the keeper key is not in the archive, in any form; the
// restore writes a placeholder that the storage layer refuses to start on
// (it would otherwise make a new key that opens none of the secrets).
func TestWriteLeavesTheKeyOutByDefault(t *testing.T) {
	ctx := context.Background()
	st, cfg, _ := installation(t)
	file, raw := keyOf(t, cfg.DataDir)
	var buf bytes.Buffer
	m, err := Write(ctx, st, cfg, Options{Version: "test"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if m.Keeper || !m.KeeperLeftOut {
		t.Fatalf("manifest: %+v", m)
	}
	entries := readAll(t, buf.Bytes())
	for _, n := range []string{KeeperName, EncryptedKeeperName} {
		if _, ok := entries[n]; ok {
			t.Fatalf("the archive has %s", n)
		}
	}
	if archiveHolds(t, buf.Bytes(), file, raw) {
		t.Fatal("the archive holds the keeper key")
	}
	var mm Manifest
	if err := json.Unmarshal(entries[ManifestName], &mm); err != nil || !mm.KeeperLeftOut {
		t.Fatalf("manifest in the archive: %s %v", entries[ManifestName], err)
	}

	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := Restore(bytes.NewReader(buf.Bytes()), dir, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, KeeperName)); err != nil || string(b) != KeyPlaceholder {
		t.Fatalf("keeper.key after the restore: %q %v", b, err)
	}
	if s, err := storage.Open(ctx, storage.Config{DataDir: dir}); err == nil {
		s.Close()
		t.Fatal("the restored directory opened without the keeper key")
	}
	// With the operator's copy of the key in place it opens.
	if err := os.WriteFile(filepath.Join(dir, KeeperName), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := storage.Open(ctx, storage.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// With a passphrase the key entry is age-encrypted (nothing of the key in
// clear), round-trips with the same passphrase, and a wrong or missing
// passphrase fails clearly and restores nothing.
func TestWriteEncryptsTheKey(t *testing.T) {
	ctx := context.Background()
	st, cfg, _ := installation(t)
	file, raw := keyOf(t, cfg.DataDir)
	var buf bytes.Buffer
	const phrase = "correct horse battery staple"
	m, err := Write(ctx, st, cfg, Options{Version: "test", Passphrase: phrase, ScryptWorkFactor: 10}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Keeper || !m.KeeperEncrypted || m.KeeperLeftOut {
		t.Fatalf("manifest: %+v", m)
	}
	entries := readAll(t, buf.Bytes())
	if _, ok := entries[KeeperName]; ok {
		t.Fatal("the archive has the key in clear")
	}
	enc, ok := entries[EncryptedKeeperName]
	if !ok || !bytes.HasPrefix(enc, []byte("age-encryption.org/v1\n-> scrypt ")) {
		t.Fatalf("encrypted key entry: %q", enc)
	}
	if archiveHolds(t, buf.Bytes(), file, raw) {
		t.Fatal("the archive holds the keeper key in clear")
	}

	for name, tc := range map[string]struct {
		phrase string
		want   error
	}{
		"wrong":   {"correct horse battery stapler", ErrWrongPassphrase},
		"missing": {"", ErrPassphraseRequired},
	} {
		dir := filepath.Join(t.TempDir(), "restored")
		_, err := Restore(bytes.NewReader(buf.Bytes()), dir, RestoreOptions{Passphrase: tc.phrase})
		if !errors.Is(err, tc.want) {
			t.Fatalf("%s passphrase: %v, want %v", name, err, tc.want)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Fatalf("%s passphrase left %v", name, names(left))
		}
	}

	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := Restore(bytes.NewReader(buf.Bytes()), dir, RestoreOptions{Passphrase: phrase}); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(dir, KeeperName))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("restored key: %v %v", info, err)
	}
	if got, _ := keyOf(t, dir); got != file {
		t.Fatal("the restored key differs")
	}
	if _, err := os.Stat(filepath.Join(dir, EncryptedKeeperName)); err == nil {
		t.Fatal("the encrypted entry was written to the data directory")
	}
}

// --include-key without a passphrase puts the key in clear (the CLI warns).
func TestWriteIncludesTheKeyInClear(t *testing.T) {
	ctx := context.Background()
	st, cfg, _ := installation(t)
	file, _ := keyOf(t, cfg.DataDir)
	var buf bytes.Buffer
	m, err := Write(ctx, st, cfg, Options{Version: "test", IncludeKey: true}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Keeper || m.KeeperEncrypted || m.KeeperLeftOut {
		t.Fatalf("manifest: %+v", m)
	}
	if got := readAll(t, buf.Bytes())[KeeperName]; string(got) != file {
		t.Fatalf("key entry: %q", got)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := Restore(bytes.NewReader(buf.Bytes()), dir, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := keyOf(t, dir); got != file {
		t.Fatal("the restored key differs")
	}
}
