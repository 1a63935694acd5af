package backup

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A format-2 archive is checked against its manifest's file list: a
// workspace file or key entry the list leaves out, one that differs from
// its size and hash, one listed but missing, and names outside the layout
// are refused, leaving the directory empty.
func TestRestoreChecksTheFileList(t *testing.T) {
	const ws = "workspaces/w_aaaaaaaaaaaaaaaaaaaaaaaaaa.db"
	db, wsBody := []byte("db"), []byte("workspace")
	list := []File{fileOf(DatabaseName, db), fileOf(ws, wsBody)}
	good := Manifest{Format: Format, Version: "test", Database: true, Workspaces: 1, Files: list}
	tampered := fileOf(ws, []byte("workspacf"))
	withKey := good
	withKey.Keeper, withKey.KeeperEncrypted = true, true
	withKey.Files = append([]File{fileOf(EncryptedKeeperName, []byte("age"))}, list...)
	plainKeyListed := good
	plainKeyListed.Files = append([]File{fileOf(KeeperName, []byte("key"))}, list...)
	badName := good
	badName.Files = append([]File{fileOf("workspaces/../enclave.db", []byte("x"))}, list...)
	cases := map[string][]entry{
		"unlisted workspace":  {manifest(t, good), {name: DatabaseName, body: "db"}, {name: ws, body: "workspace"}, {name: "workspaces/w_bbbbbbbbbbbbbbbbbbbbbbbbbb.db", body: "x"}},
		"changed workspace":   {manifest(t, good), {name: DatabaseName, body: "db"}, {name: ws, body: "workspacf"}},
		"changed size":        {manifest(t, good), {name: DatabaseName, body: "db"}, {name: ws, body: "workspace!"}},
		"changed database":    {manifest(t, good), {name: DatabaseName, body: "dB"}, {name: ws, body: "workspace"}},
		"missing workspace":   {manifest(t, good), {name: DatabaseName, body: "db"}},
		"bad workspace name":  {manifest(t, good), {name: DatabaseName, body: "db"}, {name: ws, body: "workspace"}, {name: "workspaces/evil.db", body: "x"}},
		"template":            {manifest(t, good), {name: DatabaseName, body: "db"}, {name: ws, body: "workspace"}, {name: "workspaces/.template-1.db", body: "x"}},
		"unlisted clear key":  {manifest(t, good), {name: KeeperName, body: "key"}, {name: DatabaseName, body: "db"}, {name: ws, body: "workspace"}},
		"clear key not kept":  {manifest(t, plainKeyListed), {name: KeeperName, body: "key"}, {name: DatabaseName, body: "db"}, {name: ws, body: "workspace"}},
		"bad name in list":    {manifest(t, badName), {name: DatabaseName, body: "db"}, {name: ws, body: "workspace"}},
		"key needs a phrase":  {manifest(t, withKey), {name: EncryptedKeeperName, body: "age"}, {name: DatabaseName, body: "db"}, {name: ws, body: "workspace"}},
		"listed hash differs": {manifest(t, Manifest{Format: Format, Database: true, Files: []File{fileOf(DatabaseName, db), tampered}}), {name: DatabaseName, body: "db"}, {name: ws, body: "workspace"}},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			_, err := Restore(bytes.NewReader(archive(t, entries...)), dir, RestoreOptions{})
			if err == nil {
				t.Fatal("restored")
			}
			if name == "key needs a phrase" && !errors.Is(err, ErrPassphraseRequired) {
				t.Fatalf("error %v, want ErrPassphraseRequired", err)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Fatalf("a refused archive left %v", names(left))
			}
		})
	}

	dir := filepath.Join(t.TempDir(), "data")
	if _, err := Restore(bytes.NewReader(archive(t, manifest(t, good), entry{name: DatabaseName, body: "db"}, entry{name: ws, body: "workspace"}, entry{name: "blobs/x", body: "b"})), dir, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(ws))); err != nil || string(b) != "workspace" {
		t.Fatalf("workspace file: %q %v", b, err)
	}
}
