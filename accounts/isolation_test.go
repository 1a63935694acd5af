package accounts_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Every read path answers for the account it is asked about and never shows
// another account's data.
func TestCrossUserDenial(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		alice, bob := signup(t, svc, "alice"), signup(t, svc, "bob")
		if _, err := svc.Roles.GrantAdminAsOperator(ctx, bob.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.MarkEmailVerified(ctx, bob.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.ChangeEmail(ctx, bob.ID, "bob.new@example.com"); err != nil {
			t.Fatal(err)
		}

		t.Run("roles and permissions", func(t *testing.T) {
			g, err := svc.Roles.RolesAndPermissions(ctx, alice.ID)
			if err != nil {
				t.Fatal(err)
			}
			if g.HasRole(capabilities.RoleAdmin) || g.Has(capabilities.ReadUserAny) {
				t.Fatalf("alice sees bob's admin grants: %+v", g)
			}
		})
		t.Run("caller", func(t *testing.T) {
			c, err := svc.LoadCaller(ctx, alice.StableID)
			if err != nil || c.UserID != alice.StableID || c.Username != "alice" || c.HasRole(capabilities.RoleAdmin) {
				t.Fatalf("alice's caller %+v, %v", c, err)
			}
		})
		t.Run("email claims", func(t *testing.T) {
			claims, err := svc.Identity.EmailClaims(ctx, alice.ID)
			if err != nil || !slices.Equal(claims, []string{"alice@example.com"}) {
				t.Fatalf("alice's claims = %v, %v", claims, err)
			}
			if err := svc.Identity.ReleaseEmailClaim(ctx, alice.ID, "bob@example.com"); !errors.Is(err, accounts.ErrNotFound) {
				t.Fatalf("alice released bob's claim: %v", err)
			}
			if claims, _ := svc.Identity.EmailClaims(ctx, bob.ID); !slices.Contains(claims, "bob@example.com") {
				t.Fatalf("bob lost his claim: %v", claims)
			}
		})
		t.Run("lookups", func(t *testing.T) {
			for name, get := range map[string]func() (accounts.User, error){
				"id":        func() (accounts.User, error) { return svc.Identity.UserByID(ctx, alice.ID) },
				"stable id": func() (accounts.User, error) { return svc.Identity.UserByStableID(ctx, alice.StableID) },
				"email":     func() (accounts.User, error) { return svc.Identity.UserByEmail(ctx, "ALICE@example.com") },
				"username":  func() (accounts.User, error) { return svc.Identity.UserByUsername(ctx, "Alice") },
			} {
				u, err := get()
				if err != nil || u.ID != alice.ID || u.Email != "alice@example.com" {
					t.Errorf("by %s: %+v, %v", name, u, err)
				}
			}
			if _, err := svc.Identity.UserByEmail(ctx, "bob@example.com"); !errors.Is(err, accounts.ErrNotFound) {
				t.Errorf("a former email finds its account by email lookup: %v", err)
			}
		})
		t.Run("sessions", func(t *testing.T) {
			c := startSession(t, svc, httptest.NewRequest(http.MethodGet, "/", nil), alice, false)
			sess, err := svc.Credentials.Authenticate(ctx, withCookie(c))
			if err != nil || sess.User.ID != alice.ID {
				t.Fatalf("alice's cookie authenticates as %+v, %v", sess.User, err)
			}
		})
		t.Run("login", func(t *testing.T) {
			// Each account's password opens only that account.
			if _, err := svc.Credentials.Login(ctx, "bob.new@example.com", "alice's is not bob's"); err != accounts.ErrInvalidCredentials {
				t.Fatal(err)
			}
			if _, err := svc.Credentials.ChangePassword(ctx, alice.ID, goodPassword, "alice only passphrase"); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Credentials.Login(ctx, "bob.new@example.com", "alice only passphrase"); err != accounts.ErrInvalidCredentials {
				t.Fatalf("alice's new password opens bob's account: %v", err)
			}
			if _, err := svc.Credentials.Login(ctx, "bob.new@example.com", goodPassword); err != nil {
				t.Fatalf("bob's password changed with alice's: %v", err)
			}
		})
		t.Run("password-setup tokens", func(t *testing.T) {
			carol, token, err := svc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "carol@example.com", Username: "carol"})
			if err != nil {
				t.Fatal(err)
			}
			u, err := svc.Credentials.SetPasswordWithToken(ctx, token, "carol's own passphrase")
			if err != nil || u.ID != carol.ID {
				t.Fatalf("token set the password of %+v, %v", u, err)
			}
			if _, err := svc.Credentials.Login(ctx, "bob.new@example.com", "carol's own passphrase"); err != accounts.ErrInvalidCredentials {
				t.Fatalf("carol's token changed bob's password: %v", err)
			}
		})
	})
}

// Unknown emails and wrong passwords give the same error, and take the same
// time: both run one password hash. The test compares medians of many
// interleaved attempts and fails only on a gross difference (when one path
// skips the hash it is orders of magnitude faster); it asserts no absolute
// duration.
func TestLoginDoesNotRevealAccounts(t *testing.T) {
	if testing.Short() {
		t.Skip("timing comparison")
	}
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		// Enough memory that hashing dominates a point read.
		svc, _ := newService(t, s, accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 4096, Iterations: 1, Parallelism: 1}})
		signup(t, svc, "olga")
		_, noPassword, err := svc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "pat@example.com", Username: "pat"})
		if err != nil || noPassword == "" {
			t.Fatal(err)
		}
		cases := []struct{ name, email, password string }{
			{"wrong password", "olga@example.com", "not olga's password"},
			{"unknown email", "nobody@example.com", "not olga's password"},
			{"no password set", "pat@example.com", "not olga's password"},
		}
		const rounds = 25
		times := make([][]time.Duration, len(cases))
		var first error
		for range rounds {
			for i, c := range cases {
				start := time.Now()
				_, err := svc.Credentials.Login(ctx, c.email, c.password)
				times[i] = append(times[i], time.Since(start))
				if first == nil {
					first = err
				}
				if err != first || err != accounts.ErrInvalidCredentials {
					t.Fatalf("%s: error %v, want the same ErrInvalidCredentials for every case", c.name, err)
				}
			}
		}
		median := func(ds []time.Duration) time.Duration {
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			return ds[len(ds)/2]
		}
		base := median(times[0])
		for i, c := range cases[1:] {
			m := median(times[i+1])
			if ratio := float64(m) / float64(base); ratio < 0.33 || ratio > 3 {
				t.Errorf("%s median %v vs wrong password %v (ratio %.2f): the paths are distinguishable by timing", c.name, m, base, ratio)
			}
		}
	})
}
