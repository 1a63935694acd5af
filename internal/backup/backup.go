// Package backup writes and restores an enclave installation that keeps
// its state on local disk, in one gzip-compressed tar archive: the SQLite
// database (a consistent copy taken online with VACUUM INTO, while the
// server keeps serving and writing), the per-workspace SQLite files (each
// copied the same way, see workspaces.SQLiteStore.Snapshot), the blob
// directory when it is local, and, only when asked, the keeper key:
// encrypted with an operator passphrase (age, scrypt) or, when the
// operator insists, in clear. A PostgreSQL database is backed up with
// pg_dump instead (PostgresCommand prints the command).
//
// The manifest, the archive's first entry, lists every file but the blobs
// with its size and SHA-256; Restore checks each one.
package backup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/workspaces"
)

// The archive's layout.
const (
	ManifestName = "manifest.json"
	DatabaseName = "enclave.db"
	BlobsDir     = "blobs"
	// WorkspacesDir holds the workspace files, WorkspacesDir/<id>.db, as
	// in the data directory.
	WorkspacesDir = "workspaces"
	// KeeperName is the keeper key in clear (--include-key without a
	// passphrase); EncryptedKeeperName the key encrypted with age to the
	// operator's passphrase. Restore writes either as KeeperName.
	KeeperName          = storage.KeeperKeyFile
	EncryptedKeeperName = KeeperName + ".age"
)

// Format is the manifest format Write produces. Restore reads it and
// format 1 (archives of earlier releases: no workspace files, no file
// list, the key in clear).
const Format = 2

// Manifest describes an archive.
type Manifest struct {
	Format    int       `json:"format"`
	Version   string    `json:"enclave_version"`
	CreatedAt time.Time `json:"created_at"`
	Database  bool      `json:"database"`
	Blobs     bool      `json:"blobs"`
	// Keeper says the archive holds the keeper key: encrypted
	// (EncryptedKeeperName) when KeeperEncrypted, else in clear.
	Keeper          bool `json:"keeper_key"`
	KeeperEncrypted bool `json:"keeper_key_encrypted,omitempty"`
	// KeeperLeftOut says the installation keeps its key in the data
	// directory and the archive does not hold it: the operator restores
	// it from their own copy.
	KeeperLeftOut bool `json:"keeper_key_left_out,omitempty"`
	// Workspaces counts the workspace files in the archive.
	Workspaces int `json:"workspaces"`
	// Files lists every file of the archive but the manifest and the
	// blobs: path in the archive, size and SHA-256.
	Files []File `json:"files,omitempty"`
	// Notes name what the archive does not hold (a cloud bucket, a cloud
	// keeper, the keeper key), which the operator backs up elsewhere.
	Notes []string `json:"notes,omitempty"`
}

// File is one entry of Manifest.Files.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// WorkspaceFiles copies workspace files: *workspaces.SQLiteStore does it
// under its lock, for a backup taken inside the serving process.
type WorkspaceFiles interface {
	// Files lists the ids of the workspaces that have a file.
	Files() ([]string, error)
	// Snapshot writes a consistent copy of workspace id's file to dst;
	// an error wrapping fs.ErrNotExist means it has no file (any more).
	Snapshot(ctx context.Context, id, dst string) error
}

// Options are Write's settings. The zero value leaves the keeper key out.
type Options struct {
	// Version is the enclave version recorded in the manifest.
	Version string
	// IncludeKey puts a local keeper key (<data-dir>/keeper.key) in the
	// archive: encrypted when Passphrase is set, in clear otherwise.
	IncludeKey bool
	// Passphrase, when set, encrypts the keeper key in the archive with
	// age to this passphrase (scrypt), and implies IncludeKey.
	Passphrase string
	// WorkspaceFiles copies the workspace files. Nil copies every file in
	// WorkspacesDir with workspaces.SnapshotFile, which is consistent with
	// a server writing them from another process.
	WorkspaceFiles WorkspaceFiles
	// WorkspacesDir is where the workspace files are. Default
	// <data-dir>/workspaces, where an enclave server keeps them.
	WorkspacesDir string
	// ScryptWorkFactor is the log2 scrypt work factor of the key's
	// encryption. Default (0) age's, about a second of work.
	ScryptWorkFactor int
}

// RestoreOptions are Restore's settings.
type RestoreOptions struct {
	// Passphrase decrypts an encrypted keeper key.
	Passphrase string
}

// Restore's errors about the keeper key.
var (
	ErrPassphraseRequired = errors.New("restore: the archive's keeper key is encrypted: give the backup's passphrase (--passphrase-file)")
	ErrWrongPassphrase    = errors.New("restore: the passphrase does not decrypt the archive's keeper key")
)

// KeyPlaceholder is what Restore writes as keeper.key when the archive
// does not hold the key: the server refuses to start on it (it is not a
// key), instead of making a new key that cannot open the restored secrets.
const KeyPlaceholder = `# enclave restore: this backup was taken without the keeper key.
# Replace this file with the keeper.key of the server the backup was taken
# from (mode 0600). Until then the server refuses to start. Deleting this
# file makes the server start with a NEW key: every secret in the restored
# database is then unreadable.
`

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
// defaults filled) to w. store must be open on the same database.
//
// The copies are taken in this order: the workspace files (each one
// consistent on its own), then the database (VACUUM INTO, consistent),
// then the blobs. A workspace file whose workspace is not in the copied
// database (deleted while the backup ran, which removes the directory
// entry before the file) is left out, so no restored directory lists a
// workspace whose state is missing; one created meanwhile starts empty.
func Write(ctx context.Context, store *storage.Store, cfg storage.Config, opts Options, w io.Writer) (Manifest, error) {
	cfg = cfg.WithDefaults()
	m := Manifest{Format: Format, Version: opts.Version, CreatedAt: time.Now().UTC()}
	if store.Dialect() != storage.SQLite {
		return m, ErrPostgres
	}
	tmpDir, err := os.MkdirTemp("", "enclave-backup-")
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(tmpDir)

	ids, err := snapshotWorkspaces(ctx, cfg, opts, tmpDir)
	if err != nil {
		return m, err
	}
	snapshot := filepath.Join(tmpDir, DatabaseName)
	if _, err := store.DB.ExecContext(ctx, "VACUUM INTO ?", snapshot); err != nil {
		return m, fmt.Errorf("backup: copy the database: %w", err)
	}
	m.Database = true
	ids, dropped, err := keepListed(ctx, snapshot, tmpDir, ids)
	if err != nil {
		return m, err
	}
	if dropped > 0 {
		m.Notes = append(m.Notes, fmt.Sprintf("left out %d workspace file(s) whose workspace is not in the database (deleted while the backup ran)", dropped))
	}
	m.Workspaces = len(ids)

	blobDir, blobLocal := localPath(cfg.BlobURL)
	if blobLocal {
		if _, err := os.Stat(blobDir); err == nil {
			m.Blobs = true
		}
	} else {
		m.Notes = append(m.Notes, "blobs are in "+storage.RedactURL(cfg.BlobURL)+": back them up with that store's tools")
	}

	// The keeper key: left out unless asked for, encrypted when a
	// passphrase is given. It is kept in memory, never in the temporary
	// directory.
	var keyName string
	var keyEntry []byte
	if cfg.KeeperURL == "" || cfg.KeeperURL == "base64key://" {
		keyPath := filepath.Join(cfg.DataDir, KeeperName)
		switch {
		case opts.Passphrase != "":
			plain, err := os.ReadFile(keyPath)
			if err != nil {
				return m, fmt.Errorf("backup: read the keeper key: %w", err)
			}
			if keyEntry, err = encryptKey(plain, opts.Passphrase, opts.ScryptWorkFactor); err != nil {
				return m, err
			}
			keyName, m.Keeper, m.KeeperEncrypted = EncryptedKeeperName, true, true
		case opts.IncludeKey:
			if keyEntry, err = os.ReadFile(keyPath); err != nil {
				return m, fmt.Errorf("backup: read the keeper key: %w", err)
			}
			keyName, m.Keeper = KeeperName, true
		default:
			m.KeeperLeftOut = true
			m.Notes = append(m.Notes, "the keeper key ("+keyPath+") is not in the archive: keep your own copy of it, a restore needs it")
		}
	} else {
		m.Notes = append(m.Notes, "the keeper is "+storage.RedactURL(cfg.KeeperURL)+": its key stays with that service")
	}

	// The manifest comes first and lists what follows.
	if keyName != "" {
		m.Files = append(m.Files, fileOf(keyName, keyEntry))
	}
	parts := []string{DatabaseName}
	for _, id := range ids {
		parts = append(parts, path.Join(WorkspacesDir, id+".db"))
	}
	for _, name := range parts {
		f, err := hashFile(filepath.Join(tmpDir, filepath.FromSlash(name)))
		if err != nil {
			return m, fmt.Errorf("backup: %s: %w", name, err)
		}
		f.Path = name
		m.Files = append(m.Files, f)
	}

	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	manifest, _ := json.MarshalIndent(m, "", "  ")
	if err := writeBytes(tw, ManifestName, manifest, 0o600); err != nil {
		return m, err
	}
	// The key right after the manifest: a restore with a wrong passphrase
	// fails before it unpacks anything large.
	if keyName != "" {
		if err := writeBytes(tw, keyName, keyEntry, 0o600); err != nil {
			return m, err
		}
	}
	for _, name := range parts {
		if err := writeFile(tw, name, filepath.Join(tmpDir, filepath.FromSlash(name))); err != nil {
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

// dirFiles copies the workspace files of a directory that another process
// may be writing.
type dirFiles string

func (d dirFiles) Files() ([]string, error) { return workspaces.ListFiles(string(d)) }

func (d dirFiles) Snapshot(ctx context.Context, id, dst string) error {
	return workspaces.SnapshotFile(ctx, filepath.Join(string(d), id+".db"), dst)
}

// snapshotWorkspaces copies every workspace file into tmpDir/workspaces
// and returns the ids copied.
func snapshotWorkspaces(ctx context.Context, cfg storage.Config, opts Options, tmpDir string) ([]string, error) {
	wf := opts.WorkspaceFiles
	if wf == nil {
		dir := opts.WorkspacesDir
		if dir == "" {
			dir = filepath.Join(cfg.DataDir, WorkspacesDir)
		}
		wf = dirFiles(dir)
	}
	ids, err := wf.Files()
	if err != nil {
		return nil, fmt.Errorf("backup: workspaces: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if err := os.Mkdir(filepath.Join(tmpDir, WorkspacesDir), 0o700); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	var out []string
	for _, id := range ids {
		if !workspaceEntry.MatchString(path.Join(WorkspacesDir, id+".db")) {
			return nil, fmt.Errorf("backup: workspaces: unexpected id %q", id)
		}
		err := wf.Snapshot(ctx, id, filepath.Join(tmpDir, WorkspacesDir, id+".db"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("backup: workspaces: %w", err)
		}
		out = append(out, id)
	}
	return out, nil
}

// keepListed removes from tmpDir the copied workspace files whose
// workspace is not in the database copy's directory, and returns the ids
// kept and how many it removed. A database without the directory table
// keeps every file.
func keepListed(ctx context.Context, snapshot, tmpDir string, ids []string) (kept []string, dropped int, err error) {
	if len(ids) == 0 {
		return nil, 0, nil
	}
	db, err := sql.Open("sqlite", snapshot)
	if err != nil {
		return nil, 0, fmt.Errorf("backup: read the database copy: %w", err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'workspaces'").Scan(&n); err != nil {
		return nil, 0, fmt.Errorf("backup: read the database copy: %w", err)
	}
	if n == 0 {
		return ids, 0, nil
	}
	rows, err := db.QueryContext(ctx, "SELECT id FROM workspaces")
	if err != nil {
		return nil, 0, fmt.Errorf("backup: read the workspace directory: %w", err)
	}
	defer rows.Close()
	known := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, 0, fmt.Errorf("backup: read the workspace directory: %w", err)
		}
		known[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("backup: read the workspace directory: %w", err)
	}
	for _, id := range ids {
		if known[id] {
			kept = append(kept, id)
			continue
		}
		dropped++
		if err := os.Remove(filepath.Join(tmpDir, WorkspacesDir, id+".db")); err != nil {
			return nil, 0, fmt.Errorf("backup: %w", err)
		}
	}
	return kept, dropped, nil
}

// encryptKey encrypts the keeper key file's bytes with age to passphrase.
func encryptKey(plain []byte, passphrase string, workFactor int) ([]byte, error) {
	r, err := age.NewScryptRecipient(passphrase)
	if err != nil {
		return nil, fmt.Errorf("backup: encrypt the keeper key: %w", err)
	}
	if workFactor > 0 {
		r.SetWorkFactor(workFactor)
	}
	var buf bytes.Buffer
	enc, err := age.Encrypt(&buf, r)
	if err != nil {
		return nil, fmt.Errorf("backup: encrypt the keeper key: %w", err)
	}
	if _, err := enc.Write(plain); err != nil {
		return nil, fmt.Errorf("backup: encrypt the keeper key: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("backup: encrypt the keeper key: %w", err)
	}
	return buf.Bytes(), nil
}

// decryptKey reverses encryptKey and checks that the result is a keeper
// key.
func decryptKey(entry []byte, passphrase string) ([]byte, error) {
	id, err := age.NewScryptIdentity(passphrase)
	if err != nil {
		return nil, ErrPassphraseRequired
	}
	r, err := age.Decrypt(bytes.NewReader(entry), id)
	var noMatch *age.NoIdentityMatchError
	if errors.As(err, &noMatch) {
		return nil, ErrWrongPassphrase
	}
	if err != nil {
		return nil, fmt.Errorf("restore: the archive's keeper key is damaged: %w", err)
	}
	plain, err := io.ReadAll(io.LimitReader(r, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("restore: the archive's keeper key is damaged: %w", err)
	}
	if !isKey(plain) {
		return nil, errors.New("restore: the archive's keeper key is not a key")
	}
	return plain, nil
}

// isKey reports whether b is a keeper key file: 32 bytes, base64.
func isKey(b []byte) bool {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	return err == nil && len(raw) == 32
}

func fileOf(name string, b []byte) File {
	sum := sha256.Sum256(b)
	return File{Path: name, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

func hashFile(p string) (File, error) {
	f, err := os.Open(p)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return File{}, err
	}
	return File{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
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

// workspaceEntry matches a workspace file's name in the archive.
var workspaceEntry = regexp.MustCompile(`^` + WorkspacesDir + `/w_[a-z2-7]{26}\.db$`)

// Restore unpacks an archive into dir, which must not exist or be empty:
// enclave.db, workspaces/, blobs/ and keeper.key land where "enclave serve
// --data-dir DIR" looks for them by default. Files are written with mode
// 0600.
//
// Only regular files of the archive's layout are accepted (no links, no
// directories, no name outside it), the manifest must come first, every
// file it lists must be present with its size and SHA-256, and nothing
// but blobs may be unlisted. An encrypted keeper key needs
// opts.Passphrase (ErrPassphraseRequired, ErrWrongPassphrase). When the
// archive does not hold the key of an installation that kept it in its
// data directory (Manifest.KeeperLeftOut), keeper.key is written as
// KeyPlaceholder, which the server refuses to start on until the operator
// puts the real key there. When the archive is refused or unreadable,
// what was written is removed, leaving dir empty (a server started on a
// half-restored directory would make a new keeper key and lose every
// secret sealed with the old one).
func Restore(r io.Reader, dir string, opts RestoreOptions) (m Manifest, err error) {
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
	return unpack(r, dir, opts)
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

// allowed reports whether name belongs in an archive described by m.
func allowed(m Manifest, name string) bool {
	switch {
	case name == DatabaseName, strings.HasPrefix(name, BlobsDir+"/"):
		return true
	case m.Format == 1:
		return name == KeeperName
	case name == KeeperName:
		return m.Keeper && !m.KeeperEncrypted
	case name == EncryptedKeeperName:
		return m.KeeperEncrypted
	default:
		return workspaceEntry.MatchString(name)
	}
}

func unpack(r io.Reader, dir string, opts RestoreOptions) (Manifest, error) {
	var m Manifest
	gz, err := gzip.NewReader(r)
	if err != nil {
		return m, fmt.Errorf("restore: not an enclave backup: %w", err)
	}
	tr := tar.NewReader(gz)
	seenManifest, seenDatabase, seenKeeper := false, false, false
	listed := map[string]File{}
	seen := map[string]bool{}
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
		if name != h.Name || !fs.ValidPath(name) {
			return m, fmt.Errorf("restore: unexpected entry %q", h.Name)
		}
		if name == ManifestName {
			if seenManifest {
				return m, fmt.Errorf("restore: unexpected entry %q", h.Name)
			}
			if err := json.NewDecoder(io.LimitReader(tr, 1<<24)).Decode(&m); err != nil || (m.Format != 1 && m.Format != Format) {
				return m, fmt.Errorf("restore: unreadable manifest")
			}
			for _, f := range m.Files {
				if _, dup := listed[f.Path]; dup || !allowed(m, f.Path) || strings.HasPrefix(f.Path, BlobsDir+"/") {
					return m, fmt.Errorf("restore: unreadable manifest")
				}
				listed[f.Path] = f
			}
			if m.KeeperEncrypted && opts.Passphrase == "" {
				return m, ErrPassphraseRequired
			}
			seenManifest = true
			continue
		}
		if !seenManifest {
			// Write puts the manifest first: anything else is not ours.
			return m, errors.New("restore: not an enclave backup (no manifest first)")
		}
		if !allowed(m, name) || seen[name] {
			return m, fmt.Errorf("restore: unexpected entry %q", h.Name)
		}
		seen[name] = true
		want, isListed := listed[name]
		if m.Format != 1 && !isListed && !strings.HasPrefix(name, BlobsDir+"/") {
			return m, fmt.Errorf("restore: %s is not in the manifest", name)
		}
		seenDatabase = seenDatabase || name == DatabaseName
		if name == EncryptedKeeperName {
			entry, err := io.ReadAll(io.LimitReader(tr, 1<<16))
			if err != nil {
				return m, fmt.Errorf("restore: %s: %w", name, err)
			}
			if got := fileOf(name, entry); got != want {
				return m, fmt.Errorf("restore: %s does not match the manifest: the archive is damaged", name)
			}
			plain, err := decryptKey(entry, opts.Passphrase)
			if err != nil {
				return m, err
			}
			if err := writeNew(filepath.Join(dir, KeeperName), bytes.NewReader(plain), nil); err != nil {
				return m, fmt.Errorf("restore: %s: %w", KeeperName, err)
			}
			seenKeeper = true
			continue
		}
		seenKeeper = seenKeeper || name == KeeperName
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return m, fmt.Errorf("restore: %w", err)
		}
		var hh hash.Hash
		if isListed {
			hh = sha256.New()
		}
		if err := writeNew(dst, tr, hh); err != nil {
			return m, fmt.Errorf("restore: %s: %w", name, err)
		}
		if isListed {
			info, err := os.Stat(dst)
			if err != nil {
				return m, fmt.Errorf("restore: %w", err)
			}
			if info.Size() != want.Size || hex.EncodeToString(hh.Sum(nil)) != want.SHA256 {
				return m, fmt.Errorf("restore: %s does not match the manifest: the archive is damaged", name)
			}
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
	var missing []string
	for p := range listed {
		if !seen[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return m, fmt.Errorf("restore: the archive is incomplete: no %s", strings.Join(missing, ", "))
	}
	if m.KeeperLeftOut && !seenKeeper {
		if err := writeNew(filepath.Join(dir, KeeperName), strings.NewReader(KeyPlaceholder), nil); err != nil {
			return m, fmt.Errorf("restore: %s: %w", KeeperName, err)
		}
	}
	return m, nil
}

// writeNew writes r to a new file dst (mode 0600), feeding h when set.
func writeNew(dst string, r io.Reader, h hash.Hash) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	w := io.Writer(f)
	if h != nil {
		w = io.MultiWriter(f, h)
	}
	_, err = io.Copy(w, r)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
