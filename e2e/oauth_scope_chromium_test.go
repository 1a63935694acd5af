package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/internal/chromiumtest"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// browserJourney drives one Chromium tab for an authorization journey.
type browserJourney struct {
	t    *testing.T
	e    *consentEnv
	name string
	tab  context.Context // the browser, for screenshots
	ctx  context.Context // the steps, with the journey's deadline
}

func newBrowserJourney(t *testing.T, e *consentEnv, name string) *browserJourney {
	browserCtx, ctx := chromiumtest.Start(t, chromiumtest.Bin(t), 2*time.Minute)
	return &browserJourney{t: t, e: e, name: name, tab: browserCtx, ctx: ctx}
}

func (j *browserJourney) fail(t *testing.T, step string, err error) {
	t.Helper()
	chromiumtest.Screenshot(t, j.tab, j.name+"-"+step)
	sctx, cancel := context.WithTimeout(j.tab, 5*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(sctx, chromedp.Location())
	body, _ := chromedp.Run(sctx, chromedp.OuterHTML(chromedp.CSS("body")))
	t.Fatalf("%s: %v (browser at %s)\n%s", step, err, loc, body)
}

func (j *browserJourney) step(t *testing.T, name string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(j.ctx, actions...); err != nil {
		j.fail(t, name, err)
	}
}

func (j *browserJourney) text(t *testing.T, sel string) string {
	t.Helper()
	v, err := chromedp.Run(j.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		j.fail(t, "read "+sel, err)
	}
	return v
}

func (j *browserJourney) eval(t *testing.T, js string) string {
	t.Helper()
	v, err := chromedp.Run(j.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		j.fail(t, "evaluate "+js, err)
	}
	return v
}

// callback waits for app's redirect endpoint and returns its query, once
// the browser shows the app's page (so that the next navigation does not
// cut that one short).
func (j *browserJourney) callback(t *testing.T, app *clientApp) url.Values {
	t.Helper()
	select {
	case u := <-app.hits:
		j.step(t, "the app's page", chromedp.WaitVisible(chromedp.ID("app-done")))
		return u.Query()
	case <-time.After(20 * time.Second):
		j.fail(t, "wait for the callback", fmt.Errorf("the browser never reached %s", app.srv.URL))
		return nil
	}
}

// open navigates to target. A navigation that the previous one's end
// aborted is tried once more.
func (j *browserJourney) open(t *testing.T, target string) {
	t.Helper()
	err := chromedp.Do(j.ctx, chromedp.Navigate(target))
	if err != nil && strings.Contains(err.Error(), "ERR_ABORTED") {
		time.Sleep(500 * time.Millisecond)
		err = chromedp.Do(j.ctx, chromedp.Navigate(target))
	}
	if err != nil {
		j.fail(t, "open "+target, err)
	}
}

func (j *browserJourney) signIn(t *testing.T) {
	t.Helper()
	j.step(t, "sign in",
		chromedp.WaitVisible(chromedp.ID("password")),
		chromedp.SendKeys(chromedp.ID("email"), j.e.email),
		chromedp.SendKeys(chromedp.ID("password"), j.e.password),
		chromedp.Click(chromedp.CSS(`form button[type="submit"]`)),
	)
}

// tools lists the MCP tools token sees.
func (e *consentEnv) tools(t *testing.T, token string) []string {
	t.Helper()
	session := enclavetest.Dial(t, e.base, token).SessionID()
	_, body, _, _ := rpc(t, e.base, token, session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	var res struct {
		Result struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil || len(res.Result.Tools) == 0 {
		t.Fatalf("tools/list: %v %s", err, body)
	}
	var names []string
	for _, tool := range res.Result.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// adminTools are the names among names of capabilities kept to admins.
func (e *consentEnv) adminTools(names []string) []string {
	var out []string
	for _, c := range e.srv.Registry().All() {
		if c.Requires.Role == capabilities.RoleAdmin && slices.Contains(names, c.Name) {
			out = append(out, c.Name)
		}
	}
	return out
}

// testClock is a settable clock for the authorization server.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// A person reconnects an agent whose cached client registration the
// server removed after it went unused: in a real Chromium the authorization
// endpoint shows a readable page (status 400, the shell's layout, what to
// do), not a password dialog (a Basic challenge) and not JSON. Doing what
// it says (the app registers again) connects. A redirect URI the app did
// not register is a readable page too.
func TestChromiumExpiredClientReconnect(t *testing.T) {
	chromiumtest.Bin(t)
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) { expiredClientJourney(t, d) })
	}
}

func expiredClientJourney(t *testing.T, d storage.Dialect) {
	clock := &testClock{}
	e := newConsentEnv(t, d, func(c *enclave.Config) { c.OAuth.Now = clock.Now })
	j := newBrowserJourney(t, e, "expired-client-"+string(d))
	app := newClientApp(t, "tcp4", "127.0.0.1:0", false)
	redirect := fmt.Sprintf("http://127.0.0.1:%d/callback", app.port())

	// The agent connected once, then went unused past the idle window and
	// was removed.
	old := e.register(t, "Desktop Agent", redirect)
	a := e.newAuthorization(old, redirect, "state-first-connect")
	j.open(t, e.url(a))
	j.signIn(t)
	j.step(t, "allow", chromedp.WaitVisible(chromedp.CSS(`button[value="approve"]`)), chromedp.Click(chromedp.CSS(`button[value="approve"]`)))
	if got := j.callback(t, app); got.Get("code") == "" {
		t.Fatalf("first connection: %v", got)
	}
	clock.Advance(91 * 24 * time.Hour)
	if _, removed, err := e.srv.OAuth().Cleanup(t.Context()); err != nil || removed == 0 {
		t.Fatalf("cleanup removed %d clients: %v", removed, err)
	}
	// Back to the present: fosite stamps token expiries with the real clock.
	clock.Advance(-91 * 24 * time.Hour)

	// The agent reconnects with the registration it cached.
	a = e.newAuthorization(old, redirect, "state-reconnect")
	j.open(t, e.url(a))
	j.step(t, "reconnect with the removed client", chromedp.WaitVisible(chromedp.CSS("main h1")))
	if h1 := j.text(t, "main h1"); !strings.Contains(h1, "registration has expired") {
		j.fail(t, "the page's heading", fmt.Errorf("%q", h1))
	}
	if p := j.text(t, "main p"); !strings.Contains(p, "Remove this server from your app and add it again") {
		j.fail(t, "the page's sentence", fmt.Errorf("%q", p))
	}
	if got := j.eval(t, `document.contentType + " " + performance.getEntriesByType("navigation")[0].responseStatus`); got != "text/html 400" {
		j.fail(t, "the page's type and status", fmt.Errorf("%q, want text/html 400", got))
	}
	if n := j.eval(t, `String(document.querySelectorAll("header.site a.brand").length)`); n != "1" {
		j.fail(t, "the shell's layout", fmt.Errorf("%s brand links", n))
	}

	// A redirect URI the app never registered: readable, nothing sent.
	fresh := e.register(t, "Desktop Agent", redirect)
	a = e.newAuthorization(fresh, redirect+"/elsewhere", "state-mismatch")
	j.open(t, e.url(a))
	j.step(t, "a redirect URI not registered", chromedp.WaitVisible(chromedp.CSS("main h1")))
	if p := j.text(t, "main p"); !strings.Contains(p, "did not register") {
		j.fail(t, "the mismatch page", fmt.Errorf("%q", p))
	}
	if got := j.eval(t, `document.contentType + " " + performance.getEntriesByType("navigation")[0].responseStatus`); got != "text/html 400" {
		j.fail(t, "the mismatch page's type and status", fmt.Errorf("%q", got))
	}

	// Doing what the page says: the app registers again and connects.
	a = e.newAuthorization(fresh, redirect, "state-registered-again")
	j.open(t, e.url(a))
	j.step(t, "connect again", chromedp.WaitVisible(chromedp.CSS(`button[value="approve"]`)), chromedp.Click(chromedp.CSS(`button[value="approve"]`)))
	got := j.callback(t, app)
	if got.Get("code") == "" || got.Get("state") != a.state {
		t.Fatalf("connecting again: %v", got)
	}
	if body := e.whoami(t, e.exchange(t, a, got.Get("code"))); !strings.Contains(body, e.user.StableID) {
		t.Fatalf("whoami after connecting again: %s", body)
	}
}

// An admin connects an agent that asks for the admin scope. The consent
// page lists the admin tools behind an unticked checkbox: allowed as it
// is, the agent's MCP tools/list has no admin tool; asked again (the
// agent stepping up) and ticked, they are listed.
func TestChromiumAdminScopeConsent(t *testing.T) {
	chromiumtest.Bin(t)
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) { adminScopeJourney(t, d) })
	}
}

func adminScopeJourney(t *testing.T, d storage.Dialect) {
	e := newConsentEnv(t, d)
	e.makeAdmin(t)
	j := newBrowserJourney(t, e, "admin-scope-"+string(d))
	app := newClientApp(t, "tcp4", "127.0.0.1:0", false)
	redirect := fmt.Sprintf("http://127.0.0.1:%d/callback", app.port())
	id := e.register(t, "Admin Agent", redirect)

	a := e.newAuthorization(id, redirect, "state-admin-unticked")
	j.open(t, e.scopedURL(a, "mcp admin"))
	j.signIn(t)
	j.step(t, "the consent page", chromedp.WaitVisible(chromedp.ID("admin-scope")))
	if got := j.eval(t, `String(document.getElementById("grant-admin").checked)`); got != "false" {
		j.fail(t, "the admin checkbox", fmt.Errorf("checked = %s, want unticked", got))
	}
	if groups := j.text(t, "#admin-capability-groups"); !strings.Contains(groups, "Admin") {
		j.fail(t, "the admin tools listed by the checkbox", fmt.Errorf("%q", groups))
	}
	if groups := j.text(t, "#capability-groups"); !strings.Contains(groups, "Account") || strings.Contains(groups, "Admin (") {
		j.fail(t, "the tools the app gets", fmt.Errorf("%q", groups))
	}
	j.step(t, "allow, unticked", chromedp.Click(chromedp.CSS(`button[value="approve"]`)))
	got := j.callback(t, app)
	if got.Get("code") == "" {
		t.Fatalf("callback: %v", got)
	}
	tools := e.tools(t, e.exchange(t, a, got.Get("code")))
	if admin := e.adminTools(tools); len(admin) != 0 || !slices.Contains(tools, "whoami") {
		t.Fatalf("unticked: the agent lists admin tools %v (of %v)", admin, tools)
	}

	// The agent asks again; the person is asked again, and ticks.
	a = e.newAuthorization(id, redirect, "state-admin-ticked")
	j.open(t, e.scopedURL(a, "mcp admin"))
	j.step(t, "ask again", chromedp.WaitVisible(chromedp.ID("grant-admin")))
	j.step(t, "tick and allow", chromedp.Click(chromedp.ID("grant-admin")), chromedp.Click(chromedp.CSS(`button[value="approve"]`)))
	got = j.callback(t, app)
	if got.Get("code") == "" {
		t.Fatalf("callback: %v", got)
	}
	tools = e.tools(t, e.exchange(t, a, got.Get("code")))
	if admin := e.adminTools(tools); !slices.Contains(admin, "adminUserList") {
		t.Fatalf("ticked: the agent lists admin tools %v (of %v)", admin, tools)
	}
}
