package web

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/mail"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// browser is a test client with its own cookies that posts forms the way a
// browser does on a same-origin page.
type browser struct {
	t   *testing.T
	srv *httptest.Server
	c   *http.Client
}

func newBrowser(t *testing.T, srv *httptest.Server) *browser {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &browser{t: t, srv: srv, c: c}
}

type answer struct {
	Status   int
	Body     string
	Location string
	Header   http.Header
}

func (b *browser) do(req *http.Request) answer {
	b.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(body), resp.Header.Get("Location"), resp.Header}
}

func (b *browser) get(path string) answer {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	req.Header.Set("Sec-Fetch-Site", "none")
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) answer {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", b.srv.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return b.do(req)
}

// cookies returns b's cookies for the server.
func (b *browser) cookies() []*http.Cookie {
	u, _ := url.Parse(b.srv.URL)
	return b.c.Jar.Cookies(u)
}

// clone returns a browser holding a copy of b's cookies now.
func (b *browser) clone() *browser {
	nb := newBrowser(b.t, b.srv)
	u, _ := url.Parse(b.srv.URL)
	nb.c.Jar.SetCookies(u, b.cookies())
	return nb
}

func expect(t *testing.T, what string, a answer, status int, contains ...string) {
	t.Helper()
	if a.Status != status {
		t.Fatalf("%s: status %d, want %d\n%s", what, a.Status, status, a.Body)
	}
	for _, c := range contains {
		if !strings.Contains(a.Body, c) {
			t.Fatalf("%s: body lacks %q\n%s", what, c, a.Body)
		}
	}
}

var tokenInLink = regexp.MustCompile(`http://enclave\.test(/[^\s?]+)\?token=([A-Za-z0-9_%-]+)`)

// mailedLink returns the path and token of the link in the newest mail to
// addr that carries one (notices carry none).
func mailedLink(t *testing.T, h *Handler, addr string) (path, token string) {
	t.Helper()
	for _, m := range h.DevMail().Messages() {
		if a, err := mail.ParseAddress(m.To); err != nil || !strings.EqualFold(a.Address, addr) {
			continue
		}
		if match := tokenInLink.FindStringSubmatch(m.Text); match != nil {
			tok, _ := url.QueryUnescape(match[2])
			return match[1], tok
		}
	}
	t.Fatalf("no mail with a link to %s", addr)
	return "", ""
}

func userID(t *testing.T, h *Handler, email string) int64 {
	t.Helper()
	u, err := h.opts.Accounts.Identity.UserByEmail(t.Context(), email)
	if err != nil {
		t.Fatal(err)
	}
	return u.ID
}

func mailCount(h *Handler) int { return len(h.DevMail().Messages()) }

func TestAccountFlow(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		clock := newFakeClock()
		acc := newAccounts(t, s, clock.Now)
		// The root package revokes OAuth grants in this hook; count its runs.
		var hookRuns atomic.Int64
		acc.OnPasswordChange(func(context.Context, bun.Tx, int64) error { hookRuns.Add(1); return nil })
		h := newTestHandler(t, s, func(o *Options) {
			o.Now = clock.Now
			o.Accounts = acc
			o.CredentialLimit = Limit{Requests: 1000}
		})
		srv := serve(t, h)
		ann := newBrowser(t, srv)
		const pw, pw2, pw3 = "correct horse battery", "another long passphrase", "third long passphrase"

		// Sign up; the answer for a registered email is the same, byte for
		// byte, and the owner of the address is told by mail.
		a := ann.post("/signup", url.Values{"email": {"ann@example.com"}, "username": {"ann"}, "password": {pw}})
		expect(t, "signup", a, http.StatusOK, "Check your email")
		if len(ann.cookies()) != 0 {
			t.Fatal("signup set a cookie: it would tell a registered email apart")
		}
		fresh := a.Body
		mails := mailCount(h)
		again := newBrowser(t, srv).post("/signup", url.Values{"email": {"ann@example.com"}, "username": {"ann2"}, "password": {pw}})
		expect(t, "signup again", again, http.StatusOK)
		if again.Body != fresh {
			t.Fatal("signup with a registered email answers differently")
		}
		if mailCount(h) != mails+1 {
			t.Fatalf("signup with a registered email sent %d mails, want 1 to the owner", mailCount(h)-mails)
		}
		if m, _ := h.DevMail().Last("ann@example.com"); !strings.Contains(m.Subject, "tried to sign up") || tokenInLink.MatchString(m.Text) {
			t.Fatalf("mail to the owner of a registered address: %q\n%s", m.Subject, m.Text)
		}
		// The username is checked before the email: a collision on both
		// names the (public) username.
		expect(t, "taken username and email", newBrowser(t, srv).post("/signup", url.Values{"email": {"ann@example.com"}, "username": {"ann"}, "password": {pw}}),
			http.StatusConflict, "This username is taken.")
		expect(t, "taken username", newBrowser(t, srv).post("/signup", url.Values{"email": {"bob@example.com"}, "username": {"ann"}, "password": {pw}}),
			http.StatusConflict, "This username is taken.")
		expect(t, "weak password", newBrowser(t, srv).post("/signup", url.Values{"email": {"bob@example.com"}, "username": {"bob"}, "password": {"short"}}),
			http.StatusUnprocessableEntity, "bob@example.com")

		// Sign in before verifying: allowed; email change is refused until verified.
		expect(t, "login page", ann.get("/login"), http.StatusOK, `name="password"`)
		expect(t, "wrong password", ann.post("/login", url.Values{"email": {"ann@example.com"}, "password": {"nope-nope-nope"}}), http.StatusUnauthorized, "Invalid email or password.")
		a = ann.post("/login", url.Values{"email": {"ann@example.com"}, "password": {pw}})
		if a.Status != http.StatusSeeOther || a.Location != "/account" {
			t.Fatalf("login: %d %q", a.Status, a.Location)
		}
		expect(t, "account", ann.get("/account"), http.StatusOK, "ann@example.com", "Not verified")
		expect(t, "change email unverified", ann.post("/account/email", url.Values{"email": {"ann2@example.com"}, "password": {pw}}), http.StatusForbidden, "Verify your current email address first.")

		// Verify through the mailed link: GET shows a button, POST uses the token once.
		path, token := mailedLink(t, h, "ann@example.com")
		if path != "/verify-email" {
			t.Fatalf("verification link path %s", path)
		}
		expect(t, "verify page", ann.get(path+"?token="+url.QueryEscape(token)), http.StatusOK, "Verify my email")
		expect(t, "verify", ann.post(path, url.Values{"token": {token}}), http.StatusOK, "is verified")
		expect(t, "verify twice", ann.post(path, url.Values{"token": {token}}), http.StatusBadRequest, "invalid or has expired")
		expect(t, "account verified", ann.get("/account"), http.StatusOK, "Verified")

		// Change password: this browser stays signed in, a copy of the old cookie dies.
		before := ann.clone()
		clock.Advance(time.Second)
		expect(t, "wrong current password", ann.post("/account/password", url.Values{"current": {"bad"}, "next": {pw2}}), http.StatusUnauthorized, "current password is not correct")
		a = ann.post("/account/password", url.Values{"current": {pw}, "next": {pw2}})
		if a.Status != http.StatusSeeOther || !strings.HasPrefix(a.Location, "/account") {
			t.Fatalf("change password: %d %q %s", a.Status, a.Location, a.Body)
		}
		expect(t, "still signed in", ann.get("/account"), http.StatusOK, "ann@example.com")
		if hookRuns.Load() != 1 {
			t.Fatalf("password-change hooks ran %d times, want 1", hookRuns.Load())
		}
		if a := before.get("/account"); a.Status != http.StatusSeeOther || !strings.HasPrefix(a.Location, "/login") {
			t.Fatalf("old session after password change: %d %q", a.Status, a.Location)
		}

		// Change email: it takes the current password; the new address gets
		// a link, the old one a notice, and the address changes (verified)
		// when the link is used. The old address stays claimed.
		expect(t, "change email without password", ann.post("/account/email", url.Values{"email": {"ann.new@example.com"}}),
			http.StatusUnauthorized, "current password is not correct")
		a = ann.post("/account/email", url.Values{"email": {"ann.new@example.com"}, "password": {pw2}})
		if a.Status != http.StatusSeeOther || a.Location != "/account?notice=email-change-sent" {
			t.Fatalf("change email: %d %q %s", a.Status, a.Location, a.Body)
		}
		if m, _ := h.DevMail().Last("ann@example.com"); !strings.Contains(m.Subject, "change of your email") {
			t.Fatalf("the old address was not told: %q", m.Subject)
		}
		expect(t, "account before confirming", ann.get("/account"), http.StatusOK, `<dd id="email">ann@example.com</dd>`)
		path, token = mailedLink(t, h, "ann.new@example.com")
		if path != "/account/email/confirm" {
			t.Fatalf("no confirmation link to the new address: %s", path)
		}
		expect(t, "confirm email page", ann.get(path+"?token="+url.QueryEscape(token)), http.StatusOK, "ann.new@example.com", "Confirm my new email")
		expect(t, "confirm email", ann.post(path, url.Values{"token": {token}}), http.StatusOK, "Your account now uses ann.new@example.com")
		expect(t, "confirm email twice", ann.post(path, url.Values{"token": {token}}), http.StatusBadRequest, "invalid or has expired")
		expect(t, "account after email change", ann.get("/account"), http.StatusOK, `<dd id="email">ann.new@example.com</dd>`, "ann@example.com", "Verified")
		if m, _ := h.DevMail().Last("ann@example.com"); !strings.Contains(m.Subject, "was changed") {
			t.Fatalf("the old address was not told of the change: %q", m.Subject)
		}

		// Reset: same answer for unknown addresses, and no mail.
		mails = mailCount(h)
		unknown := newBrowser(t, srv).post("/password-reset", url.Values{"email": {"nobody@example.com"}})
		expect(t, "reset unknown", unknown, http.StatusOK, "If an account uses nobody@example.com")
		if mailCount(h) != mails {
			t.Fatal("reset for an unknown address sent mail")
		}
		expect(t, "reset", newBrowser(t, srv).post("/password-reset", url.Values{"email": {"ann.new@example.com"}}), http.StatusOK, "If an account uses")
		path, token = mailedLink(t, h, "ann.new@example.com")
		if path != "/password-reset/confirm" {
			t.Fatalf("reset link path %s", path)
		}
		other := newBrowser(t, srv)
		expect(t, "reset form", other.get(path+"?token="+url.QueryEscape(token)), http.StatusOK, `name="password"`)
		expect(t, "reset weak", other.post(path, url.Values{"token": {token}, "password": {"short"}}), http.StatusUnprocessableEntity)
		clock.Advance(time.Second)
		a = other.post(path, url.Values{"token": {token}, "password": {pw3}})
		if a.Status != http.StatusSeeOther || !strings.Contains(a.Location, "password-set") {
			t.Fatalf("reset confirm: %d %q %s", a.Status, a.Location, a.Body)
		}
		if hookRuns.Load() != 2 {
			t.Fatalf("a reset ran the password-change hooks %d times in all, want 2", hookRuns.Load())
		}
		expect(t, "reset reuse", other.post(path, url.Values{"token": {token}, "password": {pw3 + "x"}}), http.StatusBadRequest, "invalid or has expired")
		if a := ann.get("/account"); a.Status != http.StatusSeeOther {
			t.Fatalf("session survived a reset: %d", a.Status)
		}
		expect(t, "old password after reset", newBrowser(t, srv).post("/login", url.Values{"email": {"ann.new@example.com"}, "password": {pw2}}), http.StatusUnauthorized)
		if a := newBrowser(t, srv).post("/login", url.Values{"email": {"ann.new@example.com"}, "password": {pw3}}); a.Status != http.StatusSeeOther {
			t.Fatalf("login with the reset password: %d", a.Status)
		}

		// Links expire: reset after an hour, verification after a day.
		newBrowser(t, srv).post("/password-reset", url.Values{"email": {"ann.new@example.com"}})
		path, token = mailedLink(t, h, "ann.new@example.com")
		clock.Advance(ResetPasswordTTL + time.Second)
		expect(t, "expired reset", newBrowser(t, srv).get(path+"?token="+url.QueryEscape(token)), http.StatusBadRequest)
		expect(t, "expired reset post", newBrowser(t, srv).post(path, url.Values{"token": {token}, "password": {pw3 + "y"}}), http.StatusBadRequest)
		expect(t, "expired reset via setup path", newBrowser(t, srv).post(accounts.PasswordSetupPath, url.Values{"token": {token}, "password": {pw3 + "y"}}), http.StatusBadRequest)

		// The verification link to ann.new@example.com, re-issued now, works
		// for a day and no longer.
		uid := userID(t, h, "ann.new@example.com")
		stale, err := h.issueToken(t.Context(), uid, purposeVerifyEmail, "ann.new@example.com", "", VerifyEmailTTL)
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(VerifyEmailTTL + time.Second)
		expect(t, "expired verification", newBrowser(t, srv).post("/verify-email", url.Values{"token": {stale}}), http.StatusBadRequest)
		fresh2, err := h.issueToken(t.Context(), uid, purposeVerifyEmail, "ann.new@example.com", "", VerifyEmailTTL)
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(VerifyEmailTTL - time.Second)
		expect(t, "verification within a day", newBrowser(t, srv).post("/verify-email", url.Values{"token": {fresh2}}), http.StatusOK, "is verified")

		// Sign out.
		b := newBrowser(t, srv)
		b.post("/login", url.Values{"email": {"ann.new@example.com"}, "password": {pw3}})
		expect(t, "signed in", b.get("/account"), http.StatusOK)
		if a := b.post("/logout", nil); a.Status != http.StatusSeeOther {
			t.Fatalf("logout: %d", a.Status)
		}
		if a := b.get("/account"); a.Status != http.StatusSeeOther {
			t.Fatalf("account after logout: %d", a.Status)
		}
	})
}

// Login keeps only local redirect targets.
func TestLoginRedirect(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	h := newTestHandler(t, s, nil)
	if _, err := h.opts.Accounts.Identity.Signup(t.Context(), accounts.SignupInput{Email: "c@example.com", Username: "cee", Password: "correct horse battery"}); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, h)
	for _, tt := range []struct{ target, want string }{
		{"/account?x=1", "/account?x=1"},
		{"//evil.example/", "/account"},
		{"https://evil.example/", "/account"},
		{"/\\evil.example", "/account"},
	} {
		b := newBrowser(t, srv)
		a := b.post("/login", url.Values{"email": {"c@example.com"}, "password": {"correct horse battery"}, "redirectTo": {tt.target}})
		if a.Status != http.StatusSeeOther || a.Location != tt.want {
			t.Errorf("redirectTo %q: %d → %q, want %q", tt.target, a.Status, a.Location, tt.want)
		}
	}
	// A guarded page sends signed-out browsers to login with the way back.
	a := newBrowser(t, srv).get("/account")
	if a.Status != http.StatusSeeOther || a.Location != "/login?redirectTo=%2Faccount" {
		t.Fatalf("guarded page: %d %q", a.Status, a.Location)
	}
	expect(t, "login form keeps target", newBrowser(t, srv).get("/login?redirectTo=%2Faccount"), http.StatusOK, `name="redirectTo" value="/account"`)
}

// Only the newest reset link works, on the reset path and on the
// password-setup path alike.
func TestOnlyNewestResetLinkWorks(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	h := newTestHandler(t, s, nil)
	if _, err := h.opts.Accounts.Identity.Signup(t.Context(), accounts.SignupInput{Email: "d@example.com", Username: "dee", Password: testPassword}); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, h)
	b := newBrowser(t, srv)
	b.post("/password-reset", url.Values{"email": {"d@example.com"}})
	_, first := mailedLink(t, h, "d@example.com")
	b.post("/password-reset", url.Values{"email": {"d@example.com"}})
	_, second := mailedLink(t, h, "d@example.com")
	if first == second {
		t.Fatal("two reset requests mailed the same token")
	}
	for _, path := range []string{"/password-reset/confirm", accounts.PasswordSetupPath} {
		expect(t, "older link on "+path, b.post(path, url.Values{"token": {first}, "password": {"a brand new passphrase"}}), http.StatusBadRequest)
	}
	if a := b.post("/password-reset/confirm", url.Values{"token": {second}, "password": {"a brand new passphrase"}}); a.Status != http.StatusSeeOther {
		t.Fatalf("newest link: %d %s", a.Status, a.Body)
	}
}
