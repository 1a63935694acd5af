// Package backup writes and restores an enclave installation that keeps
// its state on local disk: the SQLite database (a consistent copy taken
// online with VACUUM INTO, while the server keeps serving and writing),
// the blob directory and the keeper key when they are local files, in one
// gzip-compressed tar archive. A PostgreSQL database is backed up with
// pg_dump instead (PostgresCommand prints the command).
package backup

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/storage"
)

// The archive's layout.
const (
	ManifestName = "manifest.json"
	DatabaseName = "enclave.db"
	BlobsDir     = "blobs"
	KeeperName   = storage.KeeperKeyFile
)

// Manifest describes an archive.
type Manifest struct {
	Format    int       `json:"format"`
	Version   string    `json:"enclave_version"`
	CreatedAt time.Time `json:"created_at"`
	Database  bool      `json:"database"`
	Blobs     bool      `json:"blobs"`
	Keeper    bool      `json:"keeper_key"`
	// Notes name what the archive does not hold (a cloud bucket, a cloud
	// keeper), which the operator backs up elsewhere.
	Notes []string `json:"notes,omitempty"`
}

// ErrPostgres is returned by Write for a PostgreSQL database.
var ErrPostgres = errors.New("backup: the database is PostgreSQL; back it up with pg_dump")

// PostgresCommand is the pg_dump command that backs up databaseURL. The
// URL's password is left out (it would land in the terminal, in logs and
// in the process list of whoever runs the command): withPassword reports
// that there was one, for pg_dump to take from PGPASSWORD or ~/.pgpass.
func PostgresCommand(databaseURL, out string) (cmd string, withPassword bool) {
	if u, err := url.Parse(databaseURL); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			withPassword = true
			u.User = url.User(u.User.Username())
			databaseURL = u.String()
		}
	} else if err != nil {
		databaseURL = "DATABASE_URL"
	}
	return fmt.Sprintf("pg_dump --format=custom --no-owner --file=%s '%s'", shellQuote(out), strings.ReplaceAll(databaseURL, "'", `'\''`)), withPassword
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Write writes an archive of the installation configured by cfg (with its
// defaults filled) to w. store must be open on the same database: the copy
// is made with VACUUM INTO on it, a consistent snapshot while writes go on.
func Write(ctx context.Context, store *storage.Store, cfg storage.Config, version string, w io.Writer) (Manifest, error) {
	cfg = cfg.WithDefaults()
	m := Manifest{Format: 1, Version: version, CreatedAt: time.Now().UTC()}
	if store.Dialect() != storage.SQLite {
		return m, ErrPostgres
	}
	tmpDir, err := os.MkdirTemp("", "enclave-backup-")
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(tmpDir)
	snapshot := filepath.Join(tmpDir, DatabaseName)
	if _, err := store.DB.ExecContext(ctx, "VACUUM INTO ?", snapshot); err != nil {
		return m, fmt.Errorf("backup: copy the database: %w", err)
	}
	m.Database = true

	blobDir, blobLocal := localPath(cfg.BlobURL)
	if blobLocal {
		if _, err := os.Stat(blobDir); err == nil {
			m.Blobs = true
		}
	} else {
		m.Notes = append(m.Notes, "blobs are in "+storage.RedactURL(cfg.BlobURL)+": back them up with that store's tools")
	}
	keeperPath := ""
	if cfg.KeeperURL == "" || cfg.KeeperURL == "base64key://" {
		keeperPath = filepath.Join(cfg.DataDir, KeeperName)
		m.Keeper = true
	} else {
		m.Notes = append(m.Notes, "the keeper is "+storage.RedactURL(cfg.KeeperURL)+": its key stays with that service")
	}

	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	manifest, _ := json.MarshalIndent(m, "", "  ")
	if err := writeBytes(tw, ManifestName, manifest, 0o600); err != nil {
		return m, err
	}
	if err := writeFile(tw, DatabaseName, snapshot); err != nil {
		return m, err
	}
	if keeperPath != "" {
		if err := writeFile(tw, KeeperName, keeperPath); err != nil {
			return m, err
		}
	}
	if m.Blobs {
		err := filepath.WalkDir(blobDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(blobDir, p)
			if err != nil {
				return err
			}
			// fileblob keeps in-progress writes as *.tmp beside the objects.
			if strings.HasSuffix(p, ".tmp") {
				return nil
			}
			err = writeFile(tw, path.Join(BlobsDir, filepath.ToSlash(rel)), p)
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted meanwhile
			}
			return err
		})
		if err != nil {
			return m, fmt.Errorf("backup: blobs: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if err := gz.Close(); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	return m, nil
}

// localPath returns the directory of a file:// URL.
func localPath(raw string) (string, bool) {
	if !strings.HasPrefix(raw, "file://") {
		return "", false
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", false
	}
	return filepath.FromSlash(u.Path), true
}

func writeBytes(tw *tar.Writer, name string, data []byte, mode int64) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), ModTime: time.Now(), Typeflag: tar.TypeReg}); err != nil {
		return fmt.Errorf("backup: %s: %w", name, err)
	}
	_, err := tw.Write(data)
	return err
}

func writeFile(tw *tar.Writer, name, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: info.Size(), ModTime: info.ModTime(), Typeflag: tar.TypeReg}); err != nil {
		return fmt.Errorf("backup: %s: %w", name, err)
	}
	if _, err := io.CopyN(tw, f, info.Size()); err != nil {
		return fmt.Errorf("backup: %s: %w", name, err)
	}
	return nil
}

// Restore unpacks an archive into dir, which must not exist or be empty:
// enclave.db, blobs/ and keeper.key land where "enclave serve --data-dir
// DIR" looks for them by default. Files are written with mode 0600.
//
// Only regular files of the archive's layout are accepted (no links, no
// directories, no name outside it), the manifest must come first, and
// every part it lists must be present. When the archive is refused or
// unreadable, what was written is removed, leaving dir empty (a server
// started on a half-restored directory would make a new keeper key and
// lose every secret sealed with the old one).
func Restore(r io.Reader, dir string) (m Manifest, err error) {
	entries, rerr := os.ReadDir(dir)
	switch {
	case rerr == nil && len(entries) > 0:
		return m, fmt.Errorf("restore: %s is not empty; restore into a new directory", dir)
	case rerr != nil && !errors.Is(rerr, fs.ErrNotExist):
		return m, fmt.Errorf("restore: %w", rerr)
	}
	created := errors.Is(rerr, fs.ErrNotExist)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	defer func() {
		if err != nil {
			cleanDir(dir, created)
		}
	}()
	return unpack(r, dir)
}

// cleanDir removes what a failed restore wrote into dir, which was empty.
func cleanDir(dir string, created bool) {
	if created {
		_ = os.RemoveAll(dir)
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

func unpack(r io.Reader, dir string) (Manifest, error) {
	var m Manifest
	gz, err := gzip.NewReader(r)
	if err != nil {
		return m, fmt.Errorf("restore: not an enclave backup: %w", err)
	}
	tr := tar.NewReader(gz)
	seenManifest, seenDatabase, seenKeeper := false, false, false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("restore: read archive: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			return m, fmt.Errorf("restore: unexpected entry %q", h.Name)
		}
		name := path.Clean(h.Name)
		if name != h.Name || !fs.ValidPath(name) || !(name == ManifestName || name == DatabaseName || name == KeeperName || strings.HasPrefix(name, BlobsDir+"/")) {
			return m, fmt.Errorf("restore: unexpected entry %q", h.Name)
		}
		if name == ManifestName {
			if seenManifest {
				return m, fmt.Errorf("restore: unexpected entry %q", h.Name)
			}
			if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&m); err != nil || m.Format != 1 {
				return m, fmt.Errorf("restore: unreadable manifest")
			}
			seenManifest = true
			continue
		}
		if !seenManifest {
			// Write puts the manifest first: anything else is not ours.
			return m, errors.New("restore: not an enclave backup (no manifest first)")
		}
		seenDatabase = seenDatabase || name == DatabaseName
		seenKeeper = seenKeeper || name == KeeperName
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return m, fmt.Errorf("restore: %w", err)
		}
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return m, fmt.Errorf("restore: %w", err)
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return m, fmt.Errorf("restore: %s: %w", name, err)
		}
	}
	switch {
	case !seenManifest:
		return m, errors.New("restore: not an enclave backup (no manifest)")
	case m.Database && !seenDatabase:
		return m, errors.New("restore: the archive is incomplete: no database")
	case m.Keeper && !seenKeeper:
		return m, errors.New("restore: the archive is incomplete: no keeper key")
	}
	return m, nil
}
