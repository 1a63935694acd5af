package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave/internal/chromiumtest"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// clientApp plays the native app's redirect endpoint: /callback records
// the authorization response and redirects within its own origin to /done
// (as apps do to show "you may close this window"), which answers a page.
type clientApp struct {
	srv  *httptest.Server
	hits chan *url.URL
}

func newClientApp(t *testing.T, network, addr string, tls bool) *clientApp {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	app := &clientApp{hits: make(chan *url.URL, 16)}
	app.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/callback":
			u := *r.URL
			u.Host = r.Host
			app.hits <- &u
			http.Redirect(w, r, "/done", http.StatusFound)
		case "/done":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, `<!doctype html><title>App</title><h1 id="app-done">You may close this window</h1>`)
		default:
			http.NotFound(w, r)
		}
	}))
	app.srv.Listener.Close()
	app.srv.Listener = l
	if tls {
		app.srv.StartTLS()
	} else {
		app.srv.Start()
	}
	t.Cleanup(app.srv.Close)
	return app
}

func (a *clientApp) port() int { return a.srv.Listener.Addr().(*net.TCPAddr).Port }

// A person connects desktop MCP clients in a real Chromium: each client
// registers (RFC 7591), opens /oauth/authorize in the browser, the person
// signs in and clicks Allow or Deny, and the browser must land on the
// client's redirect URI — loopback (127.0.0.1, localhost, [::1], any port),
// https, or a private-use scheme. Chromium applies form-action to every
// redirect a form submission follows, so this fails when the pages keep
// form-action 'self'. The code is then exchanged with PKCE and the token
// calls whoami over MCP.
func TestChromiumConsentJourney(t *testing.T) {
	bin := chromiumtest.Bin(t)
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) { consentJourney(t, d, bin) })
	}
}

func consentJourney(t *testing.T, d storage.Dialect, bin string) {
	e := newConsentEnv(t, d)
	app4 := newClientApp(t, "tcp4", "127.0.0.1:0", false)
	app6 := newClientApp(t, "tcp6", "[::1]:0", false)
	appTLS := newClientApp(t, "tcp4", "127.0.0.1:0", true)

	browserCtx, ctx := chromiumtest.Start(t, bin, 3*time.Minute,
		// The https client lives at client.test on this machine, with a
		// certificate of the test's own.
		chromedp.Flag("host-resolver-rules", "MAP client.test 127.0.0.1"),
		chromedp.Flag("ignore-certificate-errors", true),
	)

	// What the browser tried to load, and what it refused (CSP), for the
	// private-use scheme and for failure messages.
	var mu sync.Mutex
	var requested, refusals []string
	listen := func(tab context.Context) error {
		return chromedp.Listen(tab, func(ev any) {
			switch ev := ev.(type) {
			case *network.EventRequestWillBeSent:
				mu.Lock()
				requested = append(requested, ev.Request.URL)
				mu.Unlock()
			case *log.EventEntryAdded:
				if strings.Contains(ev.Entry.Text, "Content Security Policy") {
					mu.Lock()
					refusals = append(refusals, ev.Entry.Text)
					mu.Unlock()
				}
			}
		})
	}
	if err := listen(browserCtx); err != nil {
		t.Fatal(err)
	}
	tab := browserCtx // the tab the steps drive

	fail := func(t *testing.T, name string, err error) {
		t.Helper()
		sctx, cancel := context.WithTimeout(tab, 10*time.Second)
		defer cancel()
		chromiumtest.Screenshot(t, sctx, "consent-"+string(d)+"-"+strings.NewReplacer(" ", "-", "/", "-").Replace(name))
		loc, _ := chromedp.Run(sctx, chromedp.Location())
		mu.Lock()
		t.Logf("browser at %s; CSP messages: %q", loc, refusals)
		mu.Unlock()
		t.Fatalf("%s: %v", name, err)
	}
	step := func(t *testing.T, name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			fail(t, name, err)
		}
	}
	// callback waits for the app's redirect endpoint to be reached.
	callback := func(t *testing.T, app *clientApp) url.Values {
		t.Helper()
		select {
		case u := <-app.hits:
			return u.Query()
		case <-time.After(20 * time.Second):
			fail(t, "wait for the callback", fmt.Errorf("the browser never reached %s", app.srv.URL))
			return nil
		}
	}
	// landed checks that the browser shows the app's page at origin.
	landed := func(t *testing.T, origin string) {
		t.Helper()
		step(t, "the app's page", chromedp.WaitVisible(chromedp.ID("app-done")))
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil || !strings.HasPrefix(loc, origin+"/done") {
			fail(t, "browser location", fmt.Errorf("at %q (%v), want %s/done", loc, err, origin))
		}
	}
	// open navigates to an authorization URL. After the browser gave up on
	// a private-use scheme it has no handler for, the next navigation may
	// report that abort: then it is tried once more.
	open := func(t *testing.T, target string) {
		t.Helper()
		err := chromedp.Do(ctx, chromedp.Navigate(target))
		if err != nil && strings.Contains(err.Error(), "ERR_ABORTED") {
			time.Sleep(500 * time.Millisecond)
			err = chromedp.Do(ctx, chromedp.Navigate(target))
		}
		if err != nil {
			fail(t, "open "+target, err)
		}
	}
	signIn := chromedp.Steps(
		chromedp.WaitVisible(chromedp.ID("password")),
		chromedp.SendKeys(chromedp.ID("email"), e.email),
		chromedp.SendKeys(chromedp.ID("password"), e.password),
		chromedp.Click(chromedp.CSS(`form button[type="submit"]`)),
	)
	consent := func(decision string) chromedp.Action[chromedp.Void] {
		return chromedp.Steps(
			chromedp.WaitVisible(chromedp.CSS(`button[value="approve"]`)),
			chromedp.Click(chromedp.CSS(`button[value="`+decision+`"]`)),
		)
	}
	// consentTo clicks on the consent page of request a only: after a
	// private-use redirect the browser stays on the previous consent page
	// until the next one has loaded, and a click there would answer the
	// wrong request.
	consentTo := func(a authorization, decision string) chromedp.Action[chromedp.Void] {
		form := `form[action*="state=` + a.state + `"] `
		return chromedp.Steps(
			chromedp.WaitVisible(chromedp.CSS(form+`button[value="approve"]`)),
			chromedp.Click(chromedp.CSS(form+`button[value="`+decision+`"]`)),
		)
	}
	checkCode := func(t *testing.T, got url.Values, a authorization) string {
		t.Helper()
		if got.Get("code") == "" || got.Get("state") != a.state || got.Get("iss") != e.base || got.Get("error") != "" {
			t.Fatalf("callback query %v: want code, state %s, iss %s", got, a.state, e.base)
		}
		return got.Get("code")
	}

	loopback := "http://127.0.0.1:" + fmt.Sprint(app4.port())
	loopClient := e.register(t, "Desktop Agent", loopback+"/callback")

	t.Run("sign in and allow, 127.0.0.1", func(t *testing.T) {
		a := e.newAuthorization(loopClient, loopback+"/callback", "state-allow-127")
		open(t, e.url(a))
		step(t, "sign in", signIn)
		step(t, "allow", consent("approve"))
		code := checkCode(t, callback(t, app4), a)
		landed(t, loopback)
		token := e.exchange(t, a, code)
		if body := e.whoami(t, token); !strings.Contains(body, e.user.StableID) {
			t.Fatalf("whoami with the token: %s", body)
		}
	})

	// From here the browser holds a session: the consent page comes at once.
	t.Run("signed in, deny, 127.0.0.1", func(t *testing.T) {
		id := e.register(t, "Desktop Agent 2", loopback+"/callback")
		a := e.newAuthorization(id, loopback+"/callback", "state-deny-127")
		open(t, e.url(a))
		step(t, "deny", consent("deny"))
		got := callback(t, app4)
		if got.Get("error") != "access_denied" || got.Get("state") != a.state || got.Get("iss") != e.base || got.Get("code") != "" {
			t.Fatalf("callback query %v: want access_denied with state and iss", got)
		}
		landed(t, loopback)
	})

	localhost := "http://localhost:" + fmt.Sprint(app4.port())
	t.Run("signed in, deny, localhost on any port", func(t *testing.T) {
		id := e.register(t, "Localhost Agent", "http://localhost/callback")
		a := e.newAuthorization(id, localhost+"/callback", "state-deny-localhost")
		open(t, e.url(a))
		step(t, "deny", consent("deny"))
		got := callback(t, app4)
		if got.Get("error") != "access_denied" || got.Get("state") != a.state || got.Get("iss") != e.base || got.Get("code") != "" {
			t.Fatalf("callback query %v: want access_denied with state and iss", got)
		}
		landed(t, localhost)
	})

	t.Run("signed in, allow, localhost on any port", func(t *testing.T) {
		id := e.register(t, "Localhost Agent 2", "http://localhost:1/callback")
		a := e.newAuthorization(id, localhost+"/callback", "state-allow-localhost")
		open(t, e.url(a))
		step(t, "allow", consent("approve"))
		code := checkCode(t, callback(t, app4), a)
		landed(t, localhost)
		e.exchange(t, a, code)
	})

	ipv6 := "http://[::1]:" + fmt.Sprint(app6.port())
	t.Run("signed in, allow, [::1] on any port", func(t *testing.T) {
		id := e.register(t, "IPv6 Agent", "http://[::1]/callback")
		a := e.newAuthorization(id, ipv6+"/callback", "state-allow-ipv6")
		open(t, e.url(a))
		step(t, "allow", consent("approve"))
		code := checkCode(t, callback(t, app6), a)
		landed(t, ipv6)
		e.exchange(t, a, code)
	})

	secure := "https://client.test:" + fmt.Sprint(appTLS.port())
	t.Run("signed in, allow and deny, https", func(t *testing.T) {
		id := e.register(t, "Web Agent", secure+"/callback")
		a := e.newAuthorization(id, secure+"/callback", "state-deny-https")
		open(t, e.url(a))
		step(t, "deny", consent("deny"))
		if got := callback(t, appTLS); got.Get("error") != "access_denied" || got.Get("state") != a.state || got.Get("iss") != e.base {
			t.Fatalf("callback query %v: want access_denied with state and iss", got)
		}
		landed(t, secure)
		a = e.newAuthorization(id, secure+"/callback", "state-allow-https")
		open(t, e.url(a))
		step(t, "allow", consent("approve"))
		code := checkCode(t, callback(t, appTLS), a)
		landed(t, secure)
		e.exchange(t, a, code)
	})

	// A private-use scheme has no handler in a headless browser: the test
	// proves the browser went for it (instead of refusing the redirect) and
	// that the URI carried the answer.
	attempted := func(t *testing.T, prefix string) *url.URL {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			for _, r := range requested {
				if strings.HasPrefix(r, prefix) {
					mu.Unlock()
					u, err := url.Parse(r)
					if err != nil {
						t.Fatal(err)
					}
					return u
				}
			}
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
		fail(t, "navigation to "+prefix, fmt.Errorf("the browser never tried to open %s", prefix))
		return nil
	}
	t.Run("signed in, allow and deny, private-use scheme", func(t *testing.T) {
		const redirect = "cursor://enclave.test/oauth/callback"
		id := e.register(t, "Editor", redirect)
		a := e.newAuthorization(id, redirect, "state-deny-cursor")
		open(t, e.url(a))
		step(t, "deny", consentTo(a, "deny"))
		u := attempted(t, redirect+"?error=access_denied")
		if u.Query().Get("state") != a.state || u.Query().Get("iss") != e.base {
			t.Fatalf("denial %s: want state and iss", u)
		}
		a = e.newAuthorization(id, redirect, "state-allow-cursor")
		open(t, e.url(a))
		step(t, "allow", consentTo(a, "approve"))
		u = attempted(t, redirect+"?code=")
		e.exchange(t, a, checkCode(t, u.Query(), a))
	})

	t.Run("remembered consent, signed in", func(t *testing.T) {
		a := e.newAuthorization(loopClient, loopback+"/callback", "state-remembered")
		open(t, e.url(a))
		code := checkCode(t, callback(t, app4), a)
		landed(t, loopback)
		e.exchange(t, a, code)
	})

	// Signed out, with consent remembered: the sign-in form's submission is
	// what redirects to the client.
	t.Run("remembered consent, sign in only", func(t *testing.T) {
		// Another browser profile: no session, no form history.
		other, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
		defer cancel()
		if err := listen(other); err != nil {
			t.Fatal(err)
		}
		prevTab, prevCtx := tab, ctx
		tab = other
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(other, time.Minute)
		defer func() {
			cancelTimeout()
			tab, ctx = prevTab, prevCtx
		}()
		a := e.newAuthorization(loopClient, loopback+"/callback", "state-remembered-signin")
		open(t, e.url(a))
		step(t, "sign in", signIn)
		code := checkCode(t, callback(t, app4), a)
		landed(t, loopback)
		token := e.exchange(t, a, code)
		if body := e.whoami(t, token); !strings.Contains(body, e.user.StableID) {
			t.Fatalf("whoami with the token: %s", body)
		}
	})

	mu.Lock()
	defer mu.Unlock()
	if len(refusals) > 0 {
		t.Errorf("the browser reported CSP problems: %q", refusals)
	}
}
