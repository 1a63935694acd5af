package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
)

// An operator command (enclave user suspend, admin revoke, user delete)
// runs in a process of its own on the same database (SQLite, or
// PostgreSQL with --bus-url local), with an
// in-process bus that reaches nobody. The running server must still stop
// honouring what it cached, within seconds, not after --caller-cache-ttl;
// also when the command's process caches nothing itself.
func TestCallerCacheSeesOtherProcess(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		ttl    time.Duration // the operator process's CallerCacheTTL
		change func(op *enclavetest.Server, u *enclavetest.User) error
	}{
		{"suspend", 0, func(op *enclavetest.Server, u *enclavetest.User) error {
			_, err := op.Accounts().Lifecycle.Suspend(ctx, u.ID)
			return err
		}},
		{"role revoked, operator without cache", -1, func(op *enclavetest.Server, u *enclavetest.User) error {
			_, err := op.Accounts().Roles.RemoveRole(ctx, u.ID, capabilities.RoleUser)
			return err
		}},
		{"delete", 0, func(op *enclavetest.Server, u *enclavetest.User) error {
			_, err := op.Lifecycle().Delete(ctx, storage.Owner{ID: u.ID, StableID: u.StableID})
			return err
		}},
	} {
		for _, d := range enclavetest.Dialects() {
			t.Run(string(d)+"/"+tc.name, func(t *testing.T) {
				testOtherProcess(t, d, tc.ttl, tc.change)
			})
		}
	}
}

func testOtherProcess(t *testing.T, d storage.Dialect, ttl time.Duration, change func(op *enclavetest.Server, u *enclavetest.User) error) {
	// On PostgreSQL the default bus would carry it: use an
	// in-process one, as --bus-url local does.
	a := startCached(t, d, enclave.Config{CallerCacheTTL: time.Hour, BusURL: "local"})
	if _, ok := a.Bus().(*cluster.Local); !ok {
		t.Fatalf("bus %T, want the in-process bus", a.Bus())
	}
	op := a.Replica(t, func(c *enclave.Config) { c.CallerCacheTTL = ttl })
	u := a.CreateUser(t, "opal")
	c := u.MCP(t)
	if ok, err := callOK(c); !ok || err != nil {
		t.Fatalf("first call: %v %v", ok, err)
	}
	before := a.OAuth().BearerChecks()
	if ok, err := callOK(c); !ok || err != nil || a.OAuth().BearerChecks() != before {
		t.Fatalf("second call: %v %v, not served from the cache", ok, err)
	}
	if err := change(op, u); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		ok, _ := callOK(c)
		if !ok {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the server still honoured the token 5 s after the operator's change in another process")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("seen after %v", time.Since(start))
}

// The retention purge claims an unverified sign-up by marking it deleting
// (ClaimUnverified): with AllowUnverifiedEmail such an account holds
// tokens, and the claim must drop what the cache holds for it at once.
func TestCallerCacheDroppedByUnverifiedClaim(t *testing.T) {
	ctx := context.Background()
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			s := startCached(t, d, enclave.Config{OAuth: oauth.Options{AllowUnverifiedEmail: true}})
			assertChangeDropsCache(t, s, "claimed", func(u *enclavetest.User) error {
				if _, err := s.Store().DB.NewUpdate().Table("users").Set("self_signup = TRUE").
					Set("email_verified_at = NULL").Set("first_verified_at = NULL").
					Set("created_at = ?", time.Now().UTC().Add(-8*24*time.Hour)).
					Where("id = ?", u.ID).Exec(ctx); err != nil {
					return err
				}
				claimed, err := s.Accounts().Lifecycle.ClaimUnverified(ctx, u.ID, time.Now().Add(-accounts.UnverifiedWindow))
				if err == nil && !claimed {
					err = errors.New("not claimed")
				}
				return err
			})
		})
	}
}
