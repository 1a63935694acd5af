package web

import (
	"context"
	"net/http"
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

// newFactorEnvWith is newFactorEnv with the handler's options edited.
func newFactorEnvWith(t *testing.T, s *storage.Store, cfg accounts.Config, edit func(*Options)) *factorEnv {
	t.Helper()
	clk := &stepClock{}
	cfg.Argon2 = accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}
	cfg.Now, cfg.Logger = clk.Now, quietLogger()
	acc, err := accounts.New(context.Background(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHandler(t, s, func(o *Options) {
		o.Accounts = acc
		if edit != nil {
			edit(o)
		}
	})
	return &factorEnv{h: h, srv: serve(t, h), acc: acc, clk: clk}
}

// Whoever knows the password can start pending sign-ins at will (each
// takes a few codes) and, from many addresses, escapes the per-client
// credential bucket: the attempts on one account's pending sign-ins are
// bounded per account. Past the bound even the right code is refused,
// and no session starts.
func TestSecondFactorAttemptsBoundedPerAccount(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		// A per-client bucket too large to matter: as if every request
		// came from another address.
		e := newFactorEnvWith(t, s, accounts.Config{}, func(o *Options) { o.CredentialLimit = Limit{Requests: 10000} })
		_, secret := e.userWithTOTP(t, "ana")
		b := newBrowser(t, e.srv)
		pendingOf := func() string {
			t.Helper()
			a := b.post(pathLogin, url.Values{"email": {"ana@example.com"}, "password": {"correct horse battery"}})
			m := pendingField.FindStringSubmatch(a.Body)
			if m == nil {
				t.Fatalf("no pending sign-in: %d %s", a.Status, a.Body)
			}
			return m[1]
		}
		wrong := 0
		for wrong < SecondFactorAccountRequests {
			p := pendingOf()
			for range 3 { // fewer than a pending sign-in's own limit
				if wrong == SecondFactorAccountRequests {
					break
				}
				a := b.post(pathLogin2FA, url.Values{"pending": {p}, "code": {"000000"}})
				if a.Status != http.StatusUnauthorized {
					t.Fatalf("wrong code %d: %d", wrong, a.Status)
				}
				wrong++
			}
		}
		p := pendingOf()
		a := b.post(pathLogin2FA, url.Values{"pending": {p}, "code": {e.clk.next(t, secret)}})
		if a.Status != http.StatusTooManyRequests || a.Header.Get("Retry-After") == "" || hasSession(b) {
			t.Fatalf("after %d wrong codes on one account, the right one: %d (session %v)", wrong, a.Status, hasSession(b))
		}
		expect(t, "refused code", a, http.StatusTooManyRequests, "Too many attempts for this account")
		// The pending sign-in itself is untouched: the page asks again.
		if pendingField.FindStringSubmatch(a.Body) == nil {
			t.Fatal("the refusal dropped the pending sign-in")
		}
		// Another account is not affected.
		_, bobSecret := e.userWithTOTP(t, "bob")
		ob := newBrowser(t, e.srv)
		a = ob.post(pathLogin, url.Values{"email": {"bob@example.com"}, "password": {"correct horse battery"}})
		m := pendingField.FindStringSubmatch(a.Body)
		if m == nil {
			t.Fatalf("bob: no pending sign-in: %d", a.Status)
		}
		a = ob.post(pathLogin2FA, url.Values{"pending": {m[1]}, "code": {e.clk.next(t, bobSecret)}})
		if a.Status != http.StatusSeeOther || !hasSession(ob) {
			t.Fatalf("bob's second step: %d", a.Status)
		}
	})
}

// Removing a passkey takes the current password: a borrowed session could
// otherwise strip the account's factors (the recovery codes go with the
// last one) and sign the owner out everywhere while it gets a new session
// itself.
func TestPasskeyRemovalNeedsPassword(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newFactorEnv(t, s, accounts.Config{})
		ctx := context.Background()
		alice, _, err := e.acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "alice@example.com", Username: "alice", Password: "correct horse battery", Verified: true})
		if err != nil {
			t.Fatal(err)
		}
		// Signed in before the passkey is added (with it, sign-in asks for it).
		b := newBrowser(t, e.srv)
		b.post(pathLogin, url.Values{"email": {"alice@example.com"}, "password": {"correct horse battery"}})
		var id int64
		if err := s.DB.NewRaw("INSERT INTO user_passkeys (user_id, credential_id, name, credential, created_at) VALUES (?, 'c1', 'Alice key', '{}', ?) RETURNING id",
			alice.ID, time.Now().UTC()).Scan(ctx, &id); err != nil {
			t.Fatal(err)
		}
		// The security page's remove form asks for it.
		if page := b.get(pathSecurity); !strings.Contains(page.Body, `/remove"`) || !regexp.MustCompile(`(?s)/remove"[^>]*>\s*<input name="password" type="password"`).MatchString(page.Body) {
			t.Fatalf("the remove form has no password field:\n%s", page.Body)
		}
		path := pathSecurityPasskeys + "/" + strconv.FormatInt(id, 10) + "/remove"
		for _, form := range []url.Values{nil, {"password": {"not the password"}}} {
			a := b.post(path, form)
			if a.Status == http.StatusSeeOther || a.Status < 400 {
				t.Fatalf("removal with password %q: %d", form.Get("password"), a.Status)
			}
			if ks, _ := e.acc.SecondFactors.Passkeys(ctx, alice.ID); len(ks) != 1 {
				t.Fatalf("removed with password %q", form.Get("password"))
			}
		}
		if a := b.post(path, url.Values{"password": {"correct horse battery"}}); a.Status != http.StatusSeeOther {
			t.Fatalf("removal with the password: %d %s", a.Status, a.Body)
		}
		if ks, _ := e.acc.SecondFactors.Passkeys(ctx, alice.ID); len(ks) != 0 {
			t.Fatalf("not removed: %+v", ks)
		}
	})
}
