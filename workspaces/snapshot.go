package workspaces

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/enclave-mcp/enclave/storage"
)

// fileName matches the name of a workspace's file in a store directory
// (the template and temporary files do not match).
var fileName = regexp.MustCompile(`^(w_[a-z2-7]{26})\.db$`)

// ListFiles returns the ids of the workspaces that have a file in dir, the
// directory of a SQLiteStore, sorted. A missing directory has none.
func ListFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workspaces: list files: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if m := fileName.FindStringSubmatch(e.Name()); m != nil && e.Type().IsRegular() {
			ids = append(ids, m[1])
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// Files returns the ids of the workspaces that have a file in the store's
// directory, sorted.
func (s *SQLiteStore) Files() ([]string, error) { return ListFiles(s.dir) }

// Snapshot writes a consistent copy of workspace id's file to dst, a path
// that must not exist yet. The copy is made with VACUUM INTO on the
// workspace's own connection, under the store's lock of that workspace:
// its operations wait while the copy runs, and the copy holds every
// committed operation up to its start and nothing of a later one. Other
// workspaces are not held up. A workspace that has no file gives an error
// wrapping fs.ErrNotExist; Snapshot never creates a file (a workspace
// being deleted does not come back).
func (s *SQLiteStore) Snapshot(ctx context.Context, id, dst string) error {
	h, err := s.acquireFile(ctx, id, false)
	if err != nil {
		return err
	}
	defer s.release(h)
	if _, err := h.db.ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
		return fmt.Errorf("workspaces: snapshot %s: %w", id, err)
	}
	return nil
}

// SnapshotFile writes a consistent copy of the workspace file at src to
// dst, a path that must not exist yet, for a file another process (a
// running server) may be writing: VACUUM INTO reads it in one read
// transaction, which SQLite's file locks keep consistent across processes
// (the server's writes go on meanwhile and are not in the copy). The file
// is opened as it is, neither migrated nor created: a missing src gives an
// error wrapping fs.ErrNotExist.
func SnapshotFile(ctx context.Context, src, dst string) error {
	if _, err := os.Stat(src); err != nil {
		return fmt.Errorf("workspaces: snapshot: %w", err)
	}
	params := url.Values{}
	params.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", storage.SQLiteBusyTimeout.Milliseconds()))
	db, err := sql.Open("sqlite", existingDSN(src, params))
	if err != nil {
		return fmt.Errorf("workspaces: snapshot: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
		if !fileExists(src) {
			return fmt.Errorf("workspaces: snapshot %s: %w", filepath.Base(src), fs.ErrNotExist)
		}
		return fmt.Errorf("workspaces: snapshot %s: %w", strings.TrimSuffix(filepath.Base(src), ".db"), err)
	}
	return nil
}
