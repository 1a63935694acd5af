package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/workspaces"
)

// signIn signs in on the web shell of base and reports whether it worked.
func signIn(t *testing.T, base, email, password string) bool {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("POST", base+"/login", strings.NewReader(url.Values{"email": {email}, "password": {password}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return false
	}
	req, _ = http.NewRequest("GET", base+"/account", nil)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func serveDir(t *testing.T, dir string) (*enclave.Server, string) {
	t.Helper()
	srv, base, err := startDir(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, base
}

// startDir serves the data directory dir (with workspaces when ws is set).
func startDir(t *testing.T, dir string, ws *workspaces.Options) (*enclave.Server, string, error) {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	base := "http://" + ts.Listener.Addr().String()
	srv, err := enclave.New(context.Background(), enclave.Config{DataDir: dir, BaseURL: base, Logger: quietLog(), Workspaces: ws,
		Accounts: accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}}})
	if err != nil {
		ts.Close()
		return nil, "", err
	}
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(func() { ts.Close(); srv.Close() })
	return srv, base, nil
}

// A backup taken while the server is writing restores into a fresh
// directory where people sign in, their secrets (sealed by the keeper key,
// which the archive holds encrypted with the operator's passphrase)
// decrypt, and blobs are back. A restore without the passphrase, or with
// a wrong one, fails clearly and leaves nothing.
func TestBackupRestoreUnderWrites(t *testing.T) {
	lowScrypt(t)
	ctx := context.Background()
	live := t.TempDir()
	srv, _ := serveDir(t, live)
	const email, password = "alice@example.com", "correct horse battery staple"
	u, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: email, Username: "alice", Password: password, Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	owner := storage.Owner{ID: u.ID, StableID: u.StableID}
	if _, _, err := srv.Secrets().Set(ctx, owner, "apiKey", "", []byte("s3cret-value")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Store().Bucket.WriteAll(ctx, u.StableID+"/notes/one.txt", []byte("a blob"), nil); err != nil {
		t.Fatal(err)
	}

	// Writes go on during the backup.
	stop := make(chan struct{})
	var wrote atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: fmt.Sprintf("w%d@example.com", i), Username: fmt.Sprintf("writer%d", i), Password: password}); err != nil {
				t.Errorf("write during backup: %v", err)
				return
			}
			wrote.Add(1)
		}
	})
	for wrote.Load() < 3 { // let some writes land first
		time.Sleep(time.Millisecond)
	}
	archive := filepath.Join(t.TempDir(), "enclave-backup.tar.gz")
	phrase := writePassphrase(t, "a long operator passphrase\n")
	code, out, errOut := run(t, map[string]string{"ENCLAVE_DATA_DIR": live}, "backup", "--out", archive, "--passphrase-file", phrase)
	close(stop)
	wg.Wait()
	if code != 0 {
		t.Fatalf("backup: %d %s %s", code, out, errOut)
	}
	if !strings.Contains(out, "database true, workspaces 0, blobs true, keeper key encrypted") || strings.Contains(errOut, "WARNING") {
		t.Fatalf("backup output: %s %s", out, errOut)
	}
	if info, err := os.Stat(archive); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("archive: %v %v", info, err)
	}

	fresh := filepath.Join(t.TempDir(), "restored")
	// Without the passphrase, or with another one, nothing is restored.
	if code, _, errOut := run(t, nil, "restore", "--from", archive, "--data-dir", fresh); code != 1 || !strings.Contains(errOut, "keeper key is encrypted") || !strings.Contains(errOut, "--passphrase-file") {
		t.Fatalf("restore without the passphrase: %d %s", code, errOut)
	}
	wrong := writePassphrase(t, "a long operator passphrase!\n")
	if code, _, errOut := run(t, nil, "restore", "--from", archive, "--data-dir", fresh, "--passphrase-file", wrong); code != 1 || !strings.Contains(errOut, "passphrase does not decrypt") || !strings.Contains(errOut, "nothing was restored") {
		t.Fatalf("restore with a wrong passphrase: %d %s", code, errOut)
	}
	if _, err := os.Stat(fresh); err == nil {
		t.Fatal("a refused restore left the directory")
	}
	if code, out, errOut := run(t, nil, "restore", "--from", archive, "--data-dir", fresh, "--passphrase-file", phrase); code != 0 || strings.Contains(errOut, "IMPORTANT") {
		t.Fatalf("restore: %d %s %s", code, out, errOut)
	}
	// Never over existing data.
	if code, _, errOut := run(t, nil, "restore", "--from", archive, "--data-dir", fresh, "--passphrase-file", phrase); code == 0 || !strings.Contains(errOut, "not empty") {
		t.Fatalf("restore over a restored directory: %d %s", code, errOut)
	}
	if info, err := os.Stat(filepath.Join(fresh, storage.KeeperKeyFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("restored keeper key: %v %v", info, err)
	}

	restored, base := serveDir(t, fresh)
	if !signIn(t, base, email, password) {
		t.Fatal("cannot sign in on the restored server")
	}
	if signIn(t, base, email, "wrong password entirely") {
		t.Fatal("signed in with a wrong password")
	}
	got, err := restored.Secrets().Reveal(ctx, owner, "apiKey")
	if err != nil || string(got) != "s3cret-value" {
		t.Fatalf("secret after restore: %q %v", got, err)
	}
	blob, err := restored.Store().Bucket.ReadAll(ctx, u.StableID+"/notes/one.txt")
	if err != nil || string(blob) != "a blob" {
		t.Fatalf("blob after restore: %q %v", blob, err)
	}
	n, err := restored.Store().DB.NewSelect().Table("users").Count(ctx)
	if err != nil || n < 4 {
		t.Fatalf("restored users: %d %v (wrote %d during the backup)", n, err, wrote.Load())
	}
}

// PostgreSQL is backed up with pg_dump: the command says so and prints it.
func TestBackupPostgresPrintsPgDump(t *testing.T) {
	code, out, _ := run(t, map[string]string{"ENCLAVE_DATA_DIR": t.TempDir(), "ENCLAVE_DATABASE_URL": "postgres://enclave@db.internal:5432/enclave"}, "backup", "--out", "x.tar.gz")
	if code != 1 || !strings.Contains(out, "pg_dump --format=custom") || !strings.Contains(out, "postgres://enclave@db.internal:5432/enclave") {
		t.Fatalf("backup on PostgreSQL: %d %s", code, out)
	}
}

// The printed pg_dump command never holds the database password (the URL
// may come from ENCLAVE_DATABASE_URL_FILE precisely to keep it out of
// terminals, logs and process lists).
func TestBackupPostgresHidesPassword(t *testing.T) {
	code, out, errOut := run(t, map[string]string{"ENCLAVE_DATA_DIR": t.TempDir(), "ENCLAVE_DATABASE_URL": "postgres://enclave:s3cr%40t-pw@db.internal:5432/enclave?sslmode=require"}, "backup", "--out", "x.tar.gz")
	if code != 1 || !strings.Contains(out, "pg_dump --format=custom") || !strings.Contains(out, "postgres://enclave@db.internal:5432/enclave?sslmode=require") || !strings.Contains(out, "PGPASSWORD") {
		t.Fatalf("backup on PostgreSQL: %d %s", code, out)
	}
	for _, leak := range []string{"s3cr", "%40t-pw", "@t-pw"} {
		if strings.Contains(out+errOut, leak) {
			t.Fatalf("the output holds the password: %s %s", out, errOut)
		}
	}
}
