package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// signInTwoStep signs b in with the password and a code of secret.
func (e *factorEnv) signInTwoStep(t *testing.T, b *browser, email, secret string) {
	t.Helper()
	a := b.post(pathLogin, url.Values{"email": {email}, "password": {"correct horse battery"}})
	m := pendingField.FindStringSubmatch(a.Body)
	if m == nil {
		t.Fatalf("no second step: %d", a.Status)
	}
	if a := b.post(pathLogin2FA, url.Values{"pending": {m[1]}, "code": {e.clk.next(t, secret)}}); a.Status != http.StatusSeeOther {
		t.Fatalf("second step: %d", a.Status)
	}
}

func (b *browser) postJSON(path string, v any) answer {
	b.t.Helper()
	body, _ := json.Marshal(v)
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+path, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", b.srv.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return b.do(req)
}

// On the security page, with an authenticator app on, new recovery codes
// and a new passkey take a code besides the password: the password alone
// (a borrowed session, a phished password) is refused, so is a wrong
// code; the right one works once.
func TestSecurityPageAddingAFactorNeedsAProof(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newFactorEnv(t, s, accounts.Config{})
		_, secret := e.userWithTOTP(t, "ivy")
		b := newBrowser(t, e.srv)
		e.signInTwoStep(t, b, "ivy@example.com", secret)
		expect(t, "security page", b.get(pathSecurity), http.StatusOK, `id="recovery-code"`, `id="passkey-code"`)

		const pw = "correct horse battery"
		a := b.post(pathSecurityRecovery, url.Values{"password": {pw}})
		expect(t, "recovery codes, password alone", a, http.StatusUnauthorized, "Confirm it is you")
		if strings.Contains(a.Body, `id="recovery-codes"`) {
			t.Fatal("codes made with the password alone")
		}
		a = b.post(pathSecurityRecovery, url.Values{"password": {pw}, "code": {"000000"}})
		expect(t, "recovery codes, wrong code", a, http.StatusUnauthorized, "not correct")
		code := e.clk.next(t, secret)
		a = b.post(pathSecurityRecovery, url.Values{"password": {"wrong password"}, "code": {code}})
		expect(t, "recovery codes, wrong password", a, http.StatusUnauthorized, "current password is not correct")
		a = b.post(pathSecurityRecovery, url.Values{"password": {pw}, "code": {code}})
		expect(t, "recovery codes with a code", a, http.StatusOK, `id="recovery-codes"`)

		a = b.postJSON(pathSecurityPasskeyOptions, map[string]string{"password": pw})
		if a.Status != http.StatusUnauthorized || !strings.Contains(a.Body, string(accounts.CodeFactorProofRequired)) {
			t.Fatalf("passkey options, password alone: %d %s", a.Status, a.Body)
		}
		a = b.postJSON(pathSecurityPasskeyOptions, map[string]string{"password": pw, "code": e.clk.next(t, secret)})
		var c accounts.PasskeyCeremony
		if a.Status != http.StatusOK || json.Unmarshal([]byte(a.Body), &c) != nil || c.Token == "" {
			t.Fatalf("passkey options with a code: %d %s", a.Status, a.Body)
		}
	})
}

// An account with a passkey only: setting up the app takes a proof too,
// and the page offers the passkey for it.
func TestSecurityPagePasskeyOnlyNeedsAProof(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newFactorEnv(t, s, accounts.Config{})
		ctx := context.Background()
		u, _, err := e.acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "pia@example.com", Username: "pia", Password: "correct horse battery", Verified: true})
		if err != nil {
			t.Fatal(err)
		}
		b := newBrowser(t, e.srv)
		b.post(pathLogin, url.Values{"email": {"pia@example.com"}, "password": {"correct horse battery"}})
		if _, err := s.DB.NewRaw("INSERT INTO user_passkeys (user_id, credential_id, name, credential, created_at) VALUES (?, 'c-pia', 'Pia key', '{}', ?)",
			u.ID, time.Now().UTC()).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		expect(t, "security page", b.get(pathSecurity), http.StatusOK, `id="totp-passkey"`, `class="passkey-proof"`, `data-proof="`+pathSecurityPasskeyProof+`"`)
		a := b.post(pathSecurityTOTP, url.Values{"password": {"correct horse battery"}})
		expect(t, "app beside a passkey, password alone", a, http.StatusUnauthorized, "Confirm it is you")
		a = b.post(pathSecurityTOTP, url.Values{"password": {"correct horse battery"}, "passkeyToken": {"forged"}, "passkeyCredential": {`{"id":"x"}`}})
		expect(t, "app beside a passkey, forged assertion", a, http.StatusUnauthorized, "could not be verified")
		if f, _ := e.acc.SecondFactors.FactorsOf(ctx, u.ID); f.TOTPPending {
			t.Fatal("a refused set-up is pending")
		}
	})
}

// Codes typed for an action count in the account's bucket of
// second-factor attempts, as the codes of pending sign-ins do: past the
// bound even the right code is refused.
func TestSecurityPageProofAttemptsBoundedPerAccount(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	e := newFactorEnvWith(t, s, accounts.Config{}, func(o *Options) { o.CredentialLimit = Limit{Requests: 10000} })
	_, secret := e.userWithTOTP(t, "una")
	b := newBrowser(t, e.srv)
	e.signInTwoStep(t, b, "una@example.com", secret) // one attempt
	for i := 1; i < SecondFactorAccountRequests; i++ {
		if a := b.post(pathSecurityRecovery, url.Values{"password": {"correct horse battery"}, "code": {"000000"}}); a.Status != http.StatusUnauthorized {
			t.Fatalf("wrong code %d: %d", i, a.Status)
		}
	}
	a := b.post(pathSecurityRecovery, url.Values{"password": {"correct horse battery"}, "code": {e.clk.next(t, secret)}})
	expect(t, "right code past the bound", a, http.StatusTooManyRequests, "Too many attempts for this account")
	if a.Header.Get("Retry-After") == "" || strings.Contains(a.Body, `id="recovery-codes"`) {
		t.Fatal("refused without Retry-After, or codes made")
	}
}
