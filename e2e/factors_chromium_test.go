package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	cdpwebauthn "github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave/internal/chromiumtest"
	"github.com/pquerna/otp/totp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// totpClock is an accounts clock that the test moves one TOTP step ahead
// before each code, so consecutive codes are never replays.
type totpClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *totpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *totpClock) next(t *testing.T, secret string) string {
	t.Helper()
	c.mu.Lock()
	c.offset += 30 * time.Second
	c.mu.Unlock()
	code, err := totp.GenerateCode(secret, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// On /oauth/authorize in a real Chromium: a person with an authenticator
// app signs in with password and code, allows the client and the code is
// exchanged for a token that works at /mcp; then, with a passkey
// registered through a virtual authenticator, the person signs in on
// /oauth/authorize with the passkey alone and allows another client.
func TestChromiumOAuthSecondFactors(t *testing.T) {
	bin := chromiumtest.Bin(t)
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) { oauthSecondFactors(t, d, bin) })
	}
}

func oauthSecondFactors(t *testing.T, d storage.Dialect, bin string) {
	ctx := context.Background()
	sc := storagetest.Config(t, d)
	// A relying party id must be a host name: the browser reaches the
	// loopback server as localhost.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	ts.Listener.Close()
	ts.Listener = ln
	base := fmt.Sprintf("http://localhost:%d", ln.Addr().(*net.TCPAddr).Port)
	clk := &totpClock{}
	srv := openServer(t, enclave.Config{DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL, BaseURL: base, Logger: quiet(),
		Accounts: accounts.Config{Argon2: fastArgon.Argon2, Now: clk.Now}})
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(ts.Close)
	e := &consentEnv{srv: srv, base: base, email: "two-step@example.com", password: "correct horse battery staple"}
	e.user, _, err = srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: e.email, Username: "twostep", Password: e.password, Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	enrol, err := srv.Accounts().SecondFactors.BeginTOTP(ctx, e.user, "enclave")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Accounts().SecondFactors.ConfirmTOTP(ctx, e.user, clk.next(t, enrol.Secret)); err != nil {
		t.Fatal(err)
	}
	app := newClientApp(t, "tcp4", "127.0.0.1:0", false)
	loopback := "http://127.0.0.1:" + fmt.Sprint(app.port())

	browserCtx, bctx := chromiumtest.Start(t, bin, 2*time.Minute)
	fail := func(name string, err error) {
		t.Helper()
		sctx, cancel := context.WithTimeout(browserCtx, 10*time.Second)
		defer cancel()
		chromiumtest.Screenshot(t, sctx, "oauth-2fa-"+string(d)+"-"+strings.ReplaceAll(name, " ", "-"))
		if html, herr := chromedp.Run(sctx, chromedp.OuterHTML(chromedp.CSS("body"))); herr == nil {
			t.Logf("page: %s", html)
		}
		t.Fatalf("%s: %v", name, err)
	}
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			fail(name, err)
		}
	}
	callback := func() string {
		t.Helper()
		select {
		case u := <-app.hits:
			q := u.Query()
			if q.Get("code") == "" || q.Get("error") != "" {
				t.Fatalf("callback %v", q)
			}
			return q.Get("code")
		case <-time.After(20 * time.Second):
			fail("wait for the callback", fmt.Errorf("the browser never reached %s", loopback))
			return ""
		}
	}
	allow := chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS(`button[value="approve"]`)),
		chromedp.Click(chromedp.CSS(`button[value="approve"]`)),
	)

	// Password, then the code, on the authorization endpoint.
	first := e.register(t, "Two-step Agent", loopback+"/callback")
	a := e.newAuthorization(first, loopback+"/callback", "state-two-step-totp")
	step("sign in with the password",
		chromedp.Navigate(e.url(a)),
		chromedp.WaitVisible(chromedp.ID("password")),
		chromedp.SendKeys(chromedp.ID("email"), e.email),
		chromedp.SendKeys(chromedp.ID("password"), e.password),
		chromedp.Click(chromedp.CSS(`form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.ID("code")),
	)
	step("the code", chromedp.SendKeys(chromedp.ID("code"), clk.next(t, enrol.Secret)), chromedp.Click(chromedp.ID("code-submit")))
	step("allow", allow)
	token := e.exchange(t, a, callback())
	if body := e.whoami(t, token); !strings.Contains(body, e.user.StableID) {
		t.Fatalf("whoami: %s", body)
	}

	// Register a passkey on the security page (the browser is signed in).
	if _, err := chromedp.Call(bctx, cdpwebauthn.Enable, cdpwebauthn.EnableParams{}); err != nil {
		fail("enable WebAuthn", err)
	}
	if _, err := chromedp.Call(bctx, cdpwebauthn.AddVirtualAuthenticator, cdpwebauthn.AddVirtualAuthenticatorParams{
		Options: &cdpwebauthn.VirtualAuthenticatorOptions{
			Protocol: cdpwebauthn.AuthenticatorProtocolCtap2, Ctap2version: cdpwebauthn.Ctap2versionCtap21,
			Transport: cdpwebauthn.AuthenticatorTransportInternal, HasResidentKey: true, HasUserVerification: true,
			IsUserVerified: true, AutomaticPresenceSimulation: true,
		},
	}); err != nil {
		fail("add a virtual authenticator", err)
	}
	step("register a passkey",
		chromedp.Navigate(base+"/account/security"),
		chromedp.SendKeys(chromedp.ID("passkey-name"), "Browser key"),
		chromedp.SendKeys(chromedp.ID("passkey-password"), e.password),
		// The app is on: a new factor takes a code from it too.
		chromedp.SendKeys(chromedp.ID("passkey-code"), clk.next(t, enrol.Secret)),
		chromedp.Click(chromedp.ID("passkey-add")),
		chromedp.WaitVisible(chromedp.CSS(`tr.passkey input[value="Browser key"]`)),
	)
	step("sign out",
		chromedp.Click(chromedp.CSS(`form[action="/logout"] button[type="submit"]`)),
		// The sign-in form's field: the account page has an #email too.
		chromedp.WaitVisible(chromedp.CSS(`input#email`)),
	)

	// The passkey alone, on the authorization endpoint.
	second := e.register(t, "Passkey Agent", loopback+"/callback")
	a = e.newAuthorization(second, loopback+"/callback", "state-two-step-passkey")
	for i := 0; ; i++ {
		err := chromedp.Do(bctx, chromedp.Navigate(e.url(a)))
		if err == nil {
			break
		}
		if i == 2 || !strings.Contains(err.Error(), "ERR_ABORTED") {
			fail("open the authorization request", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	step("sign in with the passkey",
		chromedp.WaitVisible(chromedp.ID("passkey-login")),
		chromedp.Click(chromedp.ID("passkey-login")),
	)
	step("allow after the passkey", allow)
	token = e.exchange(t, a, callback())
	if body := e.whoami(t, token); !strings.Contains(body, e.user.StableID) {
		t.Fatalf("whoami: %s", body)
	}
}
