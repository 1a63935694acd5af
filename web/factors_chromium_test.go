package web

import (
	"context"
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

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// stepClock is the accounts clock of the second-factor browser test: real
// time plus an offset the test moves by one TOTP step before each code, so
// no code is refused as a replay of the previous one.
type stepClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// next moves to the next 30-second step and returns the code of secret
// there.
func (c *stepClock) next(t *testing.T, secret string) string {
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

// chromiumBrowser starts headless Chromium for a test; it fails (never skips) when
// ENCLAVE_TEST_CHROMIUM=1 and Chromium is missing.
func chromiumBrowser(t *testing.T) (ctx context.Context, fail func(name string, err error)) {
	t.Helper()
	bin := chromiumtest.Bin(t)
	browserCtx, ctx := chromiumtest.Start(t, bin, 2*time.Minute)
	fail = func(name string, err error) {
		t.Helper()
		sctx, cancel := context.WithTimeout(browserCtx, 10*time.Second)
		defer cancel()
		chromiumtest.Screenshot(t, sctx, strings.ReplaceAll(name, " ", "-"))
		if html, herr := chromedp.Run(sctx, chromedp.OuterHTML(chromedp.CSS("main"))); herr == nil {
			t.Logf("page: %s", html)
		}
		t.Fatalf("%s: %v", name, err)
	}
	return ctx, fail
}

// navigate loads target; a navigation that aborts because the previous
// one (a form's redirect) was still settling is tried again.
func navigate(t *testing.T, ctx context.Context, fail func(string, error), target string) {
	t.Helper()
	var err error
	for range 3 {
		if err = chromedp.Do(ctx, chromedp.Navigate(target)); err == nil || !strings.Contains(err.Error(), "ERR_ABORTED") {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err != nil {
		fail("open "+target, err)
	}
}

// addPasskeyAuthenticator gives the browser of ctx a virtual platform
// authenticator holding discoverable credentials, with user verification.
func addPasskeyAuthenticator(ctx context.Context) error {
	if _, err := chromedp.Call(ctx, cdpwebauthn.Enable, cdpwebauthn.EnableParams{}); err != nil {
		return err
	}
	_, err := chromedp.Call(ctx, cdpwebauthn.AddVirtualAuthenticator, cdpwebauthn.AddVirtualAuthenticatorParams{
		Options: &cdpwebauthn.VirtualAuthenticatorOptions{
			Protocol: cdpwebauthn.AuthenticatorProtocolCtap2, Ctap2version: cdpwebauthn.Ctap2versionCtap21,
			Transport:      cdpwebauthn.AuthenticatorTransportInternal,
			HasResidentKey: true, HasUserVerification: true, IsUserVerified: true,
			AutomaticPresenceSimulation: true,
		},
	})
	return err
}

// A person sets up an authenticator app from the QR page (the code is
// computed from the secret the page shows), signs in with password and
// code, registers a passkey with a virtual authenticator, signs in with the
// passkey instead of a password, and uses it as the second factor.
func TestChromiumSecondFactors(t *testing.T) {
	ctx, fail := chromiumBrowser(t)
	s := storagetest.Open(t, storage.SQLite)

	// WebAuthn needs a host name (an IP address is no relying party id):
	// the browser reaches the loopback server as localhost.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.Listener.Close()
	srv.Listener = ln
	base := "http://localhost:" + strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:")
	clk := &stepClock{}
	acc, err := accounts.New(context.Background(), s, accounts.Config{
		Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1},
		Now:    clk.Now, Logger: quietLogger(),
		Passkeys: accounts.PasskeyConfig{RPID: "localhost", Origins: []string{base}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The journey makes more credential requests than one minute's bucket
	// holds; the limit itself is tested elsewhere.
	h := newTestHandler(t, s, func(o *Options) {
		o.BaseURL, o.Accounts = base, acc
		o.CredentialLimit = Limit{Requests: 100, Window: time.Minute}
	})
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(srv.Close)

	const email, password = "quinn@example.com", "correct horse battery"
	if _, _, err := acc.Identity.CreateUser(t.Context(), accounts.CreateUserInput{Email: email, Username: "quinn", Password: password, Verified: true}); err != nil {
		t.Fatal(err)
	}
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			fail(name, err)
		}
	}
	submit := func(form string) chromedp.Action[chromedp.Void] {
		return chromedp.Click(chromedp.CSS(`form[action="` + form + `"] button[type="submit"]`))
	}
	xpath := func(q string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.Search(q)) }
	signOut := chromedp.Action[chromedp.Void](submit("/logout"))
	passwordStep := func(name string) {
		t.Helper()
		navigate(t, ctx, fail, base+"/login")
		step(name,
			chromedp.WaitVisible(chromedp.ID("password")),
			chromedp.SendKeys(chromedp.ID("email"), email),
			chromedp.SendKeys(chromedp.ID("password"), password),
			submit("/login"),
		)
	}

	passwordStep("sign in")
	step("reach the account", chromedp.WaitVisible(chromedp.ID("verification")))
	step("start the authenticator app",
		chromedp.Navigate(base+"/account/security"),
		chromedp.SendKeys(chromedp.ID("totp-password"), password),
		chromedp.Click(chromedp.ID("totp-begin")),
		chromedp.WaitVisible(chromedp.ID("totp-secret")),
	)
	secret, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("totp-secret")))
	if err != nil {
		fail("read the secret", err)
	}
	secret = strings.TrimSpace(secret)
	// The image loads after the page: wait for it (a loaded image has its
	// natural size; one the CSP or the server refused never gets one).
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`(() => { const i = document.getElementById("totp-qr"); return i.complete && i.naturalWidth >= 100; })()`,
		chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		fail("the QR code image did not load", err)
	}
	step("confirm the authenticator app",
		chromedp.SendKeys(chromedp.ID("totp-code"), clk.next(t, secret)),
		chromedp.Click(chromedp.ID("totp-confirm")),
		chromedp.WaitVisible(chromedp.ID("recovery-codes")),
	)
	codes, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("recovery-codes")))
	if err != nil || len(strings.Fields(codes)) != accounts.RecoveryCodeCount {
		fail("read the recovery codes", err)
	}

	step("sign out", signOut, chromedp.WaitVisible(chromedp.CSS(`input#email`)))
	passwordStep("sign in with the password")
	step("the code is asked for", chromedp.WaitVisible(chromedp.ID("code")))
	step("a wrong code is refused",
		chromedp.SendKeys(chromedp.ID("code"), "000000"),
		chromedp.Click(chromedp.ID("code-submit")),
		xpath(`//p[@class="error"]`),
	)
	step("the right code signs in",
		chromedp.SendKeys(chromedp.ID("code"), clk.next(t, secret)),
		chromedp.Click(chromedp.ID("code-submit")),
		chromedp.WaitVisible(chromedp.ID("verification")),
	)

	if err := addPasskeyAuthenticator(ctx); err != nil {
		fail("add a virtual authenticator", err)
	}
	// With the app on, a passkey takes a code from it besides the password.
	step("register a passkey",
		chromedp.Navigate(base+"/account/security"),
		chromedp.SendKeys(chromedp.ID("passkey-name"), "Test key"),
		chromedp.SendKeys(chromedp.ID("passkey-password"), password),
		chromedp.SendKeys(chromedp.ID("passkey-code"), clk.next(t, secret)),
		chromedp.Click(chromedp.ID("passkey-add")),
		xpath(`//p[contains(., "The passkey is added.")]`),
		chromedp.WaitVisible(chromedp.CSS(`tr.passkey input[value="Test key"]`)),
	)

	step("sign out again", signOut, chromedp.WaitVisible(chromedp.CSS(`input#email`)))
	navigate(t, ctx, fail, base+"/login")
	step("sign in with the passkey instead of a password",
		chromedp.WaitVisible(chromedp.ID("passkey-login")),
		chromedp.Click(chromedp.ID("passkey-login")),
		chromedp.WaitVisible(chromedp.ID("verification")),
	)

	step("sign out once more", signOut, chromedp.WaitVisible(chromedp.CSS(`input#email`)))
	passwordStep("sign in with the password, then the passkey")
	step("the passkey is the second factor",
		chromedp.Click(chromedp.ID("passkey-second-factor")),
		chromedp.WaitVisible(chromedp.ID("verification")),
	)
	// New recovery codes take a proof of a factor: here the passkey, whose
	// assertion the page puts in the form.
	step("new recovery codes, confirmed with the passkey",
		chromedp.Navigate(base+"/account/security"),
		chromedp.SendKeys(chromedp.ID("recovery-password"), password),
		chromedp.Click(chromedp.ID("recovery-passkey")),
		chromedp.WaitVisible(chromedp.ID("recovery-codes")),
	)
	fresh, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("recovery-codes")))
	if err != nil || len(strings.Fields(fresh)) != accounts.RecoveryCodeCount || fresh == codes {
		fail("read the new recovery codes", err)
	}
	u, _ := acc.Identity.UserByEmail(t.Context(), email)
	ks, err := acc.SecondFactors.Passkeys(t.Context(), u.ID)
	if err != nil || len(ks) != 1 || ks[0].LastUsedAt == nil {
		t.Fatalf("passkeys after use: %+v %v", ks, err)
	}
}
