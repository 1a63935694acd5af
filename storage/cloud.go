package storage

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// buckets
	_ "gocloud.dev/blob/memblob"  // mem:// buckets
	"gocloud.dev/docstore"
	"gocloud.dev/docstore/memdocstore"
	_ "gocloud.dev/pubsub/mempubsub" // mem:// topics and subscriptions
	"gocloud.dev/secrets"
	"gocloud.dev/secrets/localsecrets"
)

// fileURL turns a filesystem path into a file:// URL.
func fileURL(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
}

// openBucket opens a blob URL. file:// URLs get their directory created and
// keep temporary files beside the objects (no_tmp_dir): fileblob otherwise
// writes them to os.TempDir, often another filesystem, and the final rename
// fails.
func openBucket(ctx context.Context, raw string) (*blob.Bucket, error) {
	if strings.HasPrefix(raw, "file://") {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("storage: blob URL: %w", err)
		}
		q := u.Query()
		if q.Get("no_tmp_dir") == "" {
			q.Set("no_tmp_dir", "true")
		}
		if q.Get("create_dir") == "" {
			q.Set("create_dir", "true")
		}
		u.RawQuery = q.Encode()
		raw = u.String()
	}
	b, err := blob.OpenBucket(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("storage: open blob bucket %s: %w", redactURL(raw), err)
	}
	return b, nil
}

// openKV opens a docstore collection. The default (empty URL) is a private
// in-memory collection; file:///PATH is a private in-memory collection loaded
// from and saved to PATH. (gocloud's mem:// URLs name collections shared by
// everything in the process that opens the same name.)
func openKV(ctx context.Context, raw string) (*docstore.Collection, error) {
	switch {
	case raw == "":
		return memdocstore.OpenCollection(KVKeyField, nil)
	case strings.HasPrefix(raw, "file://"):
		u, err := url.Parse(raw)
		if err != nil || u.Path == "" {
			return nil, fmt.Errorf("storage: KV URL %s: want file:///PATH", redactURL(raw))
		}
		if err := os.MkdirAll(filepath.Dir(u.Path), 0o700); err != nil {
			return nil, fmt.Errorf("storage: KV directory: %w", err)
		}
		c, err := memdocstore.OpenCollection(KVKeyField, &memdocstore.Options{Filename: u.Path})
		if err != nil {
			return nil, fmt.Errorf("storage: open KV file %s: %w", u.Path, err)
		}
		return c, nil
	}
	c, err := docstore.OpenCollection(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("storage: open KV collection %s: %w", redactURL(raw), err)
	}
	return c, nil
}

// KeeperKeyFile is the name, inside the data directory, of the default
// keeper's key.
const KeeperKeyFile = "keeper.key"

// openKeeper opens the secrets keeper. With no URL (or "base64key://" with
// no key, which gocloud would answer with a new random key on every start,
// losing every secret sealed before) it uses a key kept in the data dir.
func openKeeper(ctx context.Context, raw, dataDir string, log *slog.Logger) (*secrets.Keeper, error) {
	if raw != "" && raw != "base64key://" {
		k, err := secrets.OpenKeeper(ctx, raw)
		if err != nil {
			return nil, fmt.Errorf("storage: open keeper %s: %w", redactURL(raw), err)
		}
		return k, nil
	}
	key, err := loadOrCreateKey(filepath.Join(dataDir, KeeperKeyFile), log)
	if err != nil {
		return nil, err
	}
	return localsecrets.NewKeeper(key), nil
}

// loadOrCreateKey reads a base64 AES-256 key from path, creating it (mode
// 0600) on first use. Creation is atomic: a complete file is linked into
// place, so concurrent starters agree on one key.
func loadOrCreateKey(path string, log *slog.Logger) ([32]byte, error) {
	var key [32]byte
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createKeyFile(path); err != nil {
			return key, err
		}
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return key, fmt.Errorf("storage: read keeper key: %w", err)
	}
	if info, err := os.Stat(path); err == nil && info.Mode().Perm()&0o077 != 0 {
		log.Warn("keeper key file is readable by other users; chmod 600 it", "path", path, "mode", info.Mode().Perm().String())
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(raw) != len(key) {
		return key, fmt.Errorf("storage: keeper key %s: want %d base64-encoded bytes", path, len(key))
	}
	copy(key[:], raw)
	return key, nil
}

func createKeyFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("storage: create data directory: %w", err)
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return fmt.Errorf("storage: generate keeper key: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".keeper-*.tmp")
	if err != nil {
		return fmt.Errorf("storage: write keeper key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("storage: write keeper key: %w", err)
	}
	if _, err := tmp.WriteString(base64.StdEncoding.EncodeToString(key[:]) + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("storage: write keeper key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("storage: write keeper key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("storage: write keeper key: %w", err)
	}
	// Link fails if another process created the key first; theirs wins.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("storage: write keeper key: %w", err)
	}
	return nil
}
