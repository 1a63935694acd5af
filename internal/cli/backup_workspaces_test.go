package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/internal/backup"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/workspaces"
)

// lowScrypt lowers the key encryption's scrypt work factor for one test:
// age's default takes tens of seconds under -race on the CI machines, and
// the encryption is the same with a lower one.
func lowScrypt(t *testing.T) {
	old := scryptWorkFactor
	scryptWorkFactor = 10
	t.Cleanup(func() { scryptWorkFactor = old })
}

// writePassphrase writes a passphrase file and returns its path.
func writePassphrase(t *testing.T, p string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "passphrase")
	if err := os.WriteFile(path, []byte(p), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// listArchive returns the entries of a backup archive by name.
func listArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
	}
	return out
}

func invokeAs(t *testing.T, srv *enclave.Server, stableID, name string, args, out any) {
	t.Helper()
	c, err := srv.Accounts().LoadCaller(context.Background(), stableID)
	if err != nil {
		t.Fatal(err)
	}
	c.Interactive, c.AllScopes = true, true
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	res, err := srv.Registry().Invoke(context.Background(), c, name, raw)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if out != nil {
		b, _ := json.Marshal(res.Structured)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decode %s: %v", name, b, err)
		}
	}
}

// Workspaces of two people, with files, survive a backup and a restore
// into a fresh data directory: the same revisions and the same bytes. The
// archive holds each workspace file, listed in its manifest, and (by
// default) no keeper key: the restore says where the operator's copy of
// the key must go, and the server does not start until it is there.
func TestBackupRestoreWorkspaces(t *testing.T) {
	ctx := context.Background()
	live := t.TempDir()
	srv, _, err := startDir(t, live, &workspaces.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type file struct{ ws, id, body string }
	var files []file
	revisions := map[string]int64{}
	for _, name := range []string{"alice", "bob"} {
		u, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: name + "@example.com", Username: name, Password: "correct horse battery staple", Verified: true})
		if err != nil {
			t.Fatal(err)
		}
		var w workspaces.Workspace
		invokeAs(t, srv, u.StableID, "workspaceCreate", map[string]any{"name": name + "'s team"}, &w)
		for i, body := range []string{name + " one", name + " two", name + " three"} {
			var up workspaces.OpResult[workspaces.FileInfo]
			invokeAs(t, srv, u.StableID, "fileUpload", map[string]any{"workspaceId": w.ID, "name": []string{"a.txt", "b.txt", "a.txt"}[i],
				"contentType": "text/plain", "contentBase64": base64.StdEncoding.EncodeToString([]byte(body))}, &up)
			files = append(files, file{w.ID, up.Result.FileID, body})
			revisions[w.ID] = up.Revision
		}
		rev, err := srv.Workspaces().Revision(ctx, w.ID)
		if err != nil || rev != revisions[w.ID] || rev < 3 {
			t.Fatalf("revision of %s: %d %v (the last upload said %d)", w.ID, rev, err, revisions[w.ID])
		}
	}
	keyFile, err := os.ReadFile(filepath.Join(live, storage.KeeperKeyFile))
	if err != nil {
		t.Fatal(err)
	}

	archive := filepath.Join(t.TempDir(), "backup.tar.gz")
	code, out, errOut := run(t, map[string]string{"ENCLAVE_DATA_DIR": live}, "backup", "--out", archive)
	if code != 0 || !strings.Contains(out, "workspaces 2,") || !strings.Contains(out, "keeper key left out") || strings.Contains(errOut, "WARNING") {
		t.Fatalf("backup: %d %s %s", code, out, errOut)
	}
	entries := listArchive(t, archive)
	var m backup.Manifest
	if err := json.Unmarshal(entries[backup.ManifestName], &m); err != nil {
		t.Fatal(err)
	}
	listed := map[string]backup.File{}
	for _, f := range m.Files {
		listed[f.Path] = f
	}
	for id := range revisions {
		name := "workspaces/" + id + ".db"
		body, ok := entries[name]
		if !ok {
			t.Fatalf("the archive lacks %s (has %d entries)", name, len(entries))
		}
		if f := listed[name]; f.Size != int64(len(body)) || len(f.SHA256) != 64 {
			t.Fatalf("manifest entry of %s: %+v", name, f)
		}
	}
	// No keeper key, in any form.
	for name, body := range entries {
		if strings.HasPrefix(name, "keeper") || bytes.Contains(body, bytes.TrimSpace(keyFile)) {
			t.Fatalf("the archive holds the keeper key (%s)", name)
		}
	}

	fresh := filepath.Join(t.TempDir(), "restored")
	code, out, errOut = run(t, nil, "restore", "--from", archive, "--data-dir", fresh)
	keyPath := filepath.Join(fresh, storage.KeeperKeyFile)
	if code != 0 || !strings.Contains(errOut, "does not hold the keeper key") || !strings.Contains(errOut, keyPath) || !strings.Contains(out, "workspaces 2") {
		t.Fatalf("restore: %d %s %s", code, out, errOut)
	}
	if _, _, err := startDir(t, fresh, &workspaces.Options{}); err == nil {
		t.Fatal("the restored server started without the keeper key")
	}
	if err := os.WriteFile(keyPath, keyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	restored, _, err := startDir(t, fresh, &workspaces.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range revisions {
		if got, err := restored.Workspaces().Revision(ctx, id); err != nil || got != want {
			t.Fatalf("revision of %s after the restore: %d %v, want %d", id, got, err, want)
		}
	}
	for _, name := range []string{"alice", "bob"} {
		u, err := restored.Accounts().Identity.UserByEmail(ctx, name+"@example.com")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if !strings.HasPrefix(f.body, name) {
				continue
			}
			var got workspaces.OpResult[workspaces.FileContent]
			invokeAs(t, restored, u.StableID, "fileDownload", map[string]any{"workspaceId": f.ws, "fileId": f.id}, &got)
			// Versions of a.txt: the newest is downloaded by default.
			want := f.body
			if strings.HasSuffix(f.body, " one") {
				want = name + " three"
			}
			if b, _ := base64.StdEncoding.DecodeString(got.Result.Content); string(b) != want {
				t.Fatalf("%s's file %s after the restore: %q, want %q", name, f.id, b, want)
			}
		}
	}
}

// --include-key without a passphrase puts the key in clear, and says so
// loudly on stderr.
func TestBackupIncludeKeyInClearWarns(t *testing.T) {
	ctx := context.Background()
	live := t.TempDir()
	s, err := storage.Open(ctx, storage.Config{DataDir: live})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	keyFile, err := os.ReadFile(filepath.Join(live, storage.KeeperKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "backup.tar.gz")
	code, out, errOut := run(t, map[string]string{"ENCLAVE_DATA_DIR": live}, "backup", "--out", archive, "--include-key")
	if code != 0 || !strings.Contains(out, "keeper key IN CLEAR") || !strings.Contains(errOut, "WARNING: the archive holds the keeper key IN CLEAR") {
		t.Fatalf("backup --include-key: %d %s %s", code, out, errOut)
	}
	if got := listArchive(t, archive)[storage.KeeperKeyFile]; !bytes.Equal(got, keyFile) {
		t.Fatalf("key entry: %q", got)
	}
	// An empty passphrase file is refused, before anything is written.
	other := filepath.Join(t.TempDir(), "b.tar.gz")
	if code, _, errOut := run(t, map[string]string{"ENCLAVE_DATA_DIR": live}, "backup", "--out", other, "--passphrase-file", writePassphrase(t, "\n")); code != 2 || !strings.Contains(errOut, "is empty") {
		t.Fatalf("empty passphrase: %d %s", code, errOut)
	}
	if _, err := os.Stat(other); err == nil {
		t.Fatal("an archive was written")
	}
}
