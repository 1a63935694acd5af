package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

var pendingField = regexp.MustCompile(`name="pending" value="([^"]+)"`)

// factorEnv is a web shell over an accounts service whose clock moves one
// TOTP step per code.
type factorEnv struct {
	h   *Handler
	srv *httptest.Server
	acc *accounts.Service
	clk *stepClock
}

func newFactorEnv(t *testing.T, s *storage.Store, cfg accounts.Config) *factorEnv {
	t.Helper()
	clk := &stepClock{}
	cfg.Argon2 = accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}
	cfg.Now, cfg.Logger = clk.Now, quietLogger()
	acc, err := accounts.New(context.Background(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHandler(t, s, func(o *Options) { o.Accounts = acc })
	return &factorEnv{h: h, srv: serve(t, h), acc: acc, clk: clk}
}

// userWithTOTP creates a verified account with an authenticator app and
// returns it with the app's secret.
func (e *factorEnv) userWithTOTP(t *testing.T, name string) (accounts.User, string) {
	t.Helper()
	ctx := context.Background()
	u, _, err := e.acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: name + "@example.com", Username: name, Password: "correct horse battery", Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	en, err := e.acc.SecondFactors.BeginTOTP(ctx, u, "enclave")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.acc.SecondFactors.ConfirmTOTP(ctx, u, e.clk.next(t, en.Secret)); err != nil {
		t.Fatal(err)
	}
	return u, en.Secret
}

func hasSession(b *browser) bool {
	for _, c := range b.cookies() {
		if c.Name == accounts.SessionCookieName && c.Value != "" {
			return true
		}
	}
	return false
}

// The password alone starts no session when the account has a second
// factor; the pending sign-in token is the only thing the second step
// trusts, and a forged one gets nowhere.
func TestLoginAsksForSecondFactor(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newFactorEnv(t, s, accounts.Config{})
		_, secret := e.userWithTOTP(t, "ana")
		b := newBrowser(t, e.srv)
		a := b.post(pathLogin, url.Values{"email": {"ana@example.com"}, "password": {"correct horse battery"}, "redirectTo": {"/account/apps"}})
		expect(t, "password step", a, http.StatusOK, `name="code"`, `action="/login/two-factor"`)
		if hasSession(b) {
			t.Fatal("a session after the password alone")
		}
		m := pendingField.FindStringSubmatch(a.Body)
		if m == nil {
			t.Fatal("no pending token on the page")
		}
		pending := m[1]

		// A made-up token, or a code without one, signs nobody in.
		forged := newBrowser(t, e.srv)
		a = forged.post(pathLogin2FA, url.Values{"pending": {"made-up"}, "code": {e.clk.next(t, secret)}})
		expect(t, "forged pending", a, http.StatusBadRequest, "This sign-in expired")
		if hasSession(forged) {
			t.Fatal("a forged pending sign-in started a session")
		}
		a = b.post(pathLogin2FA, url.Values{"pending": {pending}, "code": {"000000"}})
		expect(t, "wrong code", a, http.StatusUnauthorized, "not correct")
		a = b.post(pathLogin2FA, url.Values{"pending": {pending}, "code": {e.clk.next(t, secret)}, "redirectTo": {"/account/apps"}})
		if a.Status != http.StatusSeeOther || a.Location != "/account/apps" || !hasSession(b) {
			t.Fatalf("second step: %d %q session %v", a.Status, a.Location, hasSession(b))
		}
		// The pending sign-in was used up.
		other := newBrowser(t, e.srv)
		a = other.post(pathLogin2FA, url.Values{"pending": {pending}, "code": {e.clk.next(t, secret)}})
		expect(t, "reused pending", a, http.StatusBadRequest)
		if hasSession(other) {
			t.Fatal("a used pending sign-in started a second session")
		}
	})
}

// Codes count in the shared credential bucket.
func TestSecondFactorRateLimited(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	e := newFactorEnv(t, s, accounts.Config{})
	b := newBrowser(t, e.srv)
	var last answer
	for range DefaultCredentialRequests + 1 {
		last = b.post(pathLogin2FA, url.Values{"pending": {"x"}, "code": {"123456"}})
	}
	if last.Status != http.StatusTooManyRequests || last.Header.Get("Retry-After") == "" {
		t.Fatalf("after %d codes: %d", DefaultCredentialRequests+1, last.Status)
	}
	// The same bucket as passwords: the login form is refused too.
	a := b.post(pathLogin, url.Values{"email": {"x@example.com"}, "password": {"y"}})
	if a.Status != http.StatusTooManyRequests {
		t.Fatalf("login after codes: %d", a.Status)
	}
}

// The security page enrols an authenticator app through the capabilities;
// the QR code is served from this origin as a PNG; disabling it needs
// password and code, mails the account and ends other sessions.
func TestSecurityPageTOTP(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newFactorEnv(t, s, accounts.Config{})
		if _, _, err := e.acc.Identity.CreateUser(t.Context(), accounts.CreateUserInput{Email: "ben@example.com", Username: "ben", Password: "correct horse battery", Verified: true}); err != nil {
			t.Fatal(err)
		}
		b := newBrowser(t, e.srv)
		a := b.post(pathLogin, url.Values{"email": {"ben@example.com"}, "password": {"correct horse battery"}})
		if a.Status != http.StatusSeeOther {
			t.Fatalf("login: %d", a.Status)
		}
		expect(t, "security page", b.get(pathSecurity), http.StatusOK, `id="totp-begin"`, `src="/static/passkey.js?v=`)
		if a := b.get(pathSecurityTOTPQR); a.Status != http.StatusNotFound {
			t.Fatalf("QR before enrolment: %d", a.Status)
		}
		if a := b.post(pathSecurityTOTP, url.Values{"password": {"not the password"}}); a.Status != http.StatusUnauthorized {
			t.Fatalf("begin with a wrong password: %d", a.Status)
		}
		if a := b.post(pathSecurityTOTP, url.Values{"password": {"correct horse battery"}}); a.Status != http.StatusSeeOther {
			t.Fatalf("begin: %d", a.Status)
		}
		a = b.get(pathSecurity)
		m := regexp.MustCompile(`id="totp-secret">([A-Z2-7]+)<`).FindStringSubmatch(a.Body)
		if m == nil {
			t.Fatalf("no secret on the page:\n%s", a.Body)
		}
		secret := m[1]
		qr := b.get(pathSecurityTOTPQR)
		if qr.Status != http.StatusOK || qr.Header.Get("Content-Type") != "image/png" || !strings.HasPrefix(qr.Body, "\x89PNG") {
			t.Fatalf("QR: %d %s", qr.Status, qr.Header.Get("Content-Type"))
		}
		a = b.post(pathSecurityTOTPConfirm, url.Values{"code": {e.clk.next(t, secret)}})
		expect(t, "confirm", a, http.StatusOK, `id="recovery-codes"`, "shown only once")
		if n := strings.Count(a.Body, "<li><code>"); n != accounts.RecoveryCodeCount {
			t.Fatalf("%d recovery codes shown", n)
		}
		// The codes are shown once: the page no longer has them.
		if strings.Contains(b.get(pathSecurity).Body, `id="recovery-codes"`) {
			t.Fatal("recovery codes shown again")
		}

		other := b.clone()
		a = b.post(pathSecurityTOTPDisable, url.Values{"password": {"wrong password!"}, "code": {e.clk.next(t, secret)}})
		expect(t, "disable, wrong password", a, http.StatusUnauthorized, "current password is not correct")
		a = b.post(pathSecurityTOTPDisable, url.Values{"password": {"correct horse battery"}, "code": {e.clk.next(t, secret)}})
		if a.Status != http.StatusSeeOther || !strings.Contains(a.Location, "totp-disabled") {
			t.Fatalf("disable: %d %s\n%s", a.Status, a.Location, a.Body)
		}
		// This browser got a new session; the copy of the old one died.
		expect(t, "this browser", b.get(pathSecurity), http.StatusOK, `id="totp-begin"`)
		if a := other.get(pathAccount); a.Status != http.StatusSeeOther {
			t.Fatalf("older session after disabling: %d", a.Status)
		}
		mailed := false
		for _, msg := range e.h.DevMail().Messages() {
			if strings.Contains(msg.To, "ben@example.com") && strings.Contains(msg.Text, "authenticator app was turned off") {
				mailed = true
			}
		}
		if !mailed {
			t.Fatal("no mail about the disabled factor")
		}
	})
}

// Another account's passkey cannot be renamed or removed through the page.
func TestSecurityPagePasskeyCrossUser(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newFactorEnv(t, s, accounts.Config{})
		ctx := context.Background()
		alice, _, err := e.acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "alice@example.com", Username: "alice", Password: "correct horse battery", Verified: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "bob@example.com", Username: "bob", Password: "correct horse battery", Verified: true}); err != nil {
			t.Fatal(err)
		}
		var id int64
		if err := s.DB.NewRaw("INSERT INTO user_passkeys (user_id, credential_id, name, credential, created_at) VALUES (?, 'c1', 'Alice key', '{}', ?) RETURNING id",
			alice.ID, time.Now().UTC()).Scan(ctx, &id); err != nil {
			t.Fatal(err)
		}
		bob := newBrowser(t, e.srv)
		bob.post(pathLogin, url.Values{"email": {"bob@example.com"}, "password": {"correct horse battery"}})
		path := pathSecurityPasskeys + "/" + strconv.FormatInt(id, 10)
		if a := bob.post(path+"/rename", url.Values{"name": {"Bob's now"}}); a.Status != http.StatusNotFound {
			t.Fatalf("bob renames alice's passkey: %d", a.Status)
		}
		if a := bob.post(path+"/remove", url.Values{"password": {"correct horse battery"}}); a.Status != http.StatusNotFound {
			t.Fatalf("bob removes alice's passkey: %d", a.Status)
		}
		if strings.Contains(bob.get(pathSecurity).Body, "Alice key") {
			t.Fatal("bob sees alice's passkey")
		}
		ks, _ := e.acc.SecondFactors.Passkeys(ctx, alice.ID)
		if len(ks) != 1 || ks[0].Name != "Alice key" {
			t.Fatalf("alice's passkeys changed: %+v", ks)
		}
	})
}

// With RequireAdminSecondFactor an admin without a factor is sent to
// enrolment before any admin page answers; with one, the pages answer.
func TestAdminPagesRequireSecondFactor(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	e := newFactorEnv(t, s, accounts.Config{RequireAdminSecondFactor: true})
	ctx := context.Background()
	u, _, err := e.acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "ada@example.com", Username: "ada", Password: "correct horse battery", Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.acc.Roles.GrantAdminAsOperator(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, e.srv)
	b.post(pathLogin, url.Values{"email": {"ada@example.com"}, "password": {"correct horse battery"}})
	for _, p := range []string{"/admin/users", "/admin/roles", "/admin/users/" + u.StableID} {
		a := b.get(p)
		if a.Status != http.StatusSeeOther || a.Location != pathSecurity+"?notice="+secondFactorRequiredNotice {
			t.Fatalf("GET %s without a factor: %d %q", p, a.Status, a.Location)
		}
	}
	if a := b.post("/admin/users/"+u.StableID+"/suspend", nil); a.Status != http.StatusForbidden || !strings.Contains(a.Body, "second factor") {
		t.Fatalf("POST without a factor: %d", a.Status)
	}
	expect(t, "enrolment page", b.get(pathSecurity+"?notice="+secondFactorRequiredNotice), http.StatusOK, "requires admins to use a second factor")
	en, err := e.acc.SecondFactors.BeginTOTP(ctx, u, "enclave")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.acc.SecondFactors.ConfirmTOTP(ctx, u, e.clk.next(t, en.Secret)); err != nil {
		t.Fatal(err)
	}
	if a := b.get("/admin/users"); a.Status != http.StatusOK {
		t.Fatalf("admin page with a factor: %d", a.Status)
	}
}

// A password reset by mail turns off the authenticator app, and the
// account is told by mail.
func TestPasswordResetClearsFactorsAndMails(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newFactorEnv(t, s, accounts.Config{})
		u, _ := e.userWithTOTP(t, "cid")
		b := newBrowser(t, e.srv)
		if a := b.post(pathResetRequest, url.Values{"email": {"cid@example.com"}}); a.Status != http.StatusOK {
			t.Fatalf("reset request: %d", a.Status)
		}
		path, token := mailedLink(t, e.h, "cid@example.com")
		a := b.post(path, url.Values{"token": {token}, "password": {"a brand new password"}})
		if a.Status != http.StatusSeeOther {
			t.Fatalf("reset: %d\n%s", a.Status, a.Body)
		}
		if f, err := e.acc.SecondFactors.FactorsOf(t.Context(), u.ID); err != nil || f.Any() || f.RecoveryCodesLeft != 0 {
			t.Fatalf("factors after reset: %+v %v", f, err)
		}
		told := false
		for _, m := range e.h.DevMail().Messages() {
			if strings.Contains(m.To, "cid@example.com") && strings.Contains(m.Text, "turned off the authenticator app") {
				told = true
			}
		}
		if !told {
			t.Fatal("the owner was not told that the reset removed the second factors")
		}
		// The new password alone signs in now.
		a = b.post(pathLogin, url.Values{"email": {"cid@example.com"}, "password": {"a brand new password"}})
		if a.Status != http.StatusSeeOther || !hasSession(b) {
			t.Fatalf("login after reset: %d", a.Status)
		}
	})
}
