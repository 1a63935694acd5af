package accounts_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// adminFields is the pinned allowlist of what account administration sees
// of an account. Widening it is a deliberate decision: update this list
// with it.
var adminFields = []string{"createdAt", "deletingAt", "email", "emailVerified", "emailVerifiedAt", "roles", "stableUserId", "suspendedAt", "updatedAt", "username"}

// adminOptional are the fields of adminFields left out while unset.
var adminOptional = []string{"deletingAt", "emailVerifiedAt", "suspendedAt"}

type adminFixture struct {
	svc         *accounts.Service
	reg         *capabilities.Registry
	admin, user capabilities.Caller
	root, bob   accounts.User
	mailed      map[string]string // email → setup token
}

func newAdminFixture(t *testing.T, s *storage.Store, mailErr error) *adminFixture {
	t.Helper()
	ctx := context.Background()
	svc, _ := newService(t, s, accounts.Config{})
	f := &adminFixture{svc: svc, reg: capabilities.NewRegistry(capabilities.Options{}), mailed: map[string]string{}}
	err := f.reg.Register(svc.AdminCapabilities(accounts.AdminOptions{
		MailSetupLink: func(ctx context.Context, tx bun.IDB, u accounts.User, token string) error {
			if mailErr != nil {
				return mailErr
			}
			// The mail is written in the creating transaction: the account
			// is visible through tx.
			if ok, err := tx.NewSelect().Table("users").Where("id = ?", u.ID).Exists(ctx); err != nil || !ok {
				t.Errorf("account not visible in the mail's transaction: %v %v", ok, err)
			}
			f.mailed[u.Email] = token
			return nil
		},
	})...)
	if err != nil {
		t.Fatal(err)
	}
	f.root, f.bob = signup(t, svc, "chief"), signup(t, svc, "bob")
	if _, err := svc.Roles.GrantAdminAsOperator(ctx, f.root.ID); err != nil {
		t.Fatal(err)
	}
	load := func(u accounts.User) capabilities.Caller {
		c, err := svc.LoadCaller(ctx, u.StableID)
		if err != nil {
			t.Fatal(err)
		}
		c.AllScopes, c.Interactive = true, true
		return c
	}
	f.admin, f.user = load(f.root), load(f.bob)
	return f
}

func (f *adminFixture) invoke(t *testing.T, c capabilities.Caller, name string, in any) (json.RawMessage, error) {
	t.Helper()
	raw, _ := json.Marshal(in)
	res, err := f.reg.Invoke(context.Background(), c, name, raw)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(res.Structured)
	if err != nil {
		t.Fatal(err)
	}
	return b, nil
}

// userOf decodes the "user" object of an admin answer and checks it holds
// exactly the allowlisted fields.
func userOf(t *testing.T, b json.RawMessage) accounts.AdminUser {
	t.Helper()
	var raw struct {
		User map[string]json.RawMessage `json:"user"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	checkFields(t, raw.User)
	var out struct {
		User accounts.AdminUser `json:"user"`
	}
	json.Unmarshal(b, &out)
	return out.User
}

func checkFields(t *testing.T, obj map[string]json.RawMessage) {
	t.Helper()
	got := slices.Sorted(maps.Keys(obj))
	for _, k := range got {
		if !slices.Contains(adminFields, k) {
			t.Fatalf("admin user fields %v: %q is not in %v", got, k, adminFields)
		}
	}
	for _, k := range adminFields {
		if !slices.Contains(got, k) && !slices.Contains(adminOptional, k) {
			t.Fatalf("admin user fields %v: %q is missing", got, k)
		}
	}
}

func TestAdminCapabilities(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newAdminFixture(t, s, nil)
		for _, name := range []string{"adminUserList", "adminUserGet", "adminUserSuspend", "adminUserUnsuspend", "adminUserVerify", "adminRoleAssign", "adminRoleRemove", "adminUserCreate"} {
			// A non-admin neither sees nor calls them: the answer is the
			// one for an unknown capability.
			if _, err := f.invoke(t, f.user, name, map[string]any{"userId": f.root.StableID, "role": "user"}); capabilities.CodeOf(err) != capabilities.CodeNotFound {
				t.Errorf("a non-admin calls %s: %v", name, err)
			}
			if slices.Contains(f.reg.VisibleNames(t.Context(), f.user), name) {
				t.Errorf("a non-admin sees %s", name)
			}
		}
		// The non-admin's attempts changed nothing.
		if u, _ := f.svc.Identity.UserByID(t.Context(), f.root.ID); u.SuspendedAt != nil {
			t.Fatal("a non-admin suspended the admin")
		}

		// The list: exactly the allowlisted fields, paged, filtered.
		b, err := f.invoke(t, f.admin, "adminUserList", map[string]any{"limit": 1})
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Users      []map[string]json.RawMessage `json:"users"`
			NextCursor string                       `json:"nextCursor"`
		}
		json.Unmarshal(b, &page)
		if len(page.Users) != 1 || page.NextCursor == "" {
			t.Fatalf("first page %s", b)
		}
		checkFields(t, page.Users[0])
		for _, secret := range []string{"password", "hash", "token", "argon"} {
			if strings.Contains(strings.ToLower(string(b)), secret) {
				t.Fatalf("the list mentions %q: %s", secret, b)
			}
		}
		b, _ = f.invoke(t, f.admin, "adminUserList", map[string]any{"cursor": page.NextCursor, "limit": 1})
		json.Unmarshal(b, &page)
		if len(page.Users) != 1 || !strings.Contains(string(b), f.bob.StableID) {
			t.Fatalf("second page %s", b)
		}
		b, _ = f.invoke(t, f.admin, "adminUserList", map[string]any{"role": capabilities.RoleAdmin})
		if json.Unmarshal(b, &page); len(page.Users) != 1 || !strings.Contains(string(b), f.root.StableID) {
			t.Fatalf("admins %s", b)
		}
		b, _ = f.invoke(t, f.admin, "adminUserList", map[string]any{"query": "BO"})
		if json.Unmarshal(b, &page); len(page.Users) != 1 || !strings.Contains(string(b), f.bob.StableID) {
			t.Fatalf("search %s", b)
		}
		if _, err := f.invoke(t, f.admin, "adminUserList", map[string]any{"cursor": "nonsense"}); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("bad cursor: %v", err)
		}

		// Get.
		b, err = f.invoke(t, f.admin, "adminUserGet", accounts.AdminUserRef{UserID: f.bob.StableID})
		if err != nil {
			t.Fatal(err)
		}
		if u := userOf(t, b); u.Username != "bob" || !slices.Equal(u.Roles, []string{"user"}) || u.State() != "active" {
			t.Fatalf("get %+v", u)
		}
		if _, err := f.invoke(t, f.admin, "adminUserGet", accounts.AdminUserRef{UserID: "nobody"}); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("unknown user: %v", err)
		}

		// Suspend and unsuspend; never oneself.
		b, err = f.invoke(t, f.admin, "adminUserSuspend", accounts.AdminUserRef{UserID: f.bob.StableID})
		if u := userOf(t, b); err != nil || u.SuspendedAt == nil || u.State() != "suspended" {
			t.Fatalf("suspend: %+v %v", u, err)
		}
		if _, err := f.invoke(t, f.admin, "adminUserSuspend", accounts.AdminUserRef{UserID: f.root.StableID}); capabilities.CodeOf(err) != capabilities.CodeConflict || !errors.Is(err, accounts.ErrSuspendSelf) {
			t.Fatalf("suspend self: %v", err)
		}
		b, err = f.invoke(t, f.admin, "adminUserUnsuspend", accounts.AdminUserRef{UserID: f.bob.StableID})
		if u := userOf(t, b); err != nil || u.SuspendedAt != nil {
			t.Fatalf("unsuspend: %+v %v", u, err)
		}
		b, err = f.invoke(t, f.admin, "adminUserVerify", accounts.AdminUserRef{UserID: f.bob.StableID})
		if u := userOf(t, b); err != nil || !u.EmailVerified {
			t.Fatalf("verify: %+v %v", u, err)
		}

		// Roles: never admin, either way.
		for _, name := range []string{"adminRoleAssign", "adminRoleRemove"} {
			_, err := f.invoke(t, f.admin, name, accounts.AdminRoleInput{UserID: f.bob.StableID, Role: capabilities.RoleAdmin})
			if capabilities.CodeOf(err) != capabilities.CodeConflict || !errors.Is(err, accounts.ErrAdminRoleReserved) {
				t.Fatalf("%s admin: %v", name, err)
			}
		}
		// Nor any other spelling of it: case, whitespace, lookalike letters,
		// invisible characters name no role.
		for _, spelling := range []string{"Admin", "ADMIN", " admin", "admin ", "admin\n", "\u0430dmin", "admin\u200b", "ａｄｍｉｎ"} {
			if _, err := f.invoke(t, f.admin, "adminRoleAssign", accounts.AdminRoleInput{UserID: f.bob.StableID, Role: spelling}); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
				t.Fatalf("assign %q: %v", spelling, err)
			}
			if _, err := f.invoke(t, f.admin, "adminRoleRemove", accounts.AdminRoleInput{UserID: f.root.StableID, Role: spelling}); err != nil && capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
				t.Fatalf("remove %q: %v", spelling, err)
			}
		}
		if _, err := f.invoke(t, f.admin, "adminRoleRemove", accounts.AdminRoleInput{UserID: f.root.StableID, Role: capabilities.RoleAdmin}); !errors.Is(err, accounts.ErrAdminRoleReserved) {
			t.Fatalf("remove own admin: %v", err)
		}
		if g, _ := f.svc.Roles.RolesAndPermissions(t.Context(), f.bob.ID); g.HasRole(capabilities.RoleAdmin) {
			t.Fatal("a capability granted admin")
		}
		if g, _ := f.svc.Roles.RolesAndPermissions(t.Context(), f.root.ID); !g.HasRole(capabilities.RoleAdmin) {
			t.Fatal("a capability revoked admin")
		}
		if _, err := f.invoke(t, f.admin, "adminRoleAssign", accounts.AdminRoleInput{UserID: f.bob.StableID, Role: "wizard"}); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("unknown role: %v", err)
		}
		b, err = f.invoke(t, f.admin, "adminRoleRemove", accounts.AdminRoleInput{UserID: f.bob.StableID, Role: capabilities.RoleUser})
		if u := userOf(t, b); err != nil || len(u.Roles) != 0 {
			t.Fatalf("remove user role: %+v %v", u, err)
		}
		b, err = f.invoke(t, f.admin, "adminRoleAssign", accounts.AdminRoleInput{UserID: f.bob.StableID, Role: capabilities.RoleUser})
		if u := userOf(t, b); err != nil || !slices.Equal(u.Roles, []string{"user"}) {
			t.Fatalf("assign user role: %+v %v", u, err)
		}

		// Create: the setup link goes by mail, never in the answer.
		b, err = f.invoke(t, f.admin, "adminUserCreate", accounts.AdminUserCreateInput{Email: "New@Example.com", Username: "newbie"})
		if err != nil {
			t.Fatal(err)
		}
		u := userOf(t, b)
		token := f.mailed["new@example.com"]
		if u.Username != "newbie" || token == "" || strings.Contains(string(b), token) || !strings.Contains(string(b), `"setupLinkSent":true`) {
			t.Fatalf("create: %s (mailed %v)", b, f.mailed)
		}
		if _, err := f.svc.Credentials.SetPasswordWithToken(t.Context(), token, goodPassword); err != nil {
			t.Fatalf("the mailed token does not set a password: %v", err)
		}
		if _, err := f.invoke(t, f.admin, "adminUserCreate", accounts.AdminUserCreateInput{Email: "new@example.com", Username: "other"}); capabilities.CodeOf(err) != capabilities.CodeConflict {
			t.Fatalf("duplicate email: %v", err)
		}
		if _, err := f.invoke(t, f.admin, "adminUserCreate", accounts.AdminUserCreateInput{Email: "x@example.com", Username: "A"}); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("bad username: %v", err)
		}
	})
}

// A setup mail that cannot be written rolls the account back: no account
// exists whose link was never sent.
func TestAdminUserCreateRollsBackWithoutMail(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newAdminFixture(t, s, errors.New("outbox down"))
		if _, err := f.invoke(t, f.admin, "adminUserCreate", accounts.AdminUserCreateInput{Email: "lost@example.com", Username: "lost"}); capabilities.CodeOf(err) != capabilities.CodeInternal {
			t.Fatalf("create without mail: %v", err)
		}
		if _, err := f.svc.Identity.UserByEmail(t.Context(), "lost@example.com"); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("the account exists without its mail: %v", err)
		}
	})
}

// The output schema of the admin capabilities names exactly the pinned
// fields, in camelCase, and the optional ones are not required.
func TestAdminUserSchemaFields(t *testing.T) {
	svc := &accounts.Service{}
	for _, c := range svc.AdminCapabilities(accounts.AdminOptions{}) {
		if c.Name != "adminUserGet" {
			continue
		}
		var s struct {
			Properties map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(c.OutputSchema, &s); err != nil {
			t.Fatal(err)
		}
		user := s.Properties["user"]
		if got := slices.Sorted(maps.Keys(user.Properties)); !slices.Equal(got, adminFields) {
			t.Fatalf("schema fields %v, want exactly %v", got, adminFields)
		}
		for _, k := range adminOptional {
			if slices.Contains(user.Required, k) {
				t.Fatalf("%s is required", k)
			}
		}
		return
	}
	t.Fatal("no adminUserGet")
}
