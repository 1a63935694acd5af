package backup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/storage"
)

// A keeper given as base64key://KEY holds its key in the URL: the backup's
// notes (written into the manifest and printed by the CLI) must not repeat
// it.
func TestWriteNotesNeverHoldTheKeeperKey(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	raw := make([]byte, 32)
	rand.Read(raw)
	key := base64.URLEncoding.EncodeToString(raw)
	cfg := storage.Config{DataDir: dir, KeeperURL: "base64key://" + key}
	st, err := storage.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var buf bytes.Buffer
	m, err := Write(ctx, st, cfg, Options{Version: "test"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if m.Keeper {
		t.Fatal("a URL keeper's key was put in the archive")
	}
	if len(m.Notes) == 0 {
		t.Fatal("no note about the keeper")
	}
	for _, n := range m.Notes {
		if strings.Contains(n, key) || strings.Contains(n, strings.TrimRight(key, "=")) {
			t.Fatalf("a note holds the keeper key: %q", n)
		}
	}
	if bytes.Contains(readAll(t, buf.Bytes())[ManifestName], []byte(strings.TrimRight(key, "="))) {
		t.Fatal("the manifest holds the keeper key")
	}
}

func readAll(t *testing.T, archive []byte) map[string][]byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		var b bytes.Buffer
		b.ReadFrom(tr)
		out[h.Name] = b.Bytes()
	}
	return out
}

type entry struct {
	name string
	typ  byte
	body string
	link string
}

func archive(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Linkname: e.link, ModTime: time.Now()}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func manifest(t *testing.T, m Manifest) entry {
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return entry{name: ManifestName, body: string(b)}
}

// Hostile archives: entries that climb out of the directory, links, and
// names outside the layout are refused, nothing lands outside dir, and a
// refused archive leaves dir empty (so the restore can be retried there).
func TestRestoreRefusesHostileArchives(t *testing.T) {
	good := Manifest{Format: 1, Version: "test", Database: true, Keeper: true}
	cases := map[string][]entry{
		"dot-dot":          {manifest(t, good), {name: DatabaseName, body: "db"}, {name: "blobs/../../escaped", body: "x"}},
		"absolute":         {manifest(t, good), {name: DatabaseName, body: "db"}, {name: "/tmp/escaped", body: "x"}},
		"symlink":          {manifest(t, good), {name: DatabaseName, body: "db"}, {name: "blobs/link", typ: tar.TypeSymlink, link: "/etc"}},
		"hard link":        {manifest(t, good), {name: DatabaseName, body: "db"}, {name: KeeperName, typ: tar.TypeLink, link: "/etc/passwd"}},
		"directory":        {manifest(t, good), {name: DatabaseName, body: "db"}, {name: "blobs/d", typ: tar.TypeDir}},
		"unknown name":     {manifest(t, good), {name: DatabaseName, body: "db"}, {name: "enclave.db-wal", body: "x"}},
		"duplicate":        {manifest(t, good), {name: DatabaseName, body: "db"}, {name: DatabaseName, body: "other"}},
		"no manifest":      {{name: DatabaseName, body: "db"}, {name: KeeperName, body: "key"}},
		"manifest late":    {{name: DatabaseName, body: "db"}, manifest(t, good), {name: KeeperName, body: "key"}},
		"missing keeper":   {manifest(t, good), {name: DatabaseName, body: "db"}},
		"missing database": {manifest(t, good), {name: KeeperName, body: "key"}},
		"bad manifest":     {{name: ManifestName, body: `{"format":99}`}, {name: DatabaseName, body: "db"}},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "data")
			if _, err := Restore(bytes.NewReader(archive(t, entries...)), dir, RestoreOptions{}); err == nil {
				t.Fatal("restored")
			}
			left, err := os.ReadDir(dir)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if len(left) != 0 {
				t.Fatalf("a refused archive left %v in the directory", names(left))
			}
			if got, _ := os.ReadDir(parent); len(got) > 1 {
				t.Fatalf("files outside the directory: %v", names(got))
			}
			if _, err := os.Stat("/tmp/escaped"); err == nil {
				t.Fatal("wrote /tmp/escaped")
			}
		})
	}

	// The well-formed archive restores, with 0600 files.
	dir := filepath.Join(t.TempDir(), "data")
	if _, err := Restore(bytes.NewReader(archive(t, manifest(t, good), entry{name: DatabaseName, body: "db"}, entry{name: KeeperName, body: "key"}, entry{name: "blobs/u/a.txt", body: "blob"})), dir, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{DatabaseName, KeeperName, "blobs/u/a.txt"} {
		info, err := os.Stat(filepath.Join(dir, n))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", n, info, err)
		}
	}
}

// A restore into a directory that holds anything is refused and touches
// nothing there.
func TestRestoreRefusesNonEmptyDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := Manifest{Format: 1, Database: true}
	if _, err := Restore(bytes.NewReader(archive(t, manifest(t, good), entry{name: DatabaseName, body: "db"})), dir, RestoreOptions{}); err == nil {
		t.Fatal("restored into a non-empty directory")
	}
	if _, err := os.Stat(filepath.Join(dir, DatabaseName)); err == nil {
		t.Fatal("wrote into a non-empty directory")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "keep")); string(b) != "mine" {
		t.Fatal("an existing file changed")
	}
}

func names(es []os.DirEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}
