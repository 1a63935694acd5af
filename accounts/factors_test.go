package accounts_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"
	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// enrolTOTP sets up an authenticator app for u and returns its secret and
// recovery codes.
func enrolTOTP(t *testing.T, svc *accounts.Service, c *clock, u accounts.User) (string, []string) {
	t.Helper()
	ctx := context.Background()
	e, err := svc.SecondFactors.BeginTOTP(ctx, u, "enclave")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.URL, "otpauth://totp/") || e.Secret == "" {
		t.Fatalf("enrolment %+v", e)
	}
	q, _ := url.Parse(e.URL)
	if q.Query().Get("secret") != e.Secret {
		t.Fatal("the QR code does not carry the secret")
	}
	if png, err := e.QRCodePNG(200); err != nil || len(png) < 100 || string(png[1:4]) != "PNG" {
		t.Fatalf("QR code: %v", err)
	}
	if _, err := svc.SecondFactors.ConfirmTOTP(ctx, u, "000000"); !errors.Is(err, accounts.ErrSecondFactorInvalid) && codeAt(t, e.Secret, c.Now()) != "000000" {
		t.Fatalf("wrong first code: %v", err)
	}
	codes, err := svc.SecondFactors.ConfirmTOTP(ctx, u, codeAt(t, e.Secret, c.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if len(codes) != accounts.RecoveryCodeCount {
		t.Fatalf("%d recovery codes", len(codes))
	}
	return e.Secret, codes
}

func codeAt(t *testing.T, secret string, at time.Time) string {
	t.Helper()
	code, err := totp.GenerateCode(secret, at)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

func TestTOTPEnrolAndUse(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, c := newService(t, s, accounts.Config{})
		u := signup(t, svc, "alice")
		if has, err := svc.SecondFactors.HasSecondFactor(ctx, u.ID); err != nil || has {
			t.Fatalf("before enrolment: %v %v", has, err)
		}
		// An enrolment that was not confirmed is not a factor.
		if _, err := svc.SecondFactors.BeginTOTP(ctx, u, "enclave"); err != nil {
			t.Fatal(err)
		}
		if has, _ := svc.SecondFactors.HasSecondFactor(ctx, u.ID); has {
			t.Fatal("an unconfirmed enrolment counts as a factor")
		}
		secret, codes := enrolTOTP(t, svc, c, u)
		if has, _ := svc.SecondFactors.HasSecondFactor(ctx, u.ID); !has {
			t.Fatal("no factor after enrolment")
		}
		if _, err := svc.SecondFactors.BeginTOTP(ctx, u, "enclave"); !errors.Is(err, accounts.ErrTOTPEnabled) {
			t.Fatalf("second enrolment: %v", err)
		}
		// The code used to confirm cannot be used again in its window.
		if _, err := svc.SecondFactors.VerifySecondFactorCode(ctx, u, codeAt(t, secret, c.Now())); !errors.Is(err, accounts.ErrSecondFactorInvalid) {
			t.Fatalf("replayed code: %v", err)
		}
		c.Advance(30 * time.Second)
		code := codeAt(t, secret, c.Now())
		if rec, err := svc.SecondFactors.VerifySecondFactorCode(ctx, u, code); err != nil || rec {
			t.Fatalf("fresh code: %v %v", rec, err)
		}
		if _, err := svc.SecondFactors.VerifySecondFactorCode(ctx, u, code); !errors.Is(err, accounts.ErrSecondFactorInvalid) {
			t.Fatalf("replayed code: %v", err)
		}
		// A code of an earlier step is refused once a later one was used.
		c.Advance(30 * time.Second)
		if _, err := svc.SecondFactors.VerifySecondFactorCode(ctx, u, codeAt(t, secret, c.Now().Add(-30*time.Second))); !errors.Is(err, accounts.ErrSecondFactorInvalid) {
			t.Fatalf("earlier code: %v", err)
		}
		// Recovery codes work once, whatever their spelling.
		spelled := strings.ToUpper(strings.ReplaceAll(codes[0], "-", " "))
		if rec, err := svc.SecondFactors.VerifySecondFactorCode(ctx, u, spelled); err != nil || !rec {
			t.Fatalf("recovery code: %v %v", rec, err)
		}
		if _, err := svc.SecondFactors.VerifySecondFactorCode(ctx, u, codes[0]); !errors.Is(err, accounts.ErrSecondFactorInvalid) {
			t.Fatalf("reused recovery code: %v", err)
		}
		f, err := svc.SecondFactors.FactorsOf(ctx, u.ID)
		if err != nil || !f.TOTP || f.RecoveryCodesLeft != accounts.RecoveryCodeCount-1 {
			t.Fatalf("factors %+v %v", f, err)
		}
		// Another account's recovery code does nothing here.
		bob := signup(t, svc, "bob")
		_, bobCodes := enrolTOTP(t, svc, c, bob)
		if _, err := svc.SecondFactors.VerifySecondFactorCode(ctx, u, bobCodes[0]); !errors.Is(err, accounts.ErrSecondFactorInvalid) {
			t.Fatalf("bob's code for alice: %v", err)
		}
	})
}

// Two concurrent uses of one code: exactly one succeeds.
func TestTOTPCodeRace(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, c := newService(t, s, accounts.Config{})
		u := signup(t, svc, "alice")
		secret, _ := enrolTOTP(t, svc, c, u)
		c.Advance(30 * time.Second)
		code := codeAt(t, secret, c.Now())
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for range 6 {
			wg.Go(func() {
				if _, err := svc.SecondFactors.VerifySecondFactorCode(ctx, u, code); err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if ok != 1 {
			t.Fatalf("%d uses of one code succeeded", ok)
		}
	})
}

func TestPendingLogin(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, c := newService(t, s, accounts.Config{})
		u := signup(t, svc, "alice")
		secret, _ := enrolTOTP(t, svc, c, u)
		c.Advance(30 * time.Second)

		token, err := svc.SecondFactors.BeginPendingLogin(ctx, u, true)
		if err != nil {
			t.Fatal(err)
		}
		// A made-up token names nothing: the client cannot claim the
		// password was checked.
		if _, err := svc.SecondFactors.CompletePendingLogin(ctx, "forged-token", codeAt(t, secret, c.Now())); !errors.Is(err, accounts.ErrPendingLoginInvalid) {
			t.Fatalf("forged: %v", err)
		}
		if _, err := svc.SecondFactors.CompletePendingLogin(ctx, token, "123"); !errors.Is(err, accounts.ErrSecondFactorInvalid) {
			t.Fatalf("wrong code: %v", err)
		}
		p, err := svc.SecondFactors.CompletePendingLogin(ctx, token, codeAt(t, secret, c.Now()))
		if err != nil || p.User.ID != u.ID || !p.RememberMe {
			t.Fatalf("complete: %+v %v", p, err)
		}
		// Single use.
		c.Advance(30 * time.Second)
		if _, err := svc.SecondFactors.CompletePendingLogin(ctx, token, codeAt(t, secret, c.Now())); !errors.Is(err, accounts.ErrPendingLoginInvalid) {
			t.Fatalf("reused: %v", err)
		}
		// Expiry.
		token, _ = svc.SecondFactors.BeginPendingLogin(ctx, u, false)
		c.Advance(accounts.PendingLoginTTL + time.Second)
		if _, err := svc.SecondFactors.CompletePendingLogin(ctx, token, codeAt(t, secret, c.Now())); !errors.Is(err, accounts.ErrPendingLoginInvalid) {
			t.Fatalf("expired: %v", err)
		}
		// Attempts are bounded: after five wrong codes the right one fails.
		token, _ = svc.SecondFactors.BeginPendingLogin(ctx, u, false)
		for range 5 {
			_, _ = svc.SecondFactors.CompletePendingLogin(ctx, token, "000000")
		}
		c.Advance(30 * time.Second)
		if _, err := svc.SecondFactors.CompletePendingLogin(ctx, token, codeAt(t, secret, c.Now())); !errors.Is(err, accounts.ErrPendingLoginInvalid) {
			t.Fatalf("after too many attempts: %v", err)
		}
		// A password change while the sign-in waits kills it.
		token, _ = svc.SecondFactors.BeginPendingLogin(ctx, u, false)
		c.Advance(time.Second)
		if _, err := svc.Credentials.ChangePassword(ctx, u.ID, goodPassword, "another good password"); err != nil {
			t.Fatal(err)
		}
		c.Advance(30 * time.Second)
		if _, err := svc.SecondFactors.CompletePendingLogin(ctx, token, codeAt(t, secret, c.Now())); !errors.Is(err, accounts.ErrPendingLoginInvalid) {
			t.Fatalf("after a password change: %v", err)
		}
	})
}

// Removing a factor and resetting recovery codes end sessions and run the
// password-change hooks (OAuth grants), like a password change.
func TestFactorChangesRevoke(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, c := newService(t, s, accounts.Config{})
		hooks := 0
		svc.OnPasswordChange(func(context.Context, bun.Tx, int64) error { hooks++; return nil })
		u := signup(t, svc, "alice")
		secret, _ := enrolTOTP(t, svc, c, u)
		if hooks != 0 {
			t.Fatal("enrolling revoked grants")
		}
		c.Advance(time.Second)
		before, _ := svc.Identity.UserByID(ctx, u.ID)

		c.Advance(30 * time.Second) // the next code of the app
		if _, err := svc.SecondFactors.RegenerateRecoveryCodes(ctx, u, goodPassword, accounts.FactorProof{}); !errors.Is(err, accounts.ErrFactorProofRequired) {
			t.Fatalf("new recovery codes with the password alone: %v", err)
		}
		if _, err := svc.SecondFactors.RegenerateRecoveryCodes(ctx, u, "wrong password", accounts.FactorProof{Code: codeAt(t, secret, c.Now())}); !errors.Is(err, accounts.ErrInvalidCredentials) {
			t.Fatalf("wrong password: %v", err)
		}
		codes, err := svc.SecondFactors.RegenerateRecoveryCodes(ctx, u, goodPassword, accounts.FactorProof{Code: codeAt(t, secret, c.Now())})
		if err != nil || len(codes) != accounts.RecoveryCodeCount {
			t.Fatal(err)
		}
		after, _ := svc.Identity.UserByID(ctx, u.ID)
		if hooks != 1 || after.PasswordChangedAt == nil || (before.PasswordChangedAt != nil && !after.PasswordChangedAt.After(*before.PasswordChangedAt)) {
			t.Fatalf("reset of recovery codes did not revoke: hooks %d", hooks)
		}

		c.Advance(30 * time.Second)
		if err := svc.SecondFactors.DisableTOTP(ctx, u, goodPassword, "000000"); !errors.Is(err, accounts.ErrSecondFactorInvalid) && codeAt(t, secret, c.Now()) != "000000" {
			t.Fatalf("wrong code: %v", err)
		}
		if err := svc.SecondFactors.DisableTOTP(ctx, u, "nope", codeAt(t, secret, c.Now())); !errors.Is(err, accounts.ErrInvalidCredentials) {
			t.Fatalf("wrong password: %v", err)
		}
		if err := svc.SecondFactors.DisableTOTP(ctx, u, goodPassword, codeAt(t, secret, c.Now())); err != nil {
			t.Fatal(err)
		}
		if hooks != 2 {
			t.Fatalf("disabling did not revoke: hooks %d", hooks)
		}
		f, _ := svc.SecondFactors.FactorsOf(ctx, u.ID)
		if f.Any() || f.RecoveryCodesLeft != 0 {
			t.Fatalf("factors after disable: %+v", f)
		}
	})
}

// A password reset (a setup token) clears every second factor; a signed-in
// password change keeps them.
func TestPasswordResetClearsFactors(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, c := newService(t, s, accounts.Config{})
		u := signup(t, svc, "alice")
		enrolTOTP(t, svc, c, u)
		c.Advance(time.Second)
		if _, err := svc.Credentials.ChangePassword(ctx, u.ID, goodPassword, "a changed password"); err != nil {
			t.Fatal(err)
		}
		if has, _ := svc.SecondFactors.HasSecondFactor(ctx, u.ID); !has {
			t.Fatal("a password change removed the factor")
		}
		token, err := svc.Credentials.NewPasswordSetupToken(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		c.Advance(time.Second)
		_, cleared, err := svc.Credentials.ResetPasswordWithToken(ctx, token, "a reset password!")
		if err != nil || !cleared {
			t.Fatalf("reset: %v %v", cleared, err)
		}
		if f, _ := svc.SecondFactors.FactorsOf(ctx, u.ID); f.Any() || f.TOTPPending || f.RecoveryCodesLeft != 0 {
			t.Fatalf("factors after reset: %+v", f)
		}
	})
}

// Passkeys are reached only through their owner.
func TestPasskeyCrossUserDenial(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		alice := signup(t, svc, "alice")
		bob := signup(t, svc, "bob")
		id := insertPasskey(t, s, alice.ID, "alice's laptop")
		if err := svc.SecondFactors.RenamePasskey(ctx, bob.ID, id, "mine now"); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("bob renames alice's passkey: %v", err)
		}
		if err := svc.SecondFactors.RemovePasskey(ctx, bob.ID, id); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("bob removes alice's passkey: %v", err)
		}
		if ks, _ := svc.SecondFactors.Passkeys(ctx, bob.ID); len(ks) != 0 {
			t.Fatalf("bob sees %v", ks)
		}
		ks, _ := svc.SecondFactors.Passkeys(ctx, alice.ID)
		if len(ks) != 1 || ks[0].Name != "alice's laptop" {
			t.Fatalf("alice's passkeys %v", ks)
		}
		if err := svc.SecondFactors.RenamePasskey(ctx, alice.ID, id, "Work laptop"); err != nil {
			t.Fatal(err)
		}
		if err := svc.SecondFactors.RenamePasskey(ctx, alice.ID, id, strings.Repeat("x", 65)); !errors.Is(err, accounts.ErrPasskeyName) {
			t.Fatalf("long name: %v", err)
		}
		if has, _ := svc.SecondFactors.HasSecondFactor(ctx, alice.ID); !has {
			t.Fatal("a passkey is not a second factor")
		}
		if err := svc.SecondFactors.RemovePasskey(ctx, alice.ID, id); err != nil {
			t.Fatal(err)
		}
		if has, _ := svc.SecondFactors.HasSecondFactor(ctx, alice.ID); has {
			t.Fatal("removed passkey still counts")
		}
		// A ceremony token of one account does not finish another's.
		c, err := svc.SecondFactors.BeginPasskeyRegistration(ctx, alice)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.SecondFactors.FinishPasskeyRegistration(ctx, bob, c.Token, "x", []byte(`{}`)); !errors.Is(err, accounts.ErrPasskeyInvalid) {
			t.Fatalf("bob finishes alice's ceremony: %v", err)
		}
	})
}

func insertPasskey(t *testing.T, s *storage.Store, userID int64, name string) int64 {
	t.Helper()
	var id int64
	err := s.DB.NewRaw("INSERT INTO user_passkeys (user_id, credential_id, name, credential, created_at) VALUES (?, ?, ?, '{}', ?) RETURNING id",
		userID, "cred-"+name, name, time.Now().UTC()).Scan(context.Background(), &id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// With RequireAdminSecondFactor the gate refuses admin capabilities to an
// admin without a factor, with a message naming enrolment.
func TestAdminSecondFactorGate(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		off, _ := newService(t, s, accounts.Config{})
		svc, c := newService(t, s, accounts.Config{RequireAdminSecondFactor: true})
		u := signup(t, svc, "carol")
		caller := capabilities.Caller{UserID: u.StableID, OwnerID: u.ID, Roles: []string{capabilities.RoleAdmin}}
		if err := off.SecondFactors.AdminSecondFactorGate(ctx, caller, capabilities.RoleAdmin); err != nil {
			t.Fatalf("gate without the setting: %v", err)
		}
		err := svc.SecondFactors.AdminSecondFactorGate(ctx, caller, capabilities.RoleAdmin)
		if capabilities.CodeOf(err) != capabilities.CodeSecondFactorRequired || !strings.Contains(err.Error(), "/account/security") {
			t.Fatalf("gate: %v", err)
		}
		if err := svc.SecondFactors.AdminSecondFactorGate(ctx, caller, "editor"); err != nil {
			t.Fatalf("other role: %v", err)
		}
		enrolTOTP(t, svc, c, u)
		if err := svc.SecondFactors.AdminSecondFactorGate(ctx, caller, capabilities.RoleAdmin); err != nil {
			t.Fatalf("gate after enrolment: %v", err)
		}
	})
}
