package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
)

// seed creates accounts in the data dir through the library, with a secret
// each, and returns the data dir.
func seed(t *testing.T, names ...string) string {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	srv, err := enclave.New(ctx, enclave.Config{DataDir: dir, Logger: quietLog(), Accounts: accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, n := range names {
		u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: n + "@example.com", Username: n, Password: "a long password for " + n})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := srv.Secrets().Set(ctx, storage.Owner{ID: u.ID, StableID: u.StableID}, "token", "", []byte("value-of-"+n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestExportCommand(t *testing.T) {
	dir := seed(t, "alice", "bob")
	out := filepath.Join(t.TempDir(), "alice.json")
	code, stdout, stderr := run(t, nil, "export", "--data-dir", dir, "--user", "Alice@Example.com", "--out", out)
	if code != 0 || !strings.Contains(stdout, "exported alice@example.com") {
		t.Fatalf("export: %d %q %q", code, stdout, stderr)
	}
	info, err := os.Stat(out)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("export file %v, %v; want mode 0600", info, err)
	}
	raw, _ := os.ReadFile(out)
	var doc struct {
		Manifest struct {
			SchemaVersion int `json:"schemaVersion"`
			Security      struct {
				SecretValuesExported bool `json:"secretValuesExported"`
			} `json:"security"`
		} `json:"manifest"`
		Sections []json.RawMessage `json:"sections"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("export is not JSON: %v", err)
	}
	if doc.Manifest.SchemaVersion != 1 || doc.Manifest.Security.SecretValuesExported || len(doc.Sections) == 0 {
		t.Fatalf("export %s", raw)
	}
	for _, leak := range []string{"value-of-", "bob", "argon2id"} {
		if strings.Contains(string(raw), leak) {
			t.Errorf("alice's export contains %q", leak)
		}
	}
	if code, _, stderr := run(t, nil, "export", "--data-dir", dir, "--user", "nobody@example.com", "--out", out); code != 1 || !strings.Contains(stderr, "no account has the email") {
		t.Fatalf("unknown user: %d %q", code, stderr)
	}
	if code, _, _ := run(t, nil, "export", "--data-dir", dir, "--user", "alice@example.com"); code != 2 {
		t.Fatalf("missing --out: exit %d, want 2", code)
	}
}

func TestUserDeleteCommand(t *testing.T) {
	dir := seed(t, "alice", "bob")
	ctx := context.Background()
	srv, err := enclave.New(ctx, enclave.Config{DataDir: dir, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	bob, _ := srv.Accounts().Identity.UserByEmail(ctx, "bob@example.com")
	if _, err := srv.Accounts().Roles.GrantAdminAsOperator(ctx, bob.ID); err != nil {
		t.Fatal(err)
	}
	srv.Close()

	code, stdout, stderr := run(t, nil, "user", "delete", "--data-dir", dir, "alice@example.com")
	if code != 0 || !strings.Contains(stdout, "deleted alice@example.com") || !strings.Contains(stdout, "sql:user_secrets") {
		t.Fatalf("delete: %d %q %q", code, stdout, stderr)
	}
	code, _, stderr = run(t, nil, "user", "delete", "--data-dir", dir, "bob@example.com")
	if code != 1 || !strings.Contains(stderr, "last admin") {
		t.Fatalf("deleting the last admin: %d %q", code, stderr)
	}
	code, _, stderr = run(t, nil, "user", "delete", "--data-dir", dir, "alice@example.com")
	if code != 1 || !strings.Contains(stderr, "no account has the email") {
		t.Fatalf("deleting a deleted account: %d %q", code, stderr)
	}
}

func TestKeysRotateCommand(t *testing.T) {
	dir := seed(t, "alice", "bob")
	code, stdout, stderr := run(t, nil, "keys", "rotate", "--data-dir", dir)
	if code != 0 || !strings.Contains(stdout, "2 secrets re-encrypted, 0 failed") || !strings.Contains(stdout, "new ID token signing key") {
		t.Fatalf("keys rotate: %d %q %q", code, stdout, stderr)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The operator's changes go through the registry's choke point as operator
// capability calls, and it audits each: a capability row naming the
// capability, the operator as the actor, and the keyed hash of the account
// acted on (never an email).
func TestOperatorActionsAreAudited(t *testing.T) {
	dir := seed(t, "alice", "bob")
	ctx := context.Background()
	stable := map[string]string{}
	srv, err := enclave.New(ctx, enclave.Config{DataDir: dir, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"alice", "bob"} {
		u, err := srv.Accounts().Identity.UserByEmail(ctx, n+"@example.com")
		if err != nil {
			t.Fatal(err)
		}
		stable[n] = u.StableID
	}
	srv.Close()
	for _, args := range [][]string{
		{"admin", "grant", "--data-dir", dir, "alice@example.com"},
		{"admin", "grant", "--data-dir", dir, "alice@example.com"}, // nothing changes: still a call
		{"user", "suspend", "--data-dir", dir, "bob@example.com"},
		{"user", "delete", "--data-dir", dir, "bob@example.com"},
	} {
		if code, _, stderr := run(t, nil, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
	// A refused action is audited too, as a failure with its code.
	if code, _, _ := run(t, nil, "admin", "revoke", "--data-dir", dir, "alice@example.com"); code != 1 {
		t.Fatalf("revoking the last admin: exit %d", code)
	}
	// So is one whose arguments the choke point refuses before any
	// handler (a NUL in the email), naming no account.
	if code, _, stderr := run(t, nil, "admin", "grant", "--data-dir", dir, "alice\x00@example.com"); code != 1 || !strings.Contains(stderr, "U+0000 (NUL)") {
		t.Fatalf("granting admin to an email with a NUL: exit %d: %s", code, stderr)
	}
	srv, err = enclave.New(ctx, enclave.Config{DataDir: dir, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	page, err := srv.Audit().Query(ctx, audit.Filter{Category: audit.CategoryCapability}, storage.PageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ action, result, reason, user string }
	var got []row
	for _, e := range page.Items {
		got = append(got, row{e.Action, e.Result, e.Reason, e.UserHash})
	}
	alice, bob := srv.Audit().HashUser(stable["alice"]), srv.Audit().HashUser(stable["bob"])
	want := []row{ // newest first
		{"tool:operatorAdminGrant", audit.ResultFailure, "operator: invalid_input", ""},
		{"tool:operatorAdminRevoke", audit.ResultFailure, "operator: conflict", alice},
		{"tool:operatorUserDelete", audit.ResultSuccess, audit.ActorOperator, bob},
		{"tool:operatorUserSuspend", audit.ResultSuccess, audit.ActorOperator, bob},
		{"tool:operatorAdminGrant", audit.ResultSuccess, audit.ActorOperator, alice},
		{"tool:operatorAdminGrant", audit.ResultSuccess, audit.ActorOperator, alice},
	}
	if len(got) != len(want) {
		t.Fatalf("audited %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if alice == "" || bob == "" || alice == bob {
		t.Fatalf("user hashes %q and %q", alice, bob)
	}
	// The command line writes no account rows of its own any more.
	acc, err := srv.Audit().Query(ctx, audit.Filter{Category: audit.CategoryAccount}, storage.PageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range acc.Items {
		if strings.HasPrefix(e.Action, "operator") {
			t.Errorf("an account row of the command line's own: %+v", e)
		}
	}
}
