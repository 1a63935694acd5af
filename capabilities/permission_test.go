package capabilities_test

import (
	"slices"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
)

func TestBuiltinVocabulary(t *testing.T) {
	all := capabilities.AllPermissions()
	if len(all) != 16 {
		t.Fatalf("%d built-in permissions, want 4 actions × 2 entities × 2 accesses = 16", len(all))
	}
	consts := []capabilities.Permission{
		capabilities.CreateUserOwn, capabilities.ReadUserOwn, capabilities.UpdateUserOwn, capabilities.DeleteUserOwn,
		capabilities.CreateUserAny, capabilities.ReadUserAny, capabilities.UpdateUserAny, capabilities.DeleteUserAny,
		capabilities.CreateRoleOwn, capabilities.ReadRoleOwn, capabilities.UpdateRoleOwn, capabilities.DeleteRoleOwn,
		capabilities.CreateRoleAny, capabilities.ReadRoleAny, capabilities.UpdateRoleAny, capabilities.DeleteRoleAny,
	}
	for _, c := range consts {
		if !slices.Contains(all, c) {
			t.Errorf("constant %s is not in AllPermissions", c)
		}
		if p, err := capabilities.ParsePermission(c.String()); err != nil || p != c {
			t.Errorf("ParsePermission(%q) = %q, %v", c, p, err)
		}
	}
}

func TestParsePermissionRefuses(t *testing.T) {
	for _, s := range []string{"", "read", "read:user", "read:user:own:x", "raed:user:own", "read:users:own",
		"read:user:every", "read::own", "READ:user:own", "read:note:own"} {
		if _, err := capabilities.ParsePermission(s); err == nil {
			t.Errorf("ParsePermission(%q) succeeded", s)
		}
	}
}

func TestEmbedderEntitiesAreOwnOnly(t *testing.T) {
	v, err := capabilities.NewVocabulary("note")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Parse("read:note:own"); err != nil {
		t.Fatalf("read:note:own: %v", err)
	}
	if _, err := v.Parse("read:note:any"); err == nil {
		t.Fatal("the vocabulary expressed reading any user's notes")
	}
	if got := len(v.All()); got != 20 {
		t.Fatalf("%d permissions, want 16 built-in + 4 own for note", got)
	}
	for _, bad := range []capabilities.Entity{"Note", "user", "", "no-dash", "x234567890123456789012345678901234"} {
		if _, err := capabilities.NewVocabulary(bad); err == nil {
			t.Errorf("NewVocabulary(%q) succeeded", bad)
		}
	}
}

func TestRolePermissions(t *testing.T) {
	v, _ := capabilities.NewVocabulary("note")
	user := v.RolePermissions(capabilities.RoleUser)
	admin := v.RolePermissions(capabilities.RoleAdmin)
	if len(user) != 12 || len(admin) != 20 {
		t.Fatalf("user has %d, admin %d; want 12 and 20", len(user), len(admin))
	}
	for _, p := range user {
		if _, _, acc, _ := p.Parts(); acc != capabilities.Own {
			t.Errorf("role user carries %s", p)
		}
		if !slices.Contains(admin, p) {
			t.Errorf("admin lacks %s", p)
		}
	}
	if v.RolePermissions("nobody") != nil {
		t.Fatal("an unknown role has permissions")
	}
}
