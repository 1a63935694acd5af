package cli

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// runIn runs a command with stdin against the database of env.
func runIn(t *testing.T, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb syncBuffer
	code = Main(context.Background(), args, &Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
	return code, out.String(), errb.String()
}

// accountEnvs returns the environments to run the account commands in: an
// SQLite data dir, and a PostgreSQL schema when one is configured.
func accountEnvs(t *testing.T) map[storage.Dialect]map[string]string {
	envs := map[storage.Dialect]map[string]string{}
	for _, d := range storagetest.Dialects() {
		env := map[string]string{"ENCLAVE_DATA_DIR": t.TempDir(), "ENCLAVE_BASE_URL": "https://enclave.example"}
		if d == storage.Postgres {
			env["ENCLAVE_DATABASE_URL"] = storagetest.PostgresSchemaURL(t)
		}
		envs[d] = env
	}
	return envs
}

func TestAccountCommands(t *testing.T) {
	for d, env := range accountEnvs(t) {
		t.Run(string(d), func(t *testing.T) {
			expect := func(wantCode int, wantOut string, stdin string, args ...string) string {
				t.Helper()
				code, out, errOut := runIn(t, env, stdin, args...)
				if code != wantCode || !strings.Contains(out+errOut, wantOut) {
					t.Fatalf("enclave %s: code %d, stdout %q, stderr %q; want code %d and %q", strings.Join(args, " "), code, out, errOut, wantCode, wantOut)
				}
				return out
			}
			expect(0, "created ann@example.com (ann) with the role user", "ann's long passphrase\n",
				"user create", "--email", "Ann@Example.com", "--username", "ann", "--password-stdin", "--verified")
			out := expect(0, "password-setup link", "", "user create", "--email", "bob@example.com", "--username", "bob")
			if !regexp.MustCompile(`https://enclave\.example/password/setup\?token=[A-Za-z0-9_-]{43}\n`).MatchString(out) {
				t.Fatalf("no setup link in %q", out)
			}
			expect(1, "This username is reserved.", "", "user create", "--email", "x@example.com", "--username", "admin")
			expect(1, "already exists", "", "user create", "--email", "ann@example.com", "--username", "ann2")
			expect(2, "usage", "", "user create", "--email", "y@example.com")
			expect(2, "standard input is empty", "", "user create", "--email", "y@example.com", "--username", "yy", "--password-stdin")

			expect(0, "granted admin to ann@example.com (ann)", "", "admin grant", "ann@example.com")
			expect(0, "already has admin; nothing changed", "", "admin grant", "ANN@example.com")
			expect(1, "refused: ann@example.com (ann) is the last admin", "", "admin revoke", "ann@example.com")
			expect(0, "bob@example.com (bob) did not have admin; nothing changed", "", "admin revoke", "bob@example.com")
			expect(0, "granted admin", "", "admin grant", "bob@example.com")
			expect(0, "revoked admin from ann@example.com (ann)", "", "admin revoke", "ann@example.com")
			expect(1, "no account has the email nobody@example.com", "", "admin grant", "nobody@example.com")
			expect(2, "usage", "", "admin grant")
			expect(2, "usage", "", "admin revoke", "a@example.com", "b@example.com")

			expect(0, "ann@example.com (ann) is now suspended", "", "user suspend", "ann@example.com")
			expect(0, "is already suspended; nothing changed", "", "user suspend", "ann@example.com")

			// Check the effects through the library, on the same database.
			s, err := storage.Open(context.Background(), storage.Config{DataDir: env["ENCLAVE_DATA_DIR"], DatabaseURL: env["ENCLAVE_DATABASE_URL"]})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			svc, err := accounts.New(context.Background(), s, accounts.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Credentials.Login(context.Background(), "ann@example.com", "ann's long passphrase"); !errors.Is(err, accounts.ErrSuspended) {
				t.Fatalf("login of the suspended account: %v", err)
			}
			expect(0, "ann@example.com (ann) is now no longer suspended", "", "user unsuspend", "ann@example.com")
			ann, err := svc.Credentials.Login(context.Background(), "ann@example.com", "ann's long passphrase")
			if err != nil || !ann.EmailVerified() {
				t.Fatalf("login with the --password-stdin password: %+v, %v", ann, err)
			}
			g, err := svc.Roles.RolesAndPermissions(context.Background(), ann.ID)
			if err != nil || g.HasRole("admin") || !g.HasRole("user") {
				t.Fatalf("ann's roles %v, %v", g.Roles, err)
			}
		})
	}
}
