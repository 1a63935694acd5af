package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/internal/chromiumtest"
)

// hostileReadme tries every way to run script from a readme. Each payload
// that ran would set window.__pwned or open a dialog.
const hostileReadme = "# Hostile greeter\n\nSays hello, and tries everything else.\n\n" +
	"<script>window.__pwned = 'script'; alert('script')</script>\n\n" +
	"<img src=\"x\" onerror=\"window.__pwned = 'img'; alert('img')\">\n\n" +
	"<iframe src=\"javascript:parent.__pwned = 'iframe'\"></iframe>\n\n" +
	"<svg onload=\"window.__pwned = 'svg'\"><circle r=\"5\"/></svg>\n\n" +
	"<details open ontoggle=\"window.__pwned = 'toggle'\"><summary>x</summary></details>\n\n" +
	"<a href=\"javascript:window.__pwned = 'raw-link'\">raw link</a>\n\n" +
	"[markdown js link](javascript:window.__pwned='md-link')\n\n" +
	"[data link](data:text/html,<script>alert('data')</script>)\n\n" +
	"![data image](data:image/svg+xml,<svg onload=alert('img')>)\n\n" +
	"<object data=\"javascript:alert('object')\"></object><embed src=\"javascript:alert('embed')\">\n\n" +
	"<form action=\"javascript:alert('form')\"><button>go</button></form>\n\n" +
	"<style>body{display:none}</style>\n\n" +
	"[a fine link](https://example.com/docs) and **bold** text.\n"

// inertCheck walks the rendered readme in the page and returns what it
// finds that could run: script-capable elements, on* attributes, links to
// anything but http(s) or mailto, and whether any payload set its flag.
const inertCheck = `(() => {
  const root = document.getElementById('listing-readme');
  const bad = [];
  if (!root) return ['no readme'];
  for (const el of root.querySelectorAll('*')) {
    const tag = el.tagName.toLowerCase();
    if (['script','iframe','svg','object','embed','form','style','img','link','meta','base','math'].includes(tag)) bad.push('element ' + tag);
    for (const a of el.attributes) {
      const n = a.name.toLowerCase();
      if (n.startsWith('on')) bad.push('attribute ' + n + ' on ' + tag);
      if (['src','srcset','action','formaction','data','style'].includes(n)) bad.push('attribute ' + n + ' on ' + tag);
      if (n === 'href' && !/^(https?:|mailto:)/i.test(a.value)) bad.push('link ' + a.value);
    }
  }
  if (document.querySelectorAll('script:not([src])').length) bad.push('inline script in the page');
  if (window.__pwned !== undefined) bad.push('payload ran: ' + window.__pwned);
  return bad;
})()`

// TestCommunityPagesJourney: in headless Chromium, alice publishes her
// package from her packages page with a hostile readme; an anonymous
// visitor browses /community, finds and opens the listing, where the
// readme renders inert (no script ran, no dialog opened, nothing
// script-capable survived in the DOM) and asks them to sign in to act;
// bob signs in, forks, rates and reports it; ada, an admin, resolves the
// report with a delist on the moderation page, and the listing leaves the
// catalogue for everyone.
func TestCommunityPagesJourney(t *testing.T) {
	bin := chromiumtest.Bin(t)
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob, ada := s.CreateUser(t, "alice"), s.CreateUser(t, "bob"), s.CreateUser(t, "ada", capabilities.RoleAdmin)
		pkg := map[string]any{
			"name":  "greeter",
			"files": map[string]string{"main.js": "export async function greet(args) { return {hello: args.name}; }"},
			"manifest": map[string]any{"description": "Friendly greetings <b onmouseover=alert(1)>for all</b>", "exports": map[string]any{
				"greet": map[string]any{"description": "Greets someone.", "readOnly": true}}},
		}
		if res, err := s.Registry().Invoke(t.Context(), alice.Caller(t), "packageSave", mustMarshal(t, pkg)); err != nil || res.IsError {
			t.Fatalf("packageSave: %v %+v", err, res)
		}

		browser, ctx := chromiumtest.Start(t, bin, 3*time.Minute)
		var dialogs atomic.Int32
		if err := chromedp.Listen(browser, func(ev any) {
			if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
				dialogs.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
		fail := func(step string, err error) {
			t.Helper()
			if err != nil {
				loc, _ := chromedp.Run(browser, chromedp.Location())
				t.Logf("at %s", loc)
				chromiumtest.Screenshot(t, browser, "community-"+strings.ReplaceAll(step, " ", "-"))
				t.Fatalf("%s: %v", step, err)
			}
		}
		signIn := func(u *enclavetest.User) {
			t.Helper()
			fail("sign in "+u.Username, chromedp.Do(ctx, chromedp.Navigate(s.URL+"/login"),
				chromedp.WaitVisible(chromedp.ID("password")),
				chromedp.SendKeys(chromedp.ID("email"), u.Email),
				chromedp.SendKeys(chromedp.ID("password"), u.Password),
				chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)),
				chromedp.WaitVisible(chromedp.CSS(`form[action$="/logout"]`))))
		}
		signOut := func() {
			t.Helper()
			fail("sign out", chromedp.Do(ctx, chromedp.Navigate(s.URL+"/community"),
				chromedp.Click(chromedp.CSS(`form[action$="/logout"] button`)),
				chromedp.WaitVisible(chromedp.CSS(`a[href$="/login"]`))))
		}
		text := func(step, sel string) string {
			t.Helper()
			v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
			fail(step, err)
			return v
		}

		// Alice publishes from her packages page.
		signIn(alice)
		fail("publish", chromedp.Do(ctx, chromedp.Navigate(s.URL+"/account/packages"),
			chromedp.Click(chromedp.CSS(`#publish-greeter summary`)),
			chromedp.WaitVisible(chromedp.ID("publish-readme-greeter")),
			chromedp.SetValue(chromedp.ID("publish-readme-greeter"), hostileReadme),
			chromedp.Click(chromedp.CSS(`#publish-greeter .publish-form button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.ID("own-listings"))))
		own := invokeAs[community.OwnOutput](t, s, alice.Caller(t), "communityListOwn", map[string]any{})
		if len(own.Listings) != 1 || own.Listings[0].Package != "greeter" {
			t.Fatalf("alice's listings after publishing: %+v", own)
		}
		listing := own.Listings[0].ID
		// Her packages page now offers to unpublish it.
		fail("unpublish control", chromedp.Do(ctx, chromedp.Navigate(s.URL+"/account/packages"),
			chromedp.WaitReady(chromedp.CSS(`#publish-greeter form[action$="/account/community/unpublish"]`))))
		signOut()

		// An anonymous visitor browses and searches the catalogue.
		fail("catalogue", chromedp.Do(ctx, chromedp.Navigate(s.URL+"/community"),
			chromedp.WaitVisible(chromedp.ID("listing-"+listing))))
		fail("search miss", chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("community-query"), "nothing-like-this"),
			chromedp.Submit(chromedp.ID("community-query")), chromedp.WaitVisible(chromedp.ID("no-listings"))))
		fail("search hit", chromedp.Do(ctx, chromedp.Navigate(s.URL+"/community?q=friendly+greetings"),
			chromedp.WaitVisible(chromedp.ID("listing-"+listing)),
			chromedp.Click(chromedp.CSS("#listing-"+listing+" a.listing-link")),
			chromedp.WaitVisible(chromedp.ID("listing-readme"))))
		if got := text("author", "#listing-author"); got != "alice" {
			t.Fatalf("author shown %q", got)
		}
		if got := text("readme", "#listing-readme"); !strings.Contains(got, "Says hello") || !strings.Contains(got, "a fine link") {
			t.Fatalf("readme text %q", got)
		}
		assertInert := func(step string) {
			t.Helper()
			bad, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](inertCheck))
			fail(step, err)
			if len(bad) > 0 {
				t.Fatalf("%s: the hostile readme is not inert: %v", step, bad)
			}
			if n := dialogs.Load(); n != 0 {
				t.Fatalf("%s: %d dialogs opened", step, n)
			}
			href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#listing-readme a[href^="https://example.com"]')?.getAttribute('href') ?? ''`))
			fail(step, err)
			if href != "https://example.com/docs" {
				t.Fatalf("%s: the safe link is gone (%q)", step, href)
			}
		}
		assertInert("anonymous readme")
		fail("anonymous has no forms", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("sign-in-to-act"))))
		if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#fork-form, #rate-form, #report-form').length`)); err != nil || n != 0 {
			t.Fatalf("an anonymous visitor is offered %d action forms (%v)", n, err)
		}

		// Bob forks, rates and reports.
		signIn(bob)
		fail("bob opens the listing", chromedp.Do(ctx, chromedp.Navigate(s.URL+"/community/"+listing), chromedp.WaitVisible(chromedp.ID("fork-form"))))
		assertInert("bob's readme")
		// submit clicks a form's button and waits for the page it leads to
		// (the listing again, with a notice).
		submit := func(step, button, notice string) {
			t.Helper()
			resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(button)))
			fail(step, err)
			if resp.Status != 200 || !strings.HasSuffix(resp.URL, "/community/"+listing+"?notice="+notice) {
				t.Fatalf("%s led to %d %s", step, resp.Status, resp.URL)
			}
			fail(step, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`p.notice`))))
		}
		submit("fork", `#fork-form button[type="submit"]`, "forked")
		if got := text("fork notice", "p.notice"); !strings.Contains(got, "Forked") {
			t.Fatalf("after forking: %q", got)
		}
		fail("rate form", chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("rate-score"), "4"),
			chromedp.SendKeys(chromedp.ID("rate-note"), "bob's private note")))
		submit("rate", `#rate-form button[type="submit"]`, "rated")
		if got := text("rating", "#listing-rating"); !strings.Contains(got, "4.0 of 5 (1 rating)") {
			t.Fatalf("rating shown after bob rated: %q", got)
		}
		fail("report form", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#report summary`)),
			chromedp.WaitVisible(chromedp.ID("report-reason")),
			chromedp.SetValue(chromedp.ID("report-reason"), "malware"),
			chromedp.SendKeys(chromedp.ID("report-details"), "it tries to run <script> in my browser")))
		submit("report", `#report-form button[type="submit"]`, "reported")
		bobOwn := invokeAs[community.OwnOutput](t, s, bob.Caller(t), "communityListOwn", map[string]any{})
		if len(bobOwn.Forks) != 1 || bobOwn.Forks[0].Package != "greeter" || bobOwn.Forks[0].Listing != listing {
			t.Fatalf("bob's forks: %+v", bobOwn.Forks)
		}
		// Bob may not moderate.
		fail("bob at the moderation page", chromedp.Do(ctx, chromedp.Navigate(s.URL+"/admin/community"), chromedp.WaitVisible(chromedp.CSS("h1"))))
		if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('.resolve-form').length`)); err != nil || n != 0 {
			t.Fatalf("bob sees %d resolve forms (%v)", n, err)
		}
		signOut()

		// Ada resolves the report with a delist.
		signIn(ada)
		fail("moderation page", chromedp.Do(ctx, chromedp.Navigate(s.URL+"/admin/community"),
			chromedp.WaitVisible(chromedp.CSS(".report .resolve-form"))))
		if got := text("report", ".report"); !strings.Contains(got, "bob") || !strings.Contains(got, "malware") || !strings.Contains(got, "<script>") {
			t.Fatalf("the report shows %q", got)
		}
		fail("activity page", chromedp.Do(ctx, chromedp.Navigate(s.URL+"/admin/community/activity"),
			chromedp.WaitVisible(chromedp.ID("community-activity"))))
		if got := text("activity", "#community-activity"); !strings.Contains(got, "fork") || !strings.Contains(got, "bob") || strings.Contains(got, "private note") || strings.Contains(got, bob.Email) {
			t.Fatalf("the activity shows %q", got)
		}
		fail("resolve", chromedp.Do(ctx, chromedp.Navigate(s.URL+"/admin/community"),
			chromedp.WaitVisible(chromedp.CSS(".report .resolve-form")),
			chromedp.SetValue(chromedp.CSS(`.report select[name="action"]`), "delist"),
			chromedp.Click(chromedp.CSS(`.report .resolve-form button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.ID("no-reports"))))
		signOut()

		// The listing has left the catalogue.
		fail("catalogue after the delist", chromedp.Do(ctx, chromedp.Navigate(s.URL+"/community"),
			chromedp.WaitVisible(chromedp.ID("no-listings"))))
		resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(s.URL+"/community/"+listing))
		fail("delisted listing", err)
		if resp.Status != 404 {
			t.Fatalf("a delisted listing answers %d to a visitor", resp.Status)
		}
		// Bob's fork stays his.
		if f := invokeAs[community.OwnOutput](t, s, bob.Caller(t), "communityListOwn", map[string]any{}); len(f.Forks) != 1 {
			t.Fatalf("bob's forks after the delist: %+v", f.Forks)
		}
	})
}

func mustMarshal(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// invokeAs runs a capability as c through the server's registry.
func invokeAs[T any](t *testing.T, s *enclavetest.Server, c capabilities.Caller, name string, in any) T {
	t.Helper()
	res, err := s.Registry().Invoke(context.Background(), c, name, mustMarshal(t, in))
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %+v", name, err, res)
	}
	var out T
	if err := json.Unmarshal(mustMarshal(t, res.Structured), &out); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// pageClient is an HTTP client of the web shell that keeps its cookies
// and does not follow redirects, signed in as u (nil: a visitor).
func pageClient(t *testing.T, s *enclavetest.Server, u *enclavetest.User) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if u != nil {
		resp, err := c.PostForm(s.URL+"/login", url.Values{"email": {u.Email}, "password": {u.Password}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign in %s: %d", u.Username, resp.StatusCode)
		}
	}
	return c
}

func fetchPage(t *testing.T, c *http.Client, method, target string, form url.Values) (int, string) {
	t.Helper()
	var resp *http.Response
	var err error
	if method == http.MethodPost {
		resp, err = c.PostForm(target, form)
	} else {
		resp, err = c.Get(target)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCommunityPagesCrossUser: the community pages' forms act for the
// signed-in person only. A visitor reads the catalogue and a listing (no
// sources) but cannot fork, rate, report, publish or moderate; bob cannot
// unpublish alice's listing or moderate; nothing they try changes
// anything. A visitor's public reads are rate-limited per network (429
// with Retry-After).
func TestCommunityPagesCrossUser(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob, ada := s.CreateUser(t, "alice"), s.CreateUser(t, "bob"), s.CreateUser(t, "ada", capabilities.RoleAdmin)
		ac := alice.Caller(t)
		if res, err := s.Registry().Invoke(t.Context(), ac, "packageSave", mustMarshal(t, map[string]any{
			"name": "greeter", "files": map[string]string{"main.js": "export async function greet() { return 'secret-source-marker'; }"},
			"manifest": map[string]any{"description": "Friendly greetings", "exports": map[string]any{"greet": map[string]any{"description": "Greets.", "readOnly": true}}},
		})); err != nil || res.IsError {
			t.Fatalf("packageSave: %v %+v", err, res)
		}
		pub := invokeAs[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": "greeter", "readme": "Say *hello*."})
		rep := invokeAs[community.ReportResult](t, s, ada.Caller(t), "communityReport", map[string]any{"listing": pub.ID, "reason": "spam"})

		anon, bc := pageClient(t, s, nil), pageClient(t, s, bob)
		if st, body := fetchPage(t, anon, "GET", s.URL+"/community", nil); st != 200 || !strings.Contains(body, pub.ID) {
			t.Fatalf("a visitor's catalogue: %d", st)
		}
		if st, body := fetchPage(t, anon, "GET", s.URL+"/community/"+pub.ID, nil); st != 200 || !strings.Contains(body, "<em>hello</em>") || strings.Contains(body, "secret-source-marker") {
			t.Fatalf("a visitor's listing page: %d", st)
		}
		if st, _ := fetchPage(t, anon, "GET", s.URL+"/community/lst_nosuchlisting", nil); st != 404 {
			t.Fatalf("an unknown listing: %d", st)
		}
		lid := url.PathEscape(pub.ID)
		for _, try := range []struct {
			who    string
			c      *http.Client
			method string
			path   string
			form   url.Values
		}{
			{"visitor", anon, "POST", "/community/" + lid + "/fork", url.Values{}},
			{"visitor", anon, "POST", "/community/" + lid + "/rate", url.Values{"score": {"1"}}},
			{"visitor", anon, "POST", "/community/" + lid + "/report", url.Values{"reason": {"spam"}}},
			{"visitor", anon, "GET", "/account/community", nil},
			{"visitor", anon, "POST", "/account/community/publish", url.Values{"package": {"greeter"}}},
			{"visitor", anon, "POST", "/account/community/unpublish", url.Values{"listing": {pub.ID}}},
			{"visitor", anon, "GET", "/admin/community", nil},
			{"visitor", anon, "POST", "/admin/community/listings/" + lid + "/delist", url.Values{}},
			{"bob", bc, "POST", "/account/community/unpublish", url.Values{"listing": {pub.ID}}},
			{"bob", bc, "POST", "/account/community/unpublish", url.Values{"listing": {"greeter"}}},
			{"bob", bc, "POST", "/account/community/publish", url.Values{"package": {"greeter"}}},
			{"bob", bc, "GET", "/admin/community", nil},
			{"bob", bc, "GET", "/admin/community/activity", nil},
			{"bob", bc, "POST", "/admin/community/listings/" + lid + "/delist", url.Values{}},
			{"bob", bc, "POST", "/admin/community/listings/" + lid + "/delete", url.Values{}},
			{"bob", bc, "POST", "/admin/community/reports/" + url.PathEscape(rep.Report) + "/resolve", url.Values{"status": {"actioned"}, "action": {"delete"}}},
		} {
			st, body := fetchPage(t, try.c, try.method, s.URL+try.path, try.form)
			if st < 300 || st == http.StatusSeeOther && try.who == "bob" {
				t.Errorf("%s %s %s answered %d", try.who, try.method, try.path, st)
			}
			if strings.Contains(body, "secret-source-marker") {
				t.Errorf("%s %s %s shows the sources", try.who, try.method, try.path)
			}
		}
		// Nothing changed: the listing is public, unrated, unforked, and
		// the report is still open.
		l := invokeAs[community.Listing](t, s, ac, "communityGet", map[string]any{"listing": pub.ID})
		if l.Status != community.StatusPublic || l.Forks != 0 || l.Rating.Count != 0 {
			t.Fatalf("the listing changed: %+v", l)
		}
		reports := invokeAs[community.ReportPage](t, s, ada.Caller(t), "adminCommunityReportList", map[string]any{"status": "open"})
		if len(reports.Reports) != 1 {
			t.Fatalf("open reports: %+v", reports.Reports)
		}
		if own := invokeAs[community.OwnOutput](t, s, bob.Caller(t), "communityListOwn", map[string]any{}); len(own.Listings) != 0 || len(own.Forks) != 0 {
			t.Fatalf("bob has %+v", own)
		}
		// Bob's own listings page does not show alice's listing.
		if st, body := fetchPage(t, bc, "GET", s.URL+"/account/community", nil); st != 200 || strings.Contains(body, pub.ID) {
			t.Fatalf("bob's listings page: %d", st)
		}

		// Ada delists the listing with the moderation page's form, then
		// lists it again (a delisted listing has no page to press a
		// button on); a bad action is a 400.
		dc := pageClient(t, s, ada)
		for _, step := range []struct {
			action string
			status int
			want   string
		}{{"delist", http.StatusSeeOther, community.StatusDelisted}, {"launch", http.StatusBadRequest, community.StatusDelisted}, {"relist", http.StatusSeeOther, community.StatusPublic}} {
			if st, _ := fetchPage(t, dc, "POST", s.URL+"/admin/community/listings", url.Values{"listing": {pub.ID}, "action": {step.action}}); st != step.status {
				t.Fatalf("ada's %s: %d, want %d", step.action, st, step.status)
			}
			if l := invokeAs[community.Listing](t, s, ac, "communityGet", map[string]any{"listing": pub.ID}); l.Status != step.want {
				t.Fatalf("after ada's %s the listing is %s", step.action, l.Status)
			}
		}
		if st, _ := fetchPage(t, bc, "POST", s.URL+"/admin/community/listings", url.Values{"listing": {pub.ID}, "action": {"delist"}}); st < 400 {
			t.Fatalf("bob used the moderation form: %d", st)
		}

		// A visitor's public reads are limited per network; a signed-in
		// person is metered by the quota instead.
		limited := false
		for i := 0; i < 200 && !limited; i++ {
			resp, err := anon.Get(s.URL + "/community")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				limited = true
				if resp.Header.Get("Retry-After") == "" {
					t.Fatal("429 without Retry-After")
				}
			} else if resp.StatusCode != 200 {
				t.Fatalf("catalogue: %d", resp.StatusCode)
			}
		}
		if !limited {
			t.Fatal("a visitor was never rate-limited")
		}
		if st, _ := fetchPage(t, bc, "GET", s.URL+"/community", nil); st != 200 {
			t.Fatalf("bob is limited with the visitors: %d", st)
		}
	})
}
