package e2e

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave/internal/chromiumtest"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// In a real browser, a person stores a secret with its allowed hosts and
// expiry, narrows the hosts, sees a bad host refused with a message that
// names it, and deletes the secret. The value is never on a page.
func TestChromiumSecretsPolicy(t *testing.T) {
	bin := chromiumtest.Bin(t)
	sc := storagetest.Config(t, storage.SQLite)
	l := startLive(t, enclave.Config{DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL})
	ctx := context.Background()
	u, err := l.srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: "pat@example.com", Username: "pat", Password: "a long password for pat"})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	if _, err := l.srv.Accounts().Credentials.StartSession(rec, httptest.NewRequest("POST", "/login", nil), u, false); err != nil {
		t.Fatal(err)
	}
	cookie := rec.Result().Cookies()[0]
	owner := storage.Owner{ID: u.ID, StableID: u.StableID}

	_, tctx := chromiumtest.Start(t, bin, 2*time.Minute)
	if _, err := chromedp.Call(tctx, network.SetCookie, network.SetCookieParams{Name: cookie.Name, Value: cookie.Value, URL: l.base}); err != nil {
		t.Fatal(err)
	}
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(tctx, actions...); err != nil {
			loc, _ := chromedp.Run(tctx, chromedp.Location())
			t.Fatalf("%s (at %s): %v", name, loc, err)
		}
	}
	html := func() string {
		t.Helper()
		h, err := chromedp.Run(tctx, chromedp.OuterHTML(chromedp.CSS("html")))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	xpath := func(q string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.Search(q)) }
	add := `#secret-set `

	step("store a secret with hosts and expiry",
		chromedp.Navigate(l.base+"/account/secrets"),
		chromedp.SendKeys(chromedp.CSS(add+`input[name="name"]`), "gh"),
		chromedp.SendKeys(chromedp.CSS(add+`input[name="value"]`), "ghp-browser-value"),
		chromedp.SendKeys(chromedp.CSS(add+`textarea[name="allowedHosts"]`), "API.github.com\n*.github.com"),
		chromedp.SetValue(chromedp.CSS(add+`input[name="expiresAt"]`), "2099-01-02T03:04"),
		chromedp.Click(chromedp.CSS(add+`button[type="submit"]`)),
		xpath(`//td[contains(., "api.github.com, *.github.com")]`),
		xpath(`//td[contains(., "2099-01-02 03:04 UTC")]`),
	)
	if strings.Contains(html(), "ghp-browser-value") {
		t.Fatal("the value is on the page")
	}
	step("narrow the hosts",
		chromedp.Click(chromedp.CSS(`details summary`)),
		chromedp.Clear(chromedp.CSS(`form.policy textarea[name="allowedHosts"]`)),
		chromedp.SendKeys(chromedp.CSS(`form.policy textarea[name="allowedHosts"]`), "api.github.com"),
		chromedp.Click(chromedp.CSS(`form.policy button[type="submit"]`)),
		xpath(`//td[@class="hosts" and normalize-space(.)="api.github.com"]`),
	)
	if s, err := l.srv.Secrets().Use(ctx, owner, "gh", time.Now()); err != nil || strings.Join(s.AllowedHosts, ",") != "api.github.com" || string(s.Value) != "ghp-browser-value" {
		t.Fatalf("stored: %+v %v", s.Secret, err)
	}
	step("a bad host is refused, named",
		chromedp.Navigate(l.base+"/account/secrets"),
		chromedp.SendKeys(chromedp.CSS(add+`input[name="name"]`), "bad"),
		chromedp.SendKeys(chromedp.CSS(add+`input[name="value"]`), "v"),
		chromedp.SendKeys(chromedp.CSS(add+`textarea[name="allowedHosts"]`), "https://evil.example/path"),
		chromedp.Click(chromedp.CSS(add+`button[type="submit"]`)),
		xpath(`//*[contains(., "evil.example") and contains(., "without scheme or path")]`),
	)
	step("delete",
		chromedp.Navigate(l.base+"/account/secrets"),
		chromedp.Click(chromedp.CSS(`form[action$="/account/secrets/delete"] button`)),
		xpath(`//p[contains(., "You have no secrets.")]`),
	)
}
