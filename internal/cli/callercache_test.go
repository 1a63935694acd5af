package cli

import (
	"slices"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
)

// "enclave admin revoke" and "enclave user suspend" run in a process of
// their own against a running server's SQLite database: the server, which
// has the account's caller cached (one hour here), stops honouring the
// revoked role and the suspended account within seconds.
func TestOperatorCommandsReachRunningServersCache(t *testing.T) {
	srv := enclavetest.Start(t, enclavetest.Options{Dialect: storage.SQLite, Config: enclave.Config{CallerCacheTTL: time.Hour}})
	cfg := srv.Config()
	env := map[string]string{"ENCLAVE_DATA_DIR": cfg.DataDir, "ENCLAVE_BASE_URL": cfg.BaseURL}
	if cfg.DatabaseURL != "" {
		env["ENCLAVE_DATABASE_URL"] = cfg.DatabaseURL
	}
	srv.CreateUser(t, "keeper", capabilities.RoleAdmin) // not the last admin
	u := srv.CreateUser(t, "opal", capabilities.RoleAdmin)
	c := u.MCP(t)
	isAdmin := func() (bool, error) {
		tools, err := c.Tools()
		return slices.Contains(tools, "adminFeatureSet"), err
	}
	if ok, err := isAdmin(); !ok || err != nil {
		t.Fatalf("admin before: %v %v", ok, err)
	}
	within := func(what string, cond func() bool) {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s: still honoured 5 s after the command", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%s seen after %v", what, time.Since(start))
	}
	if code, out, errOut := runIn(t, env, "", "admin", "revoke", u.Email); code != 0 {
		t.Fatalf("admin revoke: %d %s %s", code, out, errOut)
	}
	within("admin revoke", func() bool { ok, err := isAdmin(); return err == nil && !ok })
	if code, out, errOut := runIn(t, env, "", "user", "suspend", u.Email); code != 0 {
		t.Fatalf("user suspend: %d %s %s", code, out, errOut)
	}
	within("user suspend", func() bool { _, err := c.Tools(); return err != nil })
}
