package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/internal/chromiumtest"
	"github.com/enclave-mcp/enclave/workspaces"
)

// overflowJS reports what makes the page wider than the viewport: the
// document's own scroll width, and every visible element whose box runs
// past the viewport's edges, unless a scrolling container of its own (a
// table wrapper) clips it.
const overflowJS = `(() => {
	const vw = document.documentElement.clientWidth;
	const out = [];
	if (document.documentElement.scrollWidth > vw) {
		out.push("document scrollWidth " + document.documentElement.scrollWidth + " > clientWidth " + vw);
	}
	const clipped = (el) => {
		for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
			const ox = getComputedStyle(p).overflowX;
			if (ox === "auto" || ox === "scroll" || ox === "hidden" || ox === "clip") return true;
		}
		return false;
	};
	for (const el of document.body.querySelectorAll("*")) {
		const r = el.getBoundingClientRect();
		if (r.width === 0 || r.height === 0) continue;
		if ((r.right > vw + 1 || r.left < -1 || r.width > vw + 1) && !clipped(el)) {
			let name = el.tagName.toLowerCase();
			if (el.id) name += "#" + el.id;
			if (el.className && typeof el.className === "string") name += "." + el.className.trim().split(/\s+/).join(".");
			out.push(name + " spans " + Math.round(r.left) + ".." + Math.round(r.right) + " of " + vw);
			if (out.length > 8) break;
		}
	}
	return JSON.stringify(out);
})()`

// scrollersJS names the scrolling containers (table wrappers) whose
// content is wider than they are: they fit the page by scrolling inside.
const scrollersJS = `(() => {
	const out = [];
	for (const el of document.body.querySelectorAll("*")) {
		const ox = getComputedStyle(el).overflowX;
		if ((ox === "auto" || ox === "scroll") && el.scrollWidth > el.clientWidth + 1) {
			let name = el.tagName.toLowerCase();
			if (el.id) name += "#" + el.id;
			if (el.className && typeof el.className === "string") name += "." + el.className.trim().split(/\s+/).join(".");
			out.push(name + " scrolls " + el.scrollWidth + " in " + el.clientWidth);
		}
	}
	return JSON.stringify(out);
})()`

// unstackedJS names the tables in main whose body rows are still laid
// out as table rows (not stacked into blocks).
const unstackedJS = `(() => {
	const out = [];
	for (const tr of document.querySelectorAll("main table tbody tr")) {
		if (getComputedStyle(tr).display === "table-row") {
			const t = tr.closest("table");
			out.push("table" + (t.id ? "#" + t.id : ""));
		}
	}
	return JSON.stringify([...new Set(out)]);
})()`

// Every page of the shell fits a desktop window and a phone: at 1280 and
// 390 px nothing makes the page scroll sideways, with content long enough
// to wrap (ids, names, audit rows). Each page's screenshot is written to
// ENCLAVE_TEST_ARTIFACTS when it is set, else to the test's directory.
func TestChromiumLayoutFits(t *testing.T) {
	bin := chromiumtest.Bin(t)
	s := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{Workspaces: &workspaces.Options{}}})
	ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)

	invoke := func(name string, args any) json.RawMessage {
		t.Helper()
		raw, _ := json.Marshal(args)
		c := ada.Caller(t)
		c.Session = true // as at the web shell: session-only capabilities too
		res, err := s.Registry().Invoke(t.Context(), c, name, raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.IsError {
			t.Fatalf("%s: error result %+v", name, res.Content)
		}
		out, _ := json.Marshal(res.Structured)
		return out
	}
	long := "a-rather-long-unbroken-identifier-" + strings.Repeat("x", 60)
	invoke("secretSet", map[string]any{"name": "deploy-token-for-the-staging-cluster-in-eu-west", "value": "v", "description": "Used by " + long})
	invoke("memorySave", map[string]any{"text": "A note with a long link https://example.com/" + long + "/and/more?query=" + long, "tags": []string{"links"}})
	var fb struct {
		Feedback struct {
			ID string `json:"id"`
		} `json:"feedback"`
	}
	if err := json.Unmarshal(invoke("feedbackSubmit", map[string]any{"category": "bug", "summary": "Export fails on " + long, "details": "Steps: " + long, "userConfirmed": true}), &fb); err != nil || fb.Feedback.ID == "" {
		t.Fatalf("feedback: %v %q", err, fb.Feedback.ID)
	}
	// The worst case of every table: a long email and username, a long
	// OAuth client name and redirect URI, a long webhook URL, a long
	// invite note, a package with a long description and a failed run.
	longEmail := "firstname.middlename.lastname.with.a.long.suffix-" + strings.Repeat("q", 30) + "@subdomain.of.a.long-organisation-name.example.com"
	grace, _, err := s.Accounts().Identity.CreateUser(t.Context(), accounts.CreateUserInput{Email: longEmail, Username: "grace-" + strings.Repeat("h", 26), Password: "a long password for grace", Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	invoke("adminInviteCreate", map[string]any{"note": "For the contractor at " + long, "expiresInDays": 30})
	invoke("adminWebhookCreate", map[string]any{"url": "https://hooks.example.com/services/" + long + "/" + long + "?token=" + long, "description": "Deliveries for " + long[:60]})
	invoke("packageSave", map[string]any{
		"name":     "weather-tools-for-the-morning-briefing",
		"files":    map[string]string{"main.js": `export async function forecast(args) { return {city: args.city}; }`},
		"manifest": map[string]any{"description": "Weather tools: " + long, "exports": map[string]any{"forecast": map[string]any{"description": "Forecast for " + long, "readOnly": true}}},
	})
	// A community listing with a long readme, forked, rated and reported
	// with long words by another user.
	var listing struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(invoke("communityPublish", map[string]any{"package": "weather-tools-for-the-morning-briefing", "readme": "# Weather\n\nSee https://example.com/" + long + " and `" + long + "`"}), &listing); err != nil || listing.ID == "" {
		t.Fatalf("communityPublish: %v %q", err, listing.ID)
	}
	rater := s.CreateUser(t, "rater-"+strings.Repeat("r", 26)).Caller(t)
	for name, args := range map[string]map[string]any{
		"communityFork":   {"listing": listing.ID, "name": "weather-fork"},
		"communityRate":   {"listing": listing.ID, "score": 4},
		"communityReport": {"listing": listing.ID, "reason": "other", "details": "It links to " + long},
	} {
		if res, err := s.Registry().Invoke(t.Context(), rater, name, mustJSONLayout(args)); err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
	}
	if _, err := s.Registry().Invoke(t.Context(), ada.Caller(t), "execute",
		json.RawMessage(`{"code":"throw new Error('the upstream answered https://api.example.com/v1/`+long+`/forecasts?city=Paris with 503')"}`)); err != nil {
		t.Fatalf("execute: %v", err)
	}
	clientName := "Agent with a rather long registered client name " + strings.Repeat("n", 40)
	// The agent's loopback redirect: it keeps the code for the exchange.
	codes := make(chan string, 1)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case codes <- r.URL.Query().Get("code"):
		default:
		}
		fmt.Fprintln(w, "done")
	}))
	t.Cleanup(agent.Close)
	redirect := agent.URL + "/callback/" + long
	reg, _ := json.Marshal(map[string]any{"client_name": clientName, "redirect_uris": []string{redirect}, "token_endpoint_auth_method": "none"})
	resp, err := http.Post(s.URL+"/oauth/register", "application/json", bytes.NewReader(reg))
	if err != nil {
		t.Fatal(err)
	}
	var client struct {
		ClientID string `json:"client_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&client)
	resp.Body.Close()
	if err != nil || client.ClientID == "" {
		t.Fatalf("register a client: %d %v", resp.StatusCode, err)
	}
	var ws struct {
		ID string `json:"workspaceId"`
	}
	if err := json.Unmarshal(invoke("workspaceCreate", map[string]any{"name": "Team workspace " + long}), &ws); err != nil || ws.ID == "" {
		t.Fatalf("workspace: %v %q", err, ws.ID)
	}

	// What each page must show of the seeded worst case, so that its
	// tables have the rows the overflow check is about.
	shows := map[string][]string{
		"/account/secrets":                  {"deploy-token-for-the-staging-cluster-in-eu-west"},
		"/account/feedback":                 {"Export fails on " + long},
		"/account/packages":                 {"weather-tools-for-the-morning-briefing"},
		"/account/apps":                     {clientName},
		"/admin/users":                      {longEmail},
		"/admin/users/" + grace.StableID:    {longEmail},
		"/admin/clients":                    {clientName},
		"/admin/invites":                    {"For the contractor at " + long},
		"/admin/webhooks":                   {"https://hooks.example.com/services/" + long},
		"/admin/feedback":                   {"Export fails on " + long},
		"/admin/feedback/" + fb.Feedback.ID: {"Steps: " + long},
		"/oauth/authorize":                  {clientName},
		"/workspaces":                       {"Team workspace " + long},
		"/community":                        {"weather-tools-for-the-morning-briefing"},
		"/community/" + listing.ID:          {"https://example.com/" + long},
		"/account/community":                {"weather-tools-for-the-morning-briefing"},
		"/admin/community":                  {"It links to " + long},
		"/admin/community/activity":         {"rater-" + strings.Repeat("r", 26)},
	}

	dir := os.Getenv("ENCLAVE_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	browserCtx, ctx := chromiumtest.Start(t, bin, 3*time.Minute)
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			loc, _ := chromedp.Run(browserCtx, chromedp.Location())
			chromiumtest.Screenshot(t, browserCtx, "layout-failed")
			t.Fatalf("%s (at %s): %v", name, loc, err)
		}
	}
	check := func(path string) {
		t.Helper()
		for _, width := range []int{1280, 390} {
			step(fmt.Sprintf("open %s at %d px", path, width),
				chromedp.EmulateViewport(int64(width), 900),
				chromedp.Navigate(s.URL+path),
				chromedp.WaitVisible(chromedp.CSS("main h1")),
			)
			loc, err := chromedp.Run(ctx, chromedp.Location())
			if err != nil {
				t.Fatal(err)
			}
			if u, _ := url.Parse(loc); u == nil || u.Path != strings.SplitN(path, "?", 2)[0] {
				t.Fatalf("%s led to %s", path, loc)
			}
			if title, _ := chromedp.Run(ctx, chromedp.Title()); strings.HasPrefix(title, "Page not found") || strings.HasPrefix(title, "Something went wrong") {
				t.Fatalf("%s is an error page: %q", path, title)
			}
			if width == 1280 {
				text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main").innerText`))
				if err != nil {
					t.Fatal(err)
				}
				for _, want := range shows[strings.SplitN(path, "?", 2)[0]] {
					if !strings.Contains(text, want) {
						t.Errorf("%s does not show the seeded %.60q…", path, want)
					}
				}
			}
			raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](overflowJS))
			if err != nil {
				t.Fatal(err)
			}
			var problems []string
			if err := json.Unmarshal([]byte(raw), &problems); err != nil {
				t.Fatal(err)
			}
			shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(90))
			if err != nil {
				t.Fatalf("screenshot of %s: %v", path, err)
			}
			name := strings.Trim(strings.ReplaceAll(strings.SplitN(path, "?", 2)[0], "/", "-"), "-")
			if name == "" {
				name = "home"
			}
			file := filepath.Join(dir, fmt.Sprintf("layout-%s-%d.jpg", name, width))
			if err := os.WriteFile(file, shot, 0o644); err != nil {
				t.Fatal(err)
			}
			if scrolls, err := chromedp.Run(ctx, chromedp.Evaluate[string](scrollersJS)); err == nil && scrolls != "[]" {
				var wide []string
				if err := json.Unmarshal([]byte(scrolls), &wide); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s at %d px: %s", path, width, scrolls)
			}
			if width == 390 {
				// On a phone every table stacks its rows as labelled
				// lines (class "stack", or the runs table's own rules):
				// a table that keeps its columns is squeezed or scrolls.
				flat, err := chromedp.Run(ctx, chromedp.Evaluate[string](unstackedJS))
				if err != nil {
					t.Fatal(err)
				}
				if flat != "[]" {
					t.Errorf("%s at 390 px keeps table columns on a phone: %s (give the table class=\"stack\" and data-label cells)", path, flat)
				}
			}
			if len(problems) > 0 {
				t.Errorf("%s at %d px overflows (screenshot %s):\n  %s", path, width, file, strings.Join(problems, "\n  "))
			}
		}
	}

	for _, p := range []string{"/", "/connect", "/login", "/signup", "/password-reset", "/community", "/community/" + listing.ID} {
		check(p)
	}
	// The check can fail: a phone-wide page given an unbreakable line
	// wider than the viewport is reported.
	var injected string
	step("overflow detection",
		chromedp.EmulateViewport(390, 900),
		chromedp.Navigate(s.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("main h1")),
	)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const p = document.createElement("p"); p.style.whiteSpace = "nowrap"; p.style.overflowWrap = "normal"; p.textContent = "`+strings.Repeat("w", 200)+`"; document.querySelector("main").appendChild(p); return true; })()`)); err != nil {
		t.Fatal(err)
	}
	injected, err = chromedp.Run(ctx, chromedp.Evaluate[string](overflowJS))
	if err != nil || injected == "[]" || !strings.Contains(injected, "scrollWidth") {
		t.Fatalf("an overflowing line was not reported: %s %v", injected, err)
	}
	step("sign in",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(s.URL+"/login"),
		chromedp.SendKeys(chromedp.ID("email"), ada.Email),
		chromedp.SendKeys(chromedp.ID("password"), ada.Password),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/logout"]`)),
	)
	// The consent page of an agent's sign-in (PKCE, the admin scope asked
	// for, so its separate choice shows too); allowing it makes the
	// connected apps and clients pages list the long-named client.
	verifier := rand.Text() + rand.Text()
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"response_type": {"code"}, "client_id": {client.ClientID}, "redirect_uri": {redirect},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"state": {rand.Text()}, "scope": {"mcp admin"}, "resource": {s.URL + "/mcp"}}
	check("/oauth/authorize?" + q.Encode())
	step("allow the agent",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Click(chromedp.CSS(`button[name="decision"][value="approve"]`)),
	)
	var code string
	select {
	case code = <-codes:
	case <-time.After(30 * time.Second):
		t.Fatal("the consent never redirected to the agent")
	}
	tok, err := http.PostForm(s.URL+"/oauth/token", url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {redirect}, "client_id": {client.ClientID}, "code_verifier": {verifier}, "resource": {s.URL + "/mcp"}})
	if err != nil {
		t.Fatal(err)
	}
	tok.Body.Close()
	if tok.StatusCode != http.StatusOK {
		t.Fatalf("code exchange: %d", tok.StatusCode)
	}

	for _, p := range []string{
		"/account", "/account/security", "/account/secrets", "/account/feedback", "/account/memory", "/account/mail",
		"/account/packages", "/account/apps", "/account/export", "/account/delete",
		"/workspaces", "/workspaces/" + ws.ID,
		"/admin/overview", "/admin/users", "/admin/users/new", "/admin/users/" + grace.StableID,
		"/admin/clients", "/admin/invites", "/admin/roles", "/admin/webhooks", "/admin/audit",
		"/admin/feedback", "/admin/feedback/" + fb.Feedback.ID,
		"/community", "/community/" + listing.ID, "/account/community", "/admin/community", "/admin/community/activity",
	} {
		check(p)
	}
}

func mustJSONLayout(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
