package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/internal/chromiumtest"
)

// A person who opens the server finds the connect page from the start
// page, in a real browser; its copy buttons run under the strict policy
// (the script is a first-party file) and put the exact MCP URL and each
// snippet on the clipboard; every setup names the server's real URL.
func TestChromiumConnectJourney(t *testing.T) {
	bin := chromiumtest.Bin(t)
	s := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{SiteName: "Acme Agents"}})
	mcpURL := s.URL + "/mcp"

	browserCtx, ctx := chromiumtest.Start(t, bin, 2*time.Minute)
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			loc, _ := chromedp.Run(browserCtx, chromedp.Location())
			chromiumtest.Screenshot(t, browserCtx, "connect-failed")
			t.Fatalf("%s (at %s): %v", name, loc, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	attr := func(sel, name string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
		if err != nil || !v.Exists {
			t.Fatalf("%s of %s: %v", name, sel, err)
		}
		return v.Value
	}
	// The page may write to and read the clipboard, as a person's click
	// would let it; the page keeps focus while headless.
	for _, perm := range []string{"clipboard-read", "clipboard-write"} {
		if _, err := chromedp.CallBrowser(browserCtx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
			Permission: &cdpbrowser.PermissionDescriptor{Name: perm, AllowWithoutSanitization: true}, Setting: cdpbrowser.PermissionSettingGranted, Origin: s.URL,
		}); err != nil {
			t.Fatalf("grant %s: %v", perm, err)
		}
	}
	clipboard := func() string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("read the clipboard: %v", err)
		}
		return v
	}

	step("open the start page", chromedp.Navigate(s.URL+"/"), chromedp.WaitVisible(chromedp.ID("go-connect")))
	if got := text("#home-mcp-url"); got != mcpURL {
		t.Fatalf("start page names %q", got)
	}
	step("go to the connect page", chromedp.Click(chromedp.ID("go-connect")), chromedp.WaitVisible(chromedp.ID("mcp-url")))
	if title, _ := chromedp.Run(ctx, chromedp.Title()); title != "Connect an agent · Acme Agents" {
		t.Fatalf("title %q", title)
	}
	if got := text("#mcp-url"); got != mcpURL {
		t.Fatalf("the page shows %q, want %q", got, mcpURL)
	}

	// Each copy button appears only once the script runs (it is hidden in
	// the HTML), and copies its own block, exactly.
	copyOf := func(id string) string {
		t.Helper()
		sel := `button[data-copy="` + id + `"]`
		step("copy "+id,
			chromedp.WaitVisible(chromedp.CSS(sel)),
			chromedp.Evaluate[chromedp.Void](`navigator.clipboard.writeText("")`, chromedp.EvalAwaitPromise),
			chromedp.Click(chromedp.CSS(sel)),
			chromedp.Poll[chromedp.Void](`document.getElementById("`+id+`-status").textContent === "Copied to the clipboard."`, chromedp.WithPollingTimeout(10*time.Second)),
		)
		if got := text(sel); got != "Copied" {
			t.Fatalf("button of %s says %q after copying", id, got)
		}
		got := clipboard()
		if want := text("#" + id); got != want {
			t.Fatalf("clipboard after copying %s: %q, want %q", id, got, want)
		}
		return got
	}
	if got := copyOf("mcp-url"); got != mcpURL {
		t.Fatalf("copied %q, want %q", got, mcpURL)
	}
	for _, id := range []string{"snippet-claude-desktop", "snippet-claude-code", "snippet-vscode", "snippet-cursor"} {
		if got := copyOf(id); !strings.Contains(got, mcpURL) {
			t.Fatalf("%s copied %q, without %s", id, got, mcpURL)
		}
	}
	var desktop struct {
		MCPServers map[string]struct{ Args []string } `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(text("#snippet-claude-desktop")), &desktop); err != nil || strings.Join(desktop.MCPServers["acme-agents"].Args, " ") != "-y mcp-remote "+mcpURL {
		t.Fatalf("Claude Desktop snippet: %+v %v", desktop, err)
	}
	if got := text("#snippet-claude-code"); got != "claude mcp add --transport http acme-agents "+mcpURL {
		t.Fatalf("Claude Code: %q", got)
	}

	// The install links carry the URL in the form each host decodes.
	vs, ok := strings.CutPrefix(attr("#install-vscode", "href"), "vscode:mcp/install?")
	if !ok {
		t.Fatal("no VS Code install link")
	}
	vsJSON, err := url.PathUnescape(vs)
	var vsCfg struct{ Name, Type, URL string }
	if err != nil || json.Unmarshal([]byte(vsJSON), &vsCfg) != nil || vsCfg.URL != mcpURL || vsCfg.Type != "http" || vsCfg.Name != "acme-agents" {
		t.Fatalf("VS Code link %q: %+v", vsJSON, vsCfg)
	}
	cl, err := url.Parse(attr("#install-cursor", "href"))
	if err != nil || cl.Scheme != "cursor" {
		t.Fatalf("Cursor link: %v %v", cl, err)
	}
	raw, _ := base64.StdEncoding.DecodeString(cl.Query().Get("config"))
	var curCfg struct{ URL string }
	if json.Unmarshal(raw, &curCfg) != nil || curCfg.URL != mcpURL || cl.Query().Get("name") != "acme-agents" {
		t.Fatalf("Cursor config %q", raw)
	}
	if got := text("#metadata-url"); got != s.URL+"/.well-known/oauth-protected-resource/mcp" {
		t.Fatalf("metadata URL %q", got)
	}
	// That document exists at the address the page gives.
	resp, err := http.Get(text("#metadata-url"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("metadata document: %d", resp.StatusCode)
	}
}

var titleTag = regexp.MustCompile(`^(.+) · (.+)$`)

// A server with a custom site name shows it in every page's title and
// header, in a real browser, from the start page through sign-up (whose
// mail, read from the development mailbox, names it too), email
// verification, sign-in, the account pages and the OAuth consent page.
func TestChromiumBrandingJourney(t *testing.T) {
	bin := chromiumtest.Bin(t)
	const site = "Acme Agents"
	s := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{
		SiteName: site, SiteDescription: "Agents for the Acme team.", AccentColor: "#0f766e",
	}})

	browserCtx, ctx := chromiumtest.Start(t, bin, 2*time.Minute)
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			loc, _ := chromedp.Run(browserCtx, chromedp.Location())
			chromiumtest.Screenshot(t, browserCtx, "branding-failed")
			t.Fatalf("%s (at %s): %v", name, loc, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	branded := func(page string) {
		t.Helper()
		title, err := chromedp.Run(ctx, chromedp.Title())
		m := titleTag.FindStringSubmatch(title)
		if err != nil || m == nil || m[2] != site {
			loc, _ := chromedp.Run(ctx, chromedp.Location())
			t.Fatalf("%s (%s): title %q", page, loc, title)
		}
		if got := text("#site-name"); got != site {
			t.Fatalf("%s: header names %q", page, got)
		}
		// The accent colour's stylesheet applies (a file, no inline style).
		accent, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.documentElement).getPropertyValue("--accent").trim()`))
		if err != nil || accent != "#0f766e" {
			t.Fatalf("%s: accent %q %v", page, accent, err)
		}
	}
	visit := func(page, path, wait string) {
		t.Helper()
		step("open "+page, chromedp.Navigate(s.URL+path), chromedp.WaitVisible(chromedp.CSS(wait)))
		branded(page)
	}

	visit("start", "/", "#home-title")
	if got := text("#home-title"); got != site {
		t.Fatalf("start page heading %q", got)
	}
	if got := text("#site-description"); got != "Agents for the Acme team." {
		t.Fatalf("description %q", got)
	}
	visit("connect", "/connect", "#mcp-url")
	visit("sign-in", "/login", "#email")
	visit("password reset", "/password-reset", "#email")
	visit("not found", "/no-such-page", "main")
	visit("sign-up", "/signup", "#username")
	const pw = "a long enough password"
	step("sign up",
		chromedp.SendKeys(chromedp.ID("email"), "zoe@example.com"),
		chromedp.SendKeys(chromedp.ID("username"), "zoe"),
		chromedp.SendKeys(chromedp.ID("password"), pw),
		chromedp.Click(chromedp.CSS(`form[action="/signup"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.ID("next-connect")),
	)
	branded("signed up")

	// The verification mail, kept by the development mailer (delivered
	// through the outbox), names the site; its link opens a branded page.
	var link string
	deadline := time.Now().Add(15 * time.Second)
	for link == "" && time.Now().Before(deadline) {
		step("read the mailbox", chromedp.Navigate(s.URL+"/dev/mail"), chromedp.WaitVisible(chromedp.CSS("main")))
		branded("mailbox")
		subjects, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll(".mail-subject")].map(e => e.textContent)`))
		links, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("a.mail-link")].map(e => e.href)`))
		for i, subj := range subjects {
			if subj != "Verify your email address for "+site {
				t.Fatalf("mail subject %q", subj)
			}
			if i < len(links) {
				link = links[i]
			}
		}
		if link == "" {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if link == "" {
		t.Fatal("no verification mail arrived")
	}
	step("open the verification link", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS(`form[action="/verify-email"] button`)))
	branded("verify email")
	// The page before the click has a heading too: wait for the answer's.
	// Evaluating while the form's navigation replaces the page can fail;
	// ask again until the new page answers.
	step("verify", chromedp.Click(chromedp.CSS(`form[action="/verify-email"] button`)))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		done, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.readyState === "complete" && document.querySelector("main h1")?.textContent === "Email verified"`))
		if err == nil && done {
			break
		}
		if time.Now().After(deadline) {
			chromiumtest.Screenshot(t, browserCtx, "branding-failed")
			t.Fatalf("the verification did not answer: %v", err)
		}
	}
	branded("verified")

	step("sign in",
		chromedp.Navigate(s.URL+"/login"),
		chromedp.SendKeys(chromedp.ID("email"), "zoe@example.com"),
		chromedp.SendKeys(chromedp.ID("password"), pw),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/logout"]`)),
	)
	branded("account")
	visit("start, signed in", "/", "#go-account")
	visit("security", "/account/security", "main h1")
	visit("connected apps", "/account/apps", "#no-apps")
	visit("secrets", "/account/secrets", "main h1")
	visit("export", "/account/export", "main h1")
	visit("delete", "/account/delete", "#confirm")
	visit("feedback", "/account/feedback", "main h1")

	// The consent page an agent's sign-in leads to.
	resp, err := http.Post(s.URL+"/oauth/register", "application/json", strings.NewReader(`{"client_name":"Test agent","redirect_uris":["http://127.0.0.1:9/callback"],"token_endpoint_auth_method":"none"}`))
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
	sum := sha256.Sum256([]byte(rand.Text() + rand.Text()))
	q := url.Values{"response_type": {"code"}, "client_id": {client.ClientID}, "redirect_uri": {"http://127.0.0.1:9/callback"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"state": {rand.Text()}, "scope": {"mcp"}, "resource": {s.URL + "/mcp"}}
	visit("consent", "/oauth/authorize?"+q.Encode(), "main h1")
	if title, _ := chromedp.Run(ctx, chromedp.Title()); title != "Connect Test agent · "+site {
		t.Fatalf("consent page title %q", title)
	}
}
