package accounts_test

import (
	"errors"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// An email, username or stable id that no text column can hold (a NUL
// byte, invalid UTF-8) names no account: Login refuses the credentials and
// the lookups answer ErrNotFound, on both databases, instead of failing in
// SQL (a 500 at every sign-in form).
func TestLookupsOfUnstorableValuesFindNothing(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		svc, _ := newService(t, s, accounts.Config{})
		signup(t, svc, "alice")
		ctx := t.Context()
		for _, v := range []string{"alice\x00@example.com", "alice@example.com\xff", "\x00"} {
			if _, err := svc.Credentials.Login(ctx, v, "whatever password"); !errors.Is(err, accounts.ErrInvalidCredentials) {
				t.Errorf("login as %q: %v", v, err)
			}
			if _, err := svc.Identity.UserByEmail(ctx, v); !errors.Is(err, accounts.ErrNotFound) {
				t.Errorf("user by email %q: %v", v, err)
			}
			if _, err := svc.Identity.UserByUsername(ctx, v); !errors.Is(err, accounts.ErrNotFound) {
				t.Errorf("user by username %q: %v", v, err)
			}
			if _, err := svc.Identity.UserByStableID(ctx, v); !errors.Is(err, accounts.ErrNotFound) {
				t.Errorf("user by stable id %q: %v", v, err)
			}
		}
	})
}
