package accounts_test

import (
	"context"
	"slices"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The seeded permissions and role attachments match the Go vocabulary:
// every permission of AllPermissions with its parts, role user with every
// :own permission, role admin with all of them, and nothing else.
func TestSeededRBACMatchesVocabulary(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		var perms []struct {
			Name   string `bun:"name"`
			Action string `bun:"action"`
			Entity string `bun:"entity"`
			Access string `bun:"access"`
		}
		if err := s.Reader.NewSelect().Table("permissions").Column("name", "action", "entity", "access").Scan(ctx, &perms); err != nil {
			t.Fatal(err)
		}
		var seeded []capabilities.Permission
		for _, p := range perms {
			want := capabilities.NewPermission(capabilities.Action(p.Action), capabilities.Entity(p.Entity), capabilities.Access(p.Access))
			if string(want) != p.Name {
				t.Errorf("permission row %q has parts %s/%s/%s", p.Name, p.Action, p.Entity, p.Access)
			}
			if _, err := capabilities.ParsePermission(p.Name); err != nil {
				t.Errorf("seeded permission %q: %v", p.Name, err)
			}
			seeded = append(seeded, capabilities.Permission(p.Name))
		}
		if want := sorted(capabilities.AllPermissions()); !slices.Equal(sorted(seeded), want) {
			t.Errorf("seeded permissions %v\nwant AllPermissions() %v", sorted(seeded), want)
		}

		var roles []string
		if err := s.Reader.NewSelect().Table("roles").Column("name").Order("name").Scan(ctx, &roles); err != nil {
			t.Fatal(err)
		}
		if want := []string{capabilities.RoleAdmin, capabilities.RoleUser}; !slices.Equal(roles, want) {
			t.Errorf("seeded roles %v, want %v", roles, want)
		}
		vocab, err := capabilities.NewVocabulary()
		if err != nil {
			t.Fatal(err)
		}
		for _, role := range roles {
			var got []capabilities.Permission
			if err := s.Reader.NewSelect().Table("role_permissions").Column("permission_name").
				Where("role_name = ?", role).Scan(ctx, &got); err != nil {
				t.Fatal(err)
			}
			if want := sorted(vocab.RolePermissions(role)); !slices.Equal(sorted(got), want) {
				t.Errorf("role %s has %v\nwant %v", role, sorted(got), want)
			}
		}
	})
}

func sorted(ps []capabilities.Permission) []capabilities.Permission {
	out := slices.Clone(ps)
	slices.Sort(out)
	return out
}

// Entities an embedder registers become permissions attached to the
// built-in roles by the same rules.
func TestSyncVocabulary(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		vocab, err := capabilities.NewVocabulary("note", "calendar_event")
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // idempotent
			if err := svc.Roles.SyncVocabulary(ctx, vocab); err != nil {
				t.Fatal(err)
			}
		}
		plain, admin := signup(t, svc, "sync-user"), signup(t, svc, "sync-boss")
		if _, err := svc.Roles.GrantAdminAsOperator(ctx, admin.ID); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			user accounts.User
			role string
		}{{plain, capabilities.RoleUser}, {admin, capabilities.RoleAdmin}} {
			g, err := svc.Roles.RolesAndPermissions(ctx, tc.user.ID)
			if err != nil {
				t.Fatal(err)
			}
			if want := sorted(vocab.RolePermissions(tc.role)); !slices.Equal(g.Permissions, want) {
				t.Errorf("%s holds %v\nwant %v", tc.role, g.Permissions, want)
			}
		}
		note := capabilities.NewPermission(capabilities.ActionCreate, "note", capabilities.Own)
		if g, _ := svc.Roles.RolesAndPermissions(ctx, plain.ID); !g.Has(note) {
			t.Errorf("user lacks %s", note)
		}
	})
}
