package web

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A verification or reset link issued before its account was created was
// issued to an earlier account (identities are never reused): the pages
// refuse it like an expired link, and it changes nothing.
func TestLinksIssuedBeforeTheAccountAreRefused(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		clock := newFakeClock()
		acc := newAccounts(t, s, clock.Now)
		h := newTestHandler(t, s, func(o *Options) {
			o.Now = clock.Now
			o.Accounts = acc
			o.CredentialLimit = Limit{Requests: 1000}
		})
		ctx := t.Context()
		u, err := acc.Identity.Signup(ctx, accounts.SignupInput{Email: "late@example.com", Username: "late", Password: testPassword})
		if err != nil {
			t.Fatal(err)
		}

		clock.Advance(-10 * time.Minute)
		verify, err := h.issueToken(ctx, u.ID, purposeVerifyEmail, u.Email, "", VerifyEmailTTL)
		if err != nil {
			t.Fatal(err)
		}
		setup, err := acc.Credentials.NewPasswordSetupToken(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		reset, err := h.issueToken(ctx, u.ID, purposeResetPassword, u.Email, setup, ResetPasswordTTL)
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(10 * time.Minute)

		b := newBrowser(t, serve(t, h))
		expect(t, "verify page", b.get(pathVerifyEmail+"?token="+url.QueryEscape(verify)), http.StatusBadRequest)
		expect(t, "verify", b.post(pathVerifyEmail, url.Values{"token": {verify}}), http.StatusBadRequest)
		expect(t, "reset page", b.get(pathResetConfirm+"?token="+url.QueryEscape(reset)), http.StatusBadRequest)
		expect(t, "reset", b.post(pathResetConfirm, url.Values{"token": {reset}, "password": {"a brand new passphrase"}}), http.StatusBadRequest)
		expect(t, "setup", b.post(accounts.PasswordSetupPath, url.Values{"token": {reset}, "password": {"a brand new passphrase"}}), http.StatusBadRequest)
		after, err := acc.Identity.UserByID(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.EmailVerified() || after.PasswordChangedAt != nil {
			t.Errorf("a link issued before the account changed it: %+v", after)
		}

		// Links issued now work.
		verify, err = h.issueToken(ctx, u.ID, purposeVerifyEmail, u.Email, "", VerifyEmailTTL)
		if err != nil {
			t.Fatal(err)
		}
		expect(t, "fresh verify page", b.get(pathVerifyEmail+"?token="+url.QueryEscape(verify)), http.StatusOK)
		expect(t, "fresh verify", b.post(pathVerifyEmail, url.Values{"token": {verify}}), http.StatusOK)
	})
}
