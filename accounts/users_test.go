package accounts_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestSignupLoginAndDefaultRole(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		u, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "  Alice@Example.COM ", Username: "Alice", Password: goodPassword})
		if err != nil {
			t.Fatal(err)
		}
		if u.Email != "alice@example.com" || u.Username != "alice" {
			t.Errorf("stored %q / %q, want normalized", u.Email, u.Username)
		}
		// sha256("alice@example.com")
		if want := "ff8d9819fc0e12bf0d24892e45987e249a28dce836a85cad60e28eaaa8c6d976"; u.StableID != want || u.StableID != accounts.StableIDForEmail(" ALICE@example.com") {
			t.Errorf("stable id %s, want %s", u.StableID, want)
		}
		if !u.HasPassword || u.EmailVerified() || u.State() != accounts.StateActive {
			t.Errorf("new account %+v", u)
		}
		g, err := svc.Roles.RolesAndPermissions(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		vocab, _ := capabilities.NewVocabulary()
		if !slices.Equal(g.Roles, []string{capabilities.RoleUser}) || !slices.Equal(g.Permissions, sorted(vocab.RolePermissions(capabilities.RoleUser))) {
			t.Errorf("grants %+v, want role user with its permissions", g)
		}
		if !g.Has(capabilities.ReadUserOwn) || g.Has(capabilities.ReadUserAny) || g.HasRole(capabilities.RoleAdmin) {
			t.Errorf("grants %+v", g)
		}

		got, err := svc.Credentials.Login(ctx, "ALICE@example.com ", goodPassword)
		if err != nil || got.ID != u.ID {
			t.Fatalf("login = %+v, %v", got, err)
		}
		for _, tc := range []struct{ email, password string }{
			{"alice@example.com", "wrong password entirely"},
			{"alice@example.com", ""},
			{"nobody@example.com", goodPassword},
			{"alice@example.com", strings.Repeat("x", accounts.MaxPasswordBytes+1)},
		} {
			if _, err := svc.Credentials.Login(ctx, tc.email, tc.password); err != accounts.ErrInvalidCredentials {
				t.Errorf("login(%q, %q…) = %v, want ErrInvalidCredentials", tc.email, tc.password[:min(len(tc.password), 8)], err)
			}
		}
	})
}

func TestSignupRefusals(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		signup(t, svc, "taken")
		for _, tc := range []struct {
			name                      string
			email, username, password string
			want                      error
		}{
			{"no at sign", "bob.example.com", "bob", goodPassword, accounts.ErrInvalidEmail},
			{"display name", "Bob <bob@example.com>", "bob", goodPassword, accounts.ErrInvalidEmail},
			{"no domain dot", "bob@localhost", "bob", goodPassword, accounts.ErrInvalidEmail},
			{"username too short", "bob@example.com", "bo", goodPassword, accounts.ErrInvalidUsername},
			{"username too long", "bob@example.com", strings.Repeat("b", 33), goodPassword, accounts.ErrInvalidUsername},
			{"username underscore", "bob@example.com", "bob_smith", goodPassword, accounts.ErrInvalidUsername},
			{"username leading hyphen", "bob@example.com", "-bob", goodPassword, accounts.ErrInvalidUsername},
			{"username trailing hyphen", "bob@example.com", "bob-", goodPassword, accounts.ErrInvalidUsername},
			{"reserved username", "bob@example.com", "Sup-Port", goodPassword, accounts.ErrUsernameReserved},
			{"short password", "bob@example.com", "bob", "elevenchars", accounts.ErrWeakPassword},
			{"password is email", "bob@example.com", "bob", "BOB@example.com", accounts.ErrWeakPassword},
			{"password is username", "bob@example.com", "bobby-tables-1", "bobby-tables-1", accounts.ErrWeakPassword},
			{"password too long", "bob@example.com", "bob", strings.Repeat("p", accounts.MaxPasswordBytes+1), accounts.ErrWeakPassword},
			{"email taken", "Taken@example.com", "bob", goodPassword, accounts.ErrEmailTaken},
			{"username taken", "bob@example.com", "TAKEN", goodPassword, accounts.ErrUsernameTaken},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: tc.email, Username: tc.username, Password: tc.password})
				if !errors.Is(err, tc.want) {
					t.Fatalf("signup = %v, want %v", err, tc.want)
				}
			})
		}
		var ppe *accounts.PasswordPolicyError
		_, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "bob@example.com", Username: "bob", Password: "short"})
		if !errors.As(err, &ppe) || !strings.Contains(ppe.Reason, "12") {
			t.Errorf("weak password error %v, want a *PasswordPolicyError naming the minimum", err)
		}
		if _, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "bob@example.com", Username: "bob", Password: "twelve chars"}); err != nil {
			t.Errorf("a 12-character password was refused: %v", err)
		}
	})
}

// If the role user cannot be assigned, signup creates nothing and can be
// retried once the role is back.
func TestSignupRollsBackWithoutDefaultRole(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		if _, err := s.DB.ExecContext(ctx, "DELETE FROM roles WHERE name = 'user'"); err != nil {
			t.Fatal(err)
		}
		in := accounts.SignupInput{Email: "carol@example.com", Username: "carol", Password: goodPassword}
		if _, err := svc.Identity.Signup(ctx, in); err == nil {
			t.Fatal("signup succeeded without the role user")
		}
		if _, err := svc.Identity.UserByEmail(ctx, in.Email); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("user row left behind: %v", err)
		}
		if n, err := s.DB.NewSelect().Table("email_claims").Count(ctx); err != nil || n != 0 {
			t.Fatalf("%d email claims left behind (%v)", n, err)
		}
		if _, err := s.DB.ExecContext(ctx, "INSERT INTO roles (name, created_at) VALUES ('user', CURRENT_TIMESTAMP)"); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.Signup(ctx, in); err != nil {
			t.Fatalf("retry: %v", err)
		}
	})
}

// Of concurrent signups with one email, exactly one wins; the others get
// ErrEmailTaken (never an internal error).
func TestConcurrentSignupsWithOneEmail(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		const n = 6
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, errs[i] = svc.Identity.Signup(ctx, accounts.SignupInput{
					Email: "race@example.com", Username: "racer-" + string(rune('a'+i)), Password: goodPassword,
				})
			})
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, accounts.ErrEmailTaken):
				t.Errorf("signup: %v, want nil or ErrEmailTaken", err)
			}
		}
		if wins != 1 {
			t.Fatalf("%d signups won, want 1", wins)
		}
	})
}

func TestReservedUsernames(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{ReservedUsernames: []string{"Acme-Corp"}, BrandNames: []string{"Acme Brand"}})
		if err := svc.Identity.ReserveUsername(ctx, "night-owl"); err != nil {
			t.Fatal(err)
		}
		// Mailbox and operator names are never released.
		for _, n := range []string{"support", "Postmaster", "enclave", "admin-team", "acme-enclave"} {
			if err := svc.Identity.ReleaseUsername(ctx, n); !errors.Is(err, accounts.ErrUsernamePermanent) {
				t.Fatalf("release %q: %v, want ErrUsernamePermanent", n, err)
			}
		}
		if err := svc.Identity.ReleaseUsername(ctx, "status"); err != nil { // a built-in, not permanent
			t.Fatal(err)
		}
		for i, tc := range []struct {
			username string
			reserved bool
		}{
			{"admin", true},
			{"ADMIN", true},
			{"ad-min", true},
			{"a-d-m-i-n", true},
			{"administrator", true},
			{"root", true},
			{"postmaster", true},
			{"mta-sts", true},
			{"mtasts", true}, // compact form of a hyphenated token
			{"www", true},
			{"mcp", true},
			{"o-auth", true},
			{"acmecorp", true},        // Config addition, compared compact
			{"acme-corp", true},       // and exact
			{"night-owl", true},       // run-time reservation
			{"nightowl", true},        // compact
			{"support", true},         // permanent: its release was refused
			{"sup-port", true},        // compact
			{"status", false},         // run-time release of a built-in
			{"enclave-support", true}, // a brand root anywhere
			{"myenclave", true},       //
			{"en-clave-fan", true},    // compact
			{"admin-team", true},      // a reserved word as one part
			{"my-admin", true},        //
			{"security-desk", true},   //
			{"admins", false},         // neither a word nor equal
			{"badminton", false},      // a word's letters inside another word
			{"rooted", false},         //
			{"alice", false},          //
			{"help-desk", false},      //
			{"acme-brand", true},      // Config.BrandNames
			{"myacmebrandfan", true},  //
			{"admin1", true},          // digits do not separate a word from the name
			{"support24", true},       //
			{"9security-desk", true},  //
			{"noreply2", true},        // nor make another permanent name
			{"root-1", true},          //
			{"ad-min-team", true},     // a word split by hyphens is still the word
			{"team-sup-port", true},   //
			{"en1clave", true},        // a brand root split by a digit
			{"badminton-2", false},    //
			{"route66", false},        //
		} {
			_, err := svc.Identity.Signup(ctx, accounts.SignupInput{
				Email: "r" + strconv.Itoa(i) + "@example.com", Username: tc.username, Password: goodPassword,
			})
			if tc.reserved {
				if !errors.Is(err, accounts.ErrUsernameReserved) {
					t.Errorf("%s: signup = %v, want ErrUsernameReserved", tc.username, err)
				}
			} else if err != nil {
				t.Errorf("%s: signup = %v, want success", tc.username, err)
			}
		}
		// ChangeUsername applies the same rules.
		if u, err := svc.Identity.UserByUsername(ctx, "alice"); err != nil {
			t.Fatal(err)
		} else {
			for _, n := range []string{"admin7", "secu-rity-team", "postmaster3"} {
				if _, err := svc.Identity.ChangeUsername(ctx, u.ID, n); !errors.Is(err, accounts.ErrUsernameReserved) {
					t.Errorf("change username to %s: %v, want ErrUsernameReserved", n, err)
				}
			}
		}
		if got := accounts.ErrUsernameReserved.Error(); got != "This username is reserved." {
			t.Errorf("reserved message %q", got)
		}
		list, err := svc.Identity.ReservedUsernames(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(list, "night-owl") || !slices.Contains(list, "acme-corp") || slices.Contains(list, "status") || !slices.Contains(list, "admin") {
			t.Errorf("effective list %v", list)
		}
		// Reserving a name again after releasing it works (upsert).
		if err := svc.Identity.ReserveUsername(ctx, "status"); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "sup2@example.com", Username: "sta-tus", Password: goodPassword}); !errors.Is(err, accounts.ErrUsernameReserved) {
			t.Errorf("re-reserved name: %v", err)
		}
		// A release row written before names became permanent frees nothing.
		if _, err := s.DB.NewRaw("INSERT INTO reserved_usernames (name, action, created_at) VALUES ('abuse', 'release', ?)", time.Now()).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "abuse@example.com", Username: "abuse", Password: goodPassword}); !errors.Is(err, accounts.ErrUsernameReserved) {
			t.Errorf("released permanent name: %v", err)
		}
	})
}

// A login with a hash made under other parameters succeeds and replaces the
// hash with one made under the current parameters.
func TestRehashAfterLogin(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		old, _ := newService(t, s, accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 32, Iterations: 1, Parallelism: 1}})
		u := signup(t, old, "dora")
		hash := func() string {
			var h string
			if err := s.DB.NewSelect().Table("users").Column("password_hash").Where("id = ?", u.ID).Scan(ctx, &h); err != nil {
				t.Fatal(err)
			}
			return h
		}
		if h := hash(); !strings.HasPrefix(h, "$argon2id$v=19$m=32,t=1,p=1$") {
			t.Fatalf("hash %q", h)
		}
		svc, _ := newService(t, s, accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 128, Iterations: 2, Parallelism: 1}})
		if _, err := svc.Credentials.Login(ctx, "dora@example.com", goodPassword); err != nil {
			t.Fatal(err)
		}
		if h := hash(); !strings.HasPrefix(h, "$argon2id$v=19$m=128,t=2,p=1$") {
			t.Fatalf("hash after login %q, want the new parameters", h)
		}
		if _, err := svc.Credentials.Login(ctx, "dora@example.com", goodPassword); err != nil {
			t.Fatalf("login with the new hash: %v", err)
		}
		if _, err := svc.Credentials.Login(ctx, "dora@example.com", "not the password at all"); err != accounts.ErrInvalidCredentials {
			t.Fatalf("wrong password after rehash: %v", err)
		}
		// Login does not re-check the policy: a stricter minimum locks no one out.
		strict, _ := newService(t, s, accounts.Config{MinPasswordLength: 64})
		if _, err := strict.Credentials.Login(ctx, "dora@example.com", goodPassword); err != nil {
			t.Fatalf("login under a stricter policy: %v", err)
		}
	})
}

func TestAccountStates(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		u := signup(t, svc, "erin")
		if changed, err := svc.Lifecycle.Suspend(ctx, u.ID); err != nil || !changed {
			t.Fatalf("suspend = %v, %v", changed, err)
		}
		if changed, err := svc.Lifecycle.Suspend(ctx, u.ID); err != nil || changed {
			t.Fatalf("second suspend = %v, %v, want no change", changed, err)
		}
		if _, err := svc.Credentials.Login(ctx, "erin@example.com", goodPassword); !errors.Is(err, accounts.ErrSuspended) {
			t.Fatalf("login while suspended = %v", err)
		}
		if _, err := svc.Credentials.Login(ctx, "erin@example.com", "wrong wrong wrong"); err != accounts.ErrInvalidCredentials {
			t.Fatalf("wrong password while suspended = %v, want ErrInvalidCredentials (state is told only to the password holder)", err)
		}
		if changed, err := svc.Lifecycle.Unsuspend(ctx, u.ID); err != nil || !changed {
			t.Fatalf("unsuspend = %v, %v", changed, err)
		}
		if _, err := svc.Credentials.Login(ctx, "erin@example.com", goodPassword); err != nil {
			t.Fatalf("login after unsuspend = %v", err)
		}
		if _, err := svc.Lifecycle.Suspend(ctx, 99999); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("suspend unknown = %v", err)
		}

		if changed, err := svc.Lifecycle.MarkDeleting(ctx, u.ID); err != nil || !changed {
			t.Fatalf("mark deleting = %v, %v", changed, err)
		}
		if _, err := svc.Credentials.Login(ctx, "erin@example.com", goodPassword); !errors.Is(err, accounts.ErrDeleting) {
			t.Errorf("login while deleting = %v", err)
		}
		if _, err := svc.Credentials.ChangePassword(ctx, u.ID, goodPassword, "another long password"); !errors.Is(err, accounts.ErrDeleting) {
			t.Errorf("change password while deleting = %v", err)
		}
		if _, err := svc.Roles.GrantAdminAsOperator(ctx, u.ID); !errors.Is(err, accounts.ErrDeleting) {
			t.Errorf("assign role while deleting = %v", err)
		}
		if _, err := svc.Identity.ChangeEmail(ctx, u.ID, "erin2@example.com"); !errors.Is(err, accounts.ErrDeleting) {
			t.Errorf("change email while deleting = %v", err)
		}
		if _, err := svc.Credentials.NewPasswordSetupToken(ctx, u.ID); !errors.Is(err, accounts.ErrDeleting) {
			t.Errorf("setup token while deleting = %v", err)
		}
		if _, err := svc.Identity.MarkEmailVerified(ctx, u.ID); !errors.Is(err, accounts.ErrDeleting) {
			t.Errorf("verify email while deleting = %v", err)
		}
		if _, err := svc.Identity.ChangeUsername(ctx, u.ID, "erin-two"); !errors.Is(err, accounts.ErrDeleting) {
			t.Errorf("change username while deleting = %v", err)
		}
		got, err := svc.Identity.UserByID(ctx, u.ID)
		if err != nil || got.State() != accounts.StateDeleting || !errors.Is(got.CheckActive(), accounts.ErrDeleting) {
			t.Errorf("state = %v, %v", got.State(), err)
		}
	})
}

func TestEmailClaims(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		u := signup(t, svc, "frank")
		if _, err := svc.Identity.ChangeEmail(ctx, u.ID, "frank.new@example.com"); !errors.Is(err, accounts.ErrEmailUnverified) {
			t.Fatalf("change from an unverified email = %v", err)
		}
		if _, err := svc.Identity.MarkEmailVerified(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		other := signup(t, svc, "grace")
		if _, err := svc.Identity.ChangeEmail(ctx, u.ID, "grace@example.com"); !errors.Is(err, accounts.ErrEmailTaken) {
			t.Fatalf("change to another account's email = %v", err)
		}
		moved, err := svc.Identity.ChangeEmail(ctx, u.ID, "Frank.New@example.com")
		if err != nil {
			t.Fatal(err)
		}
		if moved.Email != "frank.new@example.com" || moved.EmailVerified() || moved.StableID != u.StableID {
			t.Fatalf("after change: %+v (stable id must not change)", moved)
		}
		claims, err := svc.Identity.EmailClaims(ctx, u.ID)
		if err != nil || !slices.Equal(claims, []string{"frank.new@example.com", "frank@example.com"}) {
			t.Fatalf("claims = %v, %v", claims, err)
		}
		// The former address cannot open a second account, and the refusal
		// does not reveal the current address.
		_, err = svc.Identity.Signup(ctx, accounts.SignupInput{Email: "frank@example.com", Username: "frank-two", Password: goodPassword})
		if !errors.Is(err, accounts.ErrEmailClaimed) || strings.Contains(err.Error(), "frank.new") {
			t.Fatalf("signup with a claimed former email = %v", err)
		}
		if _, err := svc.Credentials.Login(ctx, "frank@example.com", goodPassword); err != accounts.ErrInvalidCredentials {
			t.Fatalf("login with the former email = %v", err)
		}
		// Another account cannot change to it either.
		if _, err := svc.Identity.MarkEmailVerified(ctx, other.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.ChangeEmail(ctx, other.ID, "frank@example.com"); !errors.Is(err, accounts.ErrEmailClaimed) {
			t.Fatalf("change to a claimed former email = %v", err)
		}
		if err := svc.Identity.ReleaseEmailClaim(ctx, u.ID, "frank.new@example.com"); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("release of the current email = %v", err)
		}
		if err := svc.Identity.ReleaseEmailClaim(ctx, u.ID, "FRANK@example.com"); err != nil {
			t.Fatal(err)
		}
		again, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "frank@example.com", Username: "frank-two", Password: goodPassword})
		if err != nil {
			t.Fatalf("signup after release: %v", err)
		}
		if again.StableID == u.StableID || len(again.StableID) != 64 || strings.ToLower(again.StableID) != again.StableID {
			t.Fatalf("re-signup got stable id %s (first account has %s): ids are never minted twice", again.StableID, u.StableID)
		}
		// Changing back to one's own former address is allowed.
		if _, err := svc.Identity.MarkEmailVerified(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.ChangeEmail(ctx, u.ID, "frank.third@example.com"); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.MarkEmailVerified(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.ChangeEmail(ctx, u.ID, "frank.new@example.com"); err != nil {
			t.Fatalf("change back to an own former address: %v", err)
		}
	})
}

func TestPasswordSetupToken(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, clk := newService(t, s, accounts.Config{})
		u, token, err := svc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "hana@example.com", Username: "hana", Verified: true})
		if err != nil {
			t.Fatal(err)
		}
		if token == "" || u.HasPassword || !u.EmailVerified() {
			t.Fatalf("created %+v with token %q", u, token)
		}
		if link := accounts.PasswordSetupURL("https://enclave.example/", token); !strings.HasPrefix(link, "https://enclave.example/password/setup?token=") {
			t.Errorf("link %s", link)
		}
		if _, err := svc.Credentials.Login(ctx, "hana@example.com", ""); err != accounts.ErrInvalidCredentials {
			t.Fatalf("login without a password = %v", err)
		}
		if _, err := svc.Credentials.SetPasswordWithToken(ctx, token, "short"); !errors.Is(err, accounts.ErrWeakPassword) {
			t.Fatalf("weak password = %v", err)
		}
		if _, err := svc.Credentials.SetPasswordWithToken(ctx, token+"x", goodPassword); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Fatalf("wrong token = %v", err)
		}
		set, err := svc.Credentials.SetPasswordWithToken(ctx, token, goodPassword)
		if err != nil {
			t.Fatalf("a refused password must leave the token usable: %v", err)
		}
		if set.ID != u.ID || !set.HasPassword || set.PasswordChangedAt == nil {
			t.Fatalf("after setup %+v", set)
		}
		if _, err := svc.Credentials.Login(ctx, "hana@example.com", goodPassword); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Credentials.SetPasswordWithToken(ctx, token, "yet another password"); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Fatalf("reused token = %v", err)
		}
		expiring, err := svc.Credentials.NewPasswordSetupToken(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(accounts.DefaultPasswordSetupTTL)
		if _, err := svc.Credentials.SetPasswordWithToken(ctx, expiring, "yet another password"); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Fatalf("expired token = %v", err)
		}
		// An operator-created account with a password needs no token.
		if _, tok, err := svc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "ivan@example.com", Username: "ivan", Password: goodPassword}); err != nil || tok != "" {
			t.Fatalf("create with password: %q, %v", tok, err)
		}
	})
}

func TestChangeUsername(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		u := signup(t, svc, "ursula")
		signup(t, svc, "victor")
		for _, tc := range []struct {
			name string
			want error
		}{
			{"victor", accounts.ErrUsernameTaken},
			{"Post-Master", accounts.ErrUsernameReserved},
			{"x", accounts.ErrInvalidUsername},
			{"ursula", nil}, // unchanged
			{"Ursula-K", nil},
		} {
			got, err := svc.Identity.ChangeUsername(ctx, u.ID, tc.name)
			if !errors.Is(err, tc.want) {
				t.Fatalf("change to %q = %v, want %v", tc.name, err, tc.want)
			}
			if err == nil && got.Username != strings.ToLower(tc.name) {
				t.Fatalf("username %q after change to %q", got.Username, tc.name)
			}
		}
		if _, err := svc.Identity.UserByUsername(ctx, "ursula"); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("old username still resolves: %v", err)
		}
		if _, err := svc.Lifecycle.MarkDeleting(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.ChangeUsername(ctx, u.ID, "ursula-three"); !errors.Is(err, accounts.ErrDeleting) {
			t.Fatalf("change while deleting = %v", err)
		}
	})
}

func TestPasswordResetToken(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, clk := newService(t, s, accounts.Config{})
		u := signup(t, svc, "wanda")
		late, err := svc.Credentials.NewPasswordResetToken(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(accounts.DefaultPasswordResetTTL)
		if _, err := svc.Credentials.SetPasswordWithToken(ctx, late, "reset passphrase one"); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Fatalf("reset token after an hour = %v", err)
		}
		token, err := svc.Credentials.NewPasswordResetToken(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Credentials.SetPasswordWithToken(ctx, token, "reset passphrase two"); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Credentials.Login(ctx, "wanda@example.com", goodPassword); err != accounts.ErrInvalidCredentials {
			t.Fatalf("old password after reset = %v", err)
		}
		if _, err := svc.Credentials.Login(ctx, "wanda@example.com", "reset passphrase two"); err != nil {
			t.Fatalf("new password after reset = %v", err)
		}
	})
}

// A failing password-change hook (say, OAuth grants could not be revoked)
// rolls the whole change back.
func TestPasswordChangeHookFailureRollsBack(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		u := signup(t, svc, "xena")
		boom := errors.New("grant store down")
		svc.OnPasswordChange(func(context.Context, bun.Tx, int64) error { return boom })
		if _, err := svc.Credentials.ChangePassword(ctx, u.ID, goodPassword, "the replacement passphrase"); !errors.Is(err, boom) {
			t.Fatalf("change = %v, want the hook's error", err)
		}
		if _, err := svc.Credentials.Login(ctx, "xena@example.com", goodPassword); err != nil {
			t.Fatalf("old password after a rolled-back change: %v", err)
		}
		if got, _ := svc.Identity.UserByID(ctx, u.ID); got.PasswordChangedAt != nil {
			t.Fatalf("password_changed_at stamped by a rolled-back change")
		}
	})
}
