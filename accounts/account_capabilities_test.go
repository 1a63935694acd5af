package accounts_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// accountPasswordChange runs only for a web session, checks the current
// password, and changes only the caller's own password.
func TestAccountPasswordChangeCapability(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		reg := capabilities.NewRegistry(capabilities.Options{})
		if err := reg.Register(svc.AccountCapabilities()...); err != nil {
			t.Fatal(err)
		}
		ann, bob := signup(t, svc, "ann"), signup(t, svc, "bob")
		caller := func(u accounts.User, session bool) capabilities.Caller {
			c, err := svc.LoadCaller(ctx, u.StableID)
			if err != nil {
				t.Fatal(err)
			}
			c.AllScopes, c.Interactive, c.Session = true, true, session
			return c
		}
		const next = "a different long passphrase"
		args, _ := json.Marshal(accounts.PasswordChangeInput{Current: goodPassword, New: next})
		// An agent (token caller) neither sees nor calls it.
		if _, err := reg.Invoke(ctx, caller(ann, false), "accountPasswordChange", args); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("an agent changes the password: %v", err)
		}
		if slices.Contains(reg.VisibleNames(ctx, caller(ann, false)), "accountPasswordChange") {
			t.Fatal("an agent sees accountPasswordChange")
		}
		wrong, _ := json.Marshal(accounts.PasswordChangeInput{Current: "not the password", New: next})
		if _, err := reg.Invoke(ctx, caller(ann, true), "accountPasswordChange", wrong); !errors.Is(err, accounts.ErrInvalidCredentials) || capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("wrong current password: %v", err)
		}
		weak, _ := json.Marshal(accounts.PasswordChangeInput{Current: goodPassword, New: "short"})
		if _, err := reg.Invoke(ctx, caller(ann, true), "accountPasswordChange", weak); !errors.Is(err, accounts.ErrWeakPassword) || capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("weak password: %v", err)
		}
		if _, err := reg.Invoke(ctx, caller(ann, true), "accountPasswordChange", args); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Login(ctx, "ann@example.com", next); err != nil {
			t.Fatalf("login with the new password: %v", err)
		}
		// Only the caller's own password changed.
		if _, err := svc.Login(ctx, "bob@example.com", goodPassword); err != nil {
			t.Fatalf("bob's password changed: %v", err)
		}
		_ = bob
	})
}
