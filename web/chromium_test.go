package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave/internal/chromiumtest"

	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A person goes through the pages in a real browser, without JavaScript of
// ours (there is none): sign up, verify through the development mailbox,
// sign in, change the password (an older session dies), change the
// username, disconnect an app, delete the account. On failure a screenshot
// is saved and its path logged.
func TestChromiumJourney(t *testing.T) {
	bin := chromiumtest.Bin(t)

	s := storagetest.Open(t, storage.SQLite)
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	t.Cleanup(srv.Close)
	acc := newAccounts(t, s, nil)
	apps := &fakeApps{grants: map[int64][]oauth.Grant{}}
	h := newTestHandler(t, s, func(o *Options) {
		o.BaseURL = srv.URL
		o.Accounts = acc
		o.OAuth = apps
		o.Lifecycle = newLifecycle(t, s, acc)
	})
	srv.Config.Handler = h

	browserCtx, ctx := chromiumtest.Start(t, bin, 2*time.Minute)

	fail := func(name string, err error) {
		t.Helper()
		sctx, cancel := context.WithTimeout(browserCtx, 10*time.Second)
		defer cancel()
		chromiumtest.Screenshot(t, sctx, strings.ReplaceAll(name, " ", "-"))
		t.Fatalf("%s: %v", name, err)
	}
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			fail(name, err)
		}
	}
	text := func(name string, sel chromedp.ID) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			fail(name, err)
		}
		return v
	}
	const pw1, pw2 = "correct horse battery", "a different long passphrase"
	submit := func(form string) chromedp.Action[chromedp.Void] {
		return chromedp.Click(chromedp.CSS(`form[action="` + form + `"] button[type="submit"]`))
	}
	xpath := func(q string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.Search(q)) }

	step("sign up",
		chromedp.Navigate(srv.URL+"/signup"),
		chromedp.SendKeys(chromedp.ID("email"), "pat@example.com"),
		chromedp.SendKeys(chromedp.ID("username"), "pat"),
		chromedp.SendKeys(chromedp.ID("password"), pw1),
		submit("/signup"),
		xpath(`//h1[text()="Check your email"]`),
	)
	step("open the mailbox", chromedp.Navigate(srv.URL+"/dev/mail"))
	attr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("a.mail-link"), "href"))
	if err != nil {
		fail("read the verification link", err)
	}
	link := attr.Value
	if !strings.Contains(link, "/verify-email?token=") {
		t.Fatalf("mailbox link %q", link)
	}
	step("verify",
		chromedp.Navigate(link),
		submit("/verify-email"),
		xpath(`//h1[text()="Email verified"]`),
	)
	step("sign in",
		chromedp.Navigate(srv.URL+"/login"),
		chromedp.SendKeys(chromedp.ID("email"), "pat@example.com"),
		chromedp.SendKeys(chromedp.ID("password"), pw1),
		submit("/login"),
		chromedp.WaitVisible(chromedp.ID("verification")),
	)
	if text := text("read verification", "verification"); strings.TrimSpace(text) != "Verified" {
		t.Fatalf("verification state %q", text)
	}

	// Keep a copy of this session's cookie, as another browser would hold it.
	var cookies []*http.Cookie
	step("read the session cookie", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		var err error
		cookies, err = browserCookies(ctx)
		return err
	}))
	if len(cookies) == 0 {
		t.Fatal("no session cookie")
	}
	step("change password",
		chromedp.SendKeys(chromedp.ID("current"), pw1),
		chromedp.SendKeys(chromedp.ID("next"), pw2),
		submit("/account/password"),
		chromedp.WaitVisible(chromedp.CSS("p.notice")),
	)
	step("change username",
		chromedp.SendKeys(chromedp.ID("new-username"), "Pat-Renamed"),
		submit("/account/username"),
		xpath(`//p[contains(@class, "notice") and contains(., "Your username is changed")]`),
	)
	if text := text("read the username", "username"); strings.TrimSpace(text) != "pat-renamed" {
		t.Fatalf("username after the change %q", text)
	}
	if text := text("read the held usernames", "held-usernames"); !strings.HasPrefix(strings.TrimSpace(text), "pat (until ") {
		t.Fatalf("held usernames %q", text)
	}
	old, _ := http.NewRequest(http.MethodGet, srv.URL+"/account", nil)
	for _, c := range cookies {
		old.AddCookie(c)
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(old)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the session from before the password change still works: %d", resp.StatusCode)
	}

	u, err := acc.Identity.UserByEmail(t.Context(), "pat@example.com")
	if err != nil {
		t.Fatal(err)
	}
	apps.grants[u.ID] = []oauth.Grant{{ID: "g1", ClientID: "c1", ClientName: "Test Agent", Scopes: []string{"mcp"}, CreatedAt: time.Now()}}
	step("disconnect an app",
		chromedp.Navigate(srv.URL+"/account/apps"),
		xpath(`//td[contains(., "Test Agent")]`),
		submit("/account/apps/g1/revoke"),
		xpath(`//p[contains(., "No app is connected")]`),
	)
	step("delete the account",
		chromedp.Navigate(srv.URL+"/account/delete"),
		chromedp.SendKeys(chromedp.ID("confirm"), "pat-renamed"),
		chromedp.SendKeys(chromedp.ID("password"), pw2),
		submit("/account/delete"),
		xpath(`//h1[text()="Your account is deleted"]`),
	)
	if text := text("read the deletion report", "removed"); !strings.Contains(text, "sql:users") {
		t.Fatalf("deletion report %q", text)
	}
	if _, err := acc.Identity.UserByID(t.Context(), u.ID); err == nil {
		t.Fatal("the account still exists")
	}
}

// browserCookies returns the cookies the browser holds for the current
// page, and checks the session cookie's attributes on the way.
func browserCookies(ctx context.Context) ([]*http.Cookie, error) {
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		return nil, err
	}
	var out []*http.Cookie
	for _, c := range res.Cookies {
		if c.Name == "enclave_session" && (!c.HTTPOnly || c.SameSite != network.CookieSameSiteLax) {
			return nil, fmt.Errorf("session cookie is not HttpOnly and SameSite=Lax: %+v", c)
		}
		out = append(out, &http.Cookie{Name: c.Name, Value: c.Value})
	}
	return out, nil
}
