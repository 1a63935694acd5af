package enclave_test

// The root's examples document the assembled server's public API; the
// whole-server suites live in e2e/. These helpers are the examples' own.

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fastArgon makes password hashing cheap in examples.
var fastArgon = accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}}

// assignOrGrant gives a role: admin through the operator's grant, any other
// role through AssignRole.
func assignOrGrant(svc *accounts.Service, ctx context.Context, userID int64, role string) (bool, error) {
	if role == capabilities.RoleAdmin {
		return svc.Roles.GrantAdminAsOperator(ctx, userID)
	}
	return svc.Roles.AssignRole(ctx, userID, role)
}

// The smallest program: every store on its embedded default under DataDir.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, _ := os.MkdirTemp("", "enclave-example-")
	defer os.RemoveAll(dir)
	srv, err := enclave.New(ctx, enclave.Config{DataDir: dir, Addr: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	io.Copy(os.Stdout, rec.Body)
	// Output: {"status":"ok"}
}
