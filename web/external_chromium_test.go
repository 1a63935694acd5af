package web

import (
	"net"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// In headless Chromium with a virtual authenticator: dave registers a
// passkey on his security page and signs out; he then signs in with the
// external provider, whose verified email is his, and proves his account
// on the link page with the passkey instead of the password: the identity
// is linked and he is signed in (the passkey, with user verification, is
// the sign-in: no second step).
func TestChromiumExternalLinkWithPasskey(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx, fail := chromiumBrowser(t)
			s := storagetest.Open(t, d)
			// WebAuthn needs a host name: the browser reaches the
			// loopback server as localhost.
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			base := "http://localhost:" + strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:")
			e := newExternalEnvAt(t, s, ln, base, accounts.Config{Passkeys: accounts.PasskeyConfig{RPID: "localhost", Origins: []string{base}}})
			dave := e.user(t, "dave")
			e.as("77", "dave@example.com", true)
			step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
				t.Helper()
				if err := chromedp.Do(ctx, actions...); err != nil {
					fail(name, err)
				}
			}
			if err := addPasskeyAuthenticator(ctx); err != nil {
				fail("add a virtual authenticator", err)
			}
			navigate(t, ctx, fail, base+pathLogin)
			step("sign in with the password",
				chromedp.WaitVisible(chromedp.ID("password")),
				chromedp.SendKeys(chromedp.ID("email"), "dave@example.com"),
				chromedp.SendKeys(chromedp.ID("password"), "correct horse battery"),
				chromedp.Click(chromedp.CSS(`form button[type="submit"]`)),
				chromedp.WaitVisible(chromedp.CSS(`form[action="/logout"] button`)))
			navigate(t, ctx, fail, base+pathSecurity)
			step("register a passkey",
				chromedp.SendKeys(chromedp.ID("passkey-name"), "Test key"),
				chromedp.SendKeys(chromedp.ID("passkey-password"), "correct horse battery"),
				chromedp.Click(chromedp.ID("passkey-add")),
				chromedp.WaitVisible(chromedp.CSS(`tr.passkey input[value="Test key"]`)))
			step("sign out",
				chromedp.Click(chromedp.CSS(`form[action="/logout"] button`)),
				chromedp.WaitVisible(chromedp.ID("external-github")))

			step("sign in with the provider",
				chromedp.Click(chromedp.ID("external-github")),
				chromedp.WaitVisible(chromedp.ID("link-passkey")))
			if ids := e.identities(t, dave.ID); len(ids) != 0 {
				t.Fatalf("linked before the proof: %+v", ids)
			}
			step("prove with the passkey",
				chromedp.Click(chromedp.ID("link-passkey")),
				chromedp.WaitVisible(chromedp.CSS(`form[action="/logout"] button`)))
			loc, err := chromedp.Run(ctx, chromedp.Location())
			if err != nil || !strings.HasPrefix(loc, base+pathAccount) {
				t.Fatalf("after the passkey the browser is at %s (%v)", loc, err)
			}
			if ids := e.identities(t, dave.ID); len(ids) != 1 || ids[0].Subject != "77" {
				t.Fatalf("dave's identities: %+v", ids)
			}
		})
	}
}
