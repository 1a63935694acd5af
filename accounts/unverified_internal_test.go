package accounts

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// An operator granting admin to an unverified sign-up while the retention
// program claims it: the two are serialized. A claim that starts while the
// grant's transaction is open waits for it, sees the admin role and spares
// the account (on PostgreSQL it used to read a snapshot from before the
// grant, and deleted a fresh admin).
func TestClaimUnverifiedWaitsForAnAdminGrant(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, err := New(ctx, s, Config{Argon2: Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		u, err := svc.Identity.Signup(ctx, SignupInput{Email: "late@example.com", Username: "late", Password: "correct horse battery staple"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB.NewUpdate().Table("users").Set("created_at = ?", time.Now().UTC().Add(-8*24*time.Hour)).Where("id = ?", u.ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		type claim struct {
			ok  bool
			err error
		}
		got := make(chan claim, 1)
		testHookRoleInserted = func(id int64) {
			if id != u.ID {
				return
			}
			go func() {
				ok, err := svc.Lifecycle.ClaimUnverified(ctx, u.ID, time.Now().UTC().Add(-UnverifiedWindow))
				got <- claim{ok, err}
			}()
			time.Sleep(300 * time.Millisecond) // the claim runs while the grant is open
		}
		defer func() { testHookRoleInserted = nil }()
		if _, err := svc.Roles.GrantAdminAsOperator(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		c := <-got
		if c.err != nil {
			t.Fatal(c.err)
		}
		after, err := svc.Identity.UserByID(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		if c.ok || after.DeletingAt != nil {
			t.Fatalf("the purge claimed an account being made admin (claimed %v, deleting_at %v)", c.ok, after.DeletingAt)
		}
		if !hasRole(t, svc, after, capabilities.RoleAdmin) {
			t.Fatal("the grant did not land")
		}
	})
}

func hasRole(t *testing.T, svc *Service, u User, role string) bool {
	t.Helper()
	c, err := svc.LoadCaller(context.Background(), u.StableID)
	if err != nil {
		t.Fatal(err)
	}
	return c.HasRole(role)
}
