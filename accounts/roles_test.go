package accounts_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestAssignAndRemoveRoles(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		a, b := signup(t, svc, "amy"), signup(t, svc, "ben")

		if added, err := svc.Roles.GrantAdminAsOperator(ctx, a.ID); err != nil || !added {
			t.Fatalf("assign = %v, %v", added, err)
		}
		if added, err := svc.Roles.GrantAdminAsOperator(ctx, a.ID); err != nil || added {
			t.Fatalf("second assign = %v, %v, want no change", added, err)
		}
		if _, err := svc.Roles.AssignRole(ctx, a.ID, "superuser"); !errors.Is(err, accounts.ErrUnknownRole) {
			t.Fatalf("unknown role = %v", err)
		}
		if _, err := svc.Roles.GrantAdminAsOperator(ctx, 424242); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("unknown user = %v", err)
		}
		g, err := svc.Roles.RolesAndPermissions(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !g.HasRole(capabilities.RoleAdmin) || !g.HasRole(capabilities.RoleUser) || len(g.Permissions) != len(capabilities.AllPermissions()) {
			t.Fatalf("admin grants %+v", g)
		}
		if ok, err := svc.Roles.HasAdmin(ctx); err != nil || !ok {
			t.Fatalf("has admin = %v, %v", ok, err)
		}

		// Did not have the role: a no-op, not a conflict.
		if removed, err := svc.Roles.RevokeAdminAsOperator(ctx, b.ID); err != nil || removed {
			t.Fatalf("remove absent admin = %v, %v, want false, nil", removed, err)
		}
		// The last admin: a conflict.
		if removed, err := svc.Roles.RevokeAdminAsOperator(ctx, a.ID); !errors.Is(err, accounts.ErrLastAdmin) || removed {
			t.Fatalf("remove last admin = %v, %v, want ErrLastAdmin", removed, err)
		}
		if _, err := svc.Roles.GrantAdminAsOperator(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		if removed, err := svc.Roles.RevokeAdminAsOperator(ctx, a.ID); err != nil || !removed {
			t.Fatalf("remove admin with another admin left = %v, %v", removed, err)
		}
		g, _ = svc.Roles.RolesAndPermissions(ctx, a.ID)
		if g.HasRole(capabilities.RoleAdmin) || g.Has(capabilities.ReadUserAny) {
			t.Fatalf("revoked admin still has %+v", g)
		}
		// Other roles have no last-holder rule.
		if removed, err := svc.Roles.RemoveRole(ctx, a.ID, capabilities.RoleUser); err != nil || !removed {
			t.Fatalf("remove user role = %v, %v", removed, err)
		}
		if g, err := svc.Roles.RolesAndPermissions(ctx, a.ID); err != nil || len(g.Roles) != 0 || len(g.Permissions) != 0 {
			t.Fatalf("grants without roles = %+v, %v", g, err)
		}
	})
}

// Concurrent removals of admin from every admin leave exactly one: each
// removal is decided inside its DELETE, never on a stale count.
func TestLastAdminUnderConcurrency(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		const admins = 8
		for round := range 3 {
			ids := make([]int64, admins)
			for i := range admins {
				u := signup(t, svc, fmt.Sprintf("adm-%d-%d", round, i))
				if _, err := svc.Roles.GrantAdminAsOperator(ctx, u.ID); err != nil {
					t.Fatal(err)
				}
				ids[i] = u.ID
			}
			errs := make([]error, admins)
			var start, wg sync.WaitGroup
			start.Add(1)
			for i, id := range ids {
				wg.Go(func() {
					start.Wait()
					_, errs[i] = svc.Roles.RevokeAdminAsOperator(ctx, id)
				})
			}
			start.Done()
			wg.Wait()
			refused := 0
			for _, err := range errs {
				switch {
				case errors.Is(err, accounts.ErrLastAdmin):
					refused++
				case err != nil:
					t.Errorf("remove: %v", err)
				}
			}
			left, err := s.DB.NewSelect().Table("user_roles").Where("role_name = ?", capabilities.RoleAdmin).Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if left != 1 || refused != 1 {
				t.Fatalf("round %d: %d admins left, %d removals refused; want 1 and 1", round, left, refused)
			}
			// Clear the survivor for the next round (bypassing the rule).
			if _, err := s.DB.ExecContext(ctx, "DELETE FROM user_roles WHERE role_name = 'admin'"); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestLoadCaller(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		u := signup(t, svc, "quinn")
		c, err := svc.LoadCaller(ctx, u.StableID)
		if err != nil {
			t.Fatal(err)
		}
		if c.UserID != u.StableID || c.Username != "quinn" || c.State != capabilities.AccountActive ||
			!c.HasRole(capabilities.RoleUser) || !c.HasPermission(capabilities.UpdateUserOwn) || c.HasPermission(capabilities.UpdateUserAny) {
			t.Fatalf("caller %+v", c)
		}
		if _, err := svc.LoadCaller(ctx, accounts.StableIDForEmail("nobody@example.com")); !errors.Is(err, capabilities.ErrUnknownUser) {
			t.Fatalf("unknown = %v", err)
		}
		if _, err := svc.Lifecycle.Suspend(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		if c, _ := svc.LoadCaller(ctx, u.StableID); c.State != capabilities.AccountSuspended {
			t.Fatalf("suspended caller state %v", c.State)
		}
		if _, err := svc.Lifecycle.MarkDeleting(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		// Suspension wins over deletion (as for the session cookie).
		if c, _ := svc.LoadCaller(ctx, u.StableID); c.State != capabilities.AccountSuspended {
			t.Fatalf("suspended, deleting caller state %v", c.State)
		}
		if _, err := svc.Lifecycle.Unsuspend(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		if c, _ := svc.LoadCaller(ctx, u.StableID); c.State != capabilities.AccountDeleting {
			t.Fatalf("deleting caller state %v", c.State)
		}
		// Roles that cannot be loaded leave the caller with none.
		if _, err := s.DB.ExecContext(ctx, "DROP TABLE role_permissions"); err != nil {
			t.Fatal(err)
		}
		c, err = svc.LoadCaller(ctx, u.StableID)
		if err != nil || len(c.Roles) != 0 || len(c.Permissions) != 0 {
			t.Fatalf("caller with failing role lookup = %+v, %v; want no roles", c, err)
		}
	})
}

// Suspending (or marking deleting) the last active admin is refused, like
// removing its role; a suspended admin does not count as an active one.
func TestSuspendingTheLastActiveAdmin(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		a, b, c := signup(t, svc, "ada"), signup(t, svc, "bea"), signup(t, svc, "cid")
		if _, err := svc.Roles.GrantAdminAsOperator(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if changed, err := svc.Lifecycle.Suspend(ctx, a.ID); !errors.Is(err, accounts.ErrLastAdmin) || changed {
			t.Fatalf("suspend the only admin = %v, %v, want ErrLastAdmin", changed, err)
		}
		if u, _ := svc.Identity.UserByID(ctx, a.ID); u.SuspendedAt != nil {
			t.Fatal("the refused suspension suspended the admin")
		}
		if _, err := svc.Lifecycle.MarkDeleting(ctx, a.ID); !errors.Is(err, accounts.ErrLastAdmin) {
			t.Fatalf("mark the only admin deleting: %v, want ErrLastAdmin", err)
		}
		// Other accounts are suspended freely.
		if changed, err := svc.Lifecycle.Suspend(ctx, c.ID); err != nil || !changed {
			t.Fatalf("suspend a user = %v, %v", changed, err)
		}
		if _, err := svc.Roles.GrantAdminAsOperator(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		if changed, err := svc.Lifecycle.Suspend(ctx, a.ID); err != nil || !changed {
			t.Fatalf("suspend an admin with another active = %v, %v", changed, err)
		}
		if changed, err := svc.Lifecycle.Suspend(ctx, a.ID); err != nil || changed {
			t.Fatalf("suspend again = %v, %v, want no change", changed, err)
		}
		// a is suspended: b is the last active admin, for suspension and
		// for removal alike.
		if _, err := svc.Lifecycle.Suspend(ctx, b.ID); !errors.Is(err, accounts.ErrLastAdmin) {
			t.Fatalf("suspend the last active admin: %v, want ErrLastAdmin", err)
		}
		if _, err := svc.Roles.RevokeAdminAsOperator(ctx, b.ID); !errors.Is(err, accounts.ErrLastAdmin) {
			t.Fatalf("remove the last active admin: %v, want ErrLastAdmin", err)
		}
		if _, err := svc.Lifecycle.Unsuspend(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if changed, err := svc.Lifecycle.Suspend(ctx, b.ID); err != nil || !changed {
			t.Fatalf("suspend b with a active again = %v, %v", changed, err)
		}
		if _, err := svc.Lifecycle.Suspend(ctx, 424242); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("suspend unknown: %v", err)
		}
	})
}

// Concurrent suspensions of two admins (and a suspension racing a removal)
// leave one active admin: each is decided inside its UPDATE or DELETE.
func TestSuspendLastAdminUnderConcurrency(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		for round := range 6 {
			a, b := signup(t, svc, fmt.Sprintf("sa-%d", round)), signup(t, svc, fmt.Sprintf("sb-%d", round))
			for _, u := range []accounts.User{a, b} {
				if _, err := svc.Roles.GrantAdminAsOperator(ctx, u.ID); err != nil {
					t.Fatal(err)
				}
			}
			second := func() error { _, err := svc.Lifecycle.Suspend(ctx, b.ID); return err }
			if round%2 == 1 {
				second = func() error { _, err := svc.Roles.RevokeAdminAsOperator(ctx, b.ID); return err }
			}
			errs := make([]error, 2)
			var start, wg sync.WaitGroup
			start.Add(1)
			wg.Go(func() { start.Wait(); _, errs[0] = svc.Lifecycle.Suspend(ctx, a.ID) })
			wg.Go(func() { start.Wait(); errs[1] = second() })
			start.Done()
			wg.Wait()
			refused := 0
			for _, err := range errs {
				switch {
				case errors.Is(err, accounts.ErrLastAdmin):
					refused++
				case err != nil:
					t.Fatalf("round %d: %v", round, err)
				}
			}
			active, err := s.DB.NewSelect().TableExpr("user_roles AS ur").Join("JOIN users AS u ON u.id = ur.user_id").
				Where("ur.role_name = ? AND u.suspended_at IS NULL AND u.deleting_at IS NULL", capabilities.RoleAdmin).Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if active != 1 || refused != 1 {
				t.Fatalf("round %d: %d active admins, %d refused; want 1 and 1", round, active, refused)
			}
			// Clear this round's admins (bypassing the rule).
			if _, err := s.DB.ExecContext(ctx, "DELETE FROM user_roles WHERE role_name = 'admin'"); err != nil {
				t.Fatal(err)
			}
		}
	})
}
