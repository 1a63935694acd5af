package web

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// elementText returns the unescaped text of the element with id in body.
func elementText(t *testing.T, body, id string) string {
	t.Helper()
	m := regexp.MustCompile(`<[a-z0-9]+ [^>]*id="` + regexp.QuoteMeta(id) + `"[^>]*>([^<]*)<`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no element #%s in\n%s", id, body)
	}
	return html.UnescapeString(m[1])
}

// elementAttr returns the unescaped attribute attr of the element with id.
func elementAttr(t *testing.T, body, id, attr string) string {
	t.Helper()
	m := regexp.MustCompile(`<[a-z0-9]+ [^>]*id="` + regexp.QuoteMeta(id) + `"[^>]*>`).FindString(body)
	if m == "" {
		t.Fatalf("no element #%s", id)
	}
	v := regexp.MustCompile(` ` + attr + `="([^"]*)"`).FindStringSubmatch(m)
	if v == nil {
		t.Fatalf("#%s has no %s: %s", id, attr, m)
	}
	return html.UnescapeString(v[1])
}

// The start page is public: it names the site, says what it is, and leads
// to sign-up, sign-in and the connect page; a signed-in person gets a way
// to their account instead. (It used to redirect to the sign-in page.)
func TestHomePage(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	h := newTestHandler(t, s, func(o *Options) {
		o.SiteName = "Acme Agents"
		o.SiteDescription = "Tools for the Acme team & friends."
	})
	srv := serve(t, h)
	anon := newBrowser(t, srv)
	a := anon.get("/")
	expect(t, "home", a, http.StatusOK, "<title>Welcome · Acme Agents</title>", "Tools for the Acme team &amp; friends.", `href="/signup"`, `href="/login"`, `href="/connect"`)
	if got := elementText(t, a.Body, "home-title"); got != "Acme Agents" {
		t.Fatalf("heading %q", got)
	}
	if got := elementText(t, a.Body, "home-mcp-url"); got != "http://enclave.test/mcp" {
		t.Fatalf("MCP URL %q", got)
	}
	checkSecurityHeaders(t, "home", a.Header, false)

	b := newBrowser(t, srv)
	signedIn(t, h, b, "ann@example.com", "ann", false)
	a = b.get("/")
	expect(t, "home signed in", a, http.StatusOK, `id="go-account" href="/account"`, `href="/connect"`)
	if strings.Contains(a.Body, `id="go-signup"`) {
		t.Fatal("a signed-in person is offered sign-up")
	}

	// Without a description the page still says what the server is; with
	// sign-up closed it offers none.
	h2 := newTestHandler(t, s, func(o *Options) {
		o.Accounts = newAccountsWith(t, s, accounts.Config{Signup: accounts.SignupClosed})
	})
	a = newBrowser(t, serve(t, h2)).get("/")
	expect(t, "home closed", a, http.StatusOK, defaultDescription, "<title>Welcome · enclave</title>")
	if strings.Contains(a.Body, `id="go-signup"`) {
		t.Fatal("sign-up is closed but offered")
	}
}

// newAccountsWith is newAccounts with cfg's other fields.
func newAccountsWith(t *testing.T, s *storage.Store, cfg accounts.Config) *accounts.Service {
	t.Helper()
	cfg.Argon2 = accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}
	cfg.Logger = quietLogger()
	svc, err := accounts.New(context.Background(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// The connect page is public and every setup on it carries the server's
// own MCP URL, in the form its host reads: the Claude Desktop JSON through
// mcp-remote, the claude mcp add command, the VS Code install link
// (encodeURIComponent'd JSON) and mcp.json, the Cursor deep link (base64
// JSON) and mcp.json.
func TestConnectPage(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	for _, tc := range []struct {
		base, site, key string
		allowHTTP       bool
	}{
		{"https://agents.example.com", "Acme Agents", "acme-agents", false},
		{"https://example.com/tools", "enclave", "enclave", false},
		{"http://127.0.0.1:8080", "Ünï Tools!", "n-tools", false},
		{"http://intranet.example:8080", "Ω", "mcp-server", true},
	} {
		t.Run(tc.base, func(t *testing.T) {
			h := newTestHandler(t, s, func(o *Options) { o.BaseURL, o.SiteName = tc.base, tc.site })
			a := newBrowser(t, serve(t, h)).get("/connect")
			expect(t, "connect", a, http.StatusOK, "<title>Connect an agent · ")
			checkSecurityHeaders(t, "connect", a.Header, strings.HasPrefix(tc.base, "https"))
			want := tc.base + "/mcp"
			if got := elementText(t, a.Body, "mcp-url"); got != want {
				t.Fatalf("MCP URL %q, want %q", got, want)
			}

			var desktop struct {
				MCPServers map[string]struct {
					Command string
					Args    []string
				} `json:"mcpServers"`
			}
			if err := json.Unmarshal([]byte(elementText(t, a.Body, "snippet-claude-desktop")), &desktop); err != nil {
				t.Fatal(err)
			}
			wantArgs := []string{"-y", "mcp-remote", want}
			if tc.allowHTTP {
				wantArgs = append(wantArgs, "--allow-http")
			}
			if d := desktop.MCPServers[tc.key]; d.Command != "npx" || strings.Join(d.Args, " ") != strings.Join(wantArgs, " ") {
				t.Fatalf("Claude Desktop: %+v", desktop)
			}

			if got := elementText(t, a.Body, "snippet-claude-code"); got != "claude mcp add --transport http "+tc.key+" "+want {
				t.Fatalf("Claude Code: %q", got)
			}

			link := elementAttr(t, a.Body, "install-vscode", "href")
			raw, ok := strings.CutPrefix(link, "vscode:mcp/install?")
			if !ok || strings.ContainsAny(raw, "{}\" +") {
				t.Fatalf("VS Code link %q", link)
			}
			dec, err := url.PathUnescape(raw)
			if err != nil {
				t.Fatal(err)
			}
			var vs struct{ Name, Type, URL string }
			if err := json.Unmarshal([]byte(dec), &vs); err != nil || vs.Name != tc.key || vs.Type != "http" || vs.URL != want {
				t.Fatalf("VS Code link config %q: %+v %v", dec, vs, err)
			}
			var vsFile struct {
				Servers map[string]struct{ Type, URL string }
			}
			if err := json.Unmarshal([]byte(elementText(t, a.Body, "snippet-vscode")), &vsFile); err != nil || vsFile.Servers[tc.key].URL != want || vsFile.Servers[tc.key].Type != "http" {
				t.Fatalf(".vscode/mcp.json: %+v %v", vsFile, err)
			}

			cl, err := url.Parse(elementAttr(t, a.Body, "install-cursor", "href"))
			if err != nil || cl.Scheme != "cursor" || cl.Host != "anysphere.cursor-deeplink" || cl.Path != "/mcp/install" {
				t.Fatalf("Cursor link %v %v", cl, err)
			}
			cfg, err := base64.StdEncoding.DecodeString(cl.Query().Get("config"))
			if err != nil {
				t.Fatal(err)
			}
			var cur struct{ URL string }
			if err := json.Unmarshal(cfg, &cur); err != nil || cur.URL != want || cl.Query().Get("name") != tc.key {
				t.Fatalf("Cursor config %s name %q: %v", cfg, cl.Query().Get("name"), err)
			}
			var curFile struct {
				MCPServers map[string]struct{ URL string } `json:"mcpServers"`
			}
			if err := json.Unmarshal([]byte(elementText(t, a.Body, "snippet-cursor")), &curFile); err != nil || curFile.MCPServers[tc.key].URL != want {
				t.Fatalf("Cursor mcp.json: %+v %v", curFile, err)
			}
			if got := elementText(t, a.Body, "metadata-url"); got != tc.base+"/.well-known/oauth-protected-resource/mcp" {
				t.Fatalf("metadata %q", got)
			}

			// The copy buttons' script is a first-party file, served with
			// the headers and linked by version.
			base, _ := url.Parse(tc.base)
			prefix := strings.TrimRight(base.Path, "/")
			if !strings.Contains(a.Body, `<script src="`+prefix+connectScriptPath+"?v="+connectScriptVersion+`" defer></script>`) {
				t.Fatal("the connect page does not load its script")
			}
		})
	}
	h := newTestHandler(t, s, nil)
	js := newBrowser(t, serve(t, h)).get(connectScriptPath + "?v=" + connectScriptVersion)
	expect(t, "script", js, http.StatusOK, "navigator.clipboard")
	if ct := js.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") || !strings.Contains(js.Header.Get("Cache-Control"), "immutable") {
		t.Fatalf("script headers %v", js.Header)
	}
}

// Claude Code's command stays one safe shell word per argument whatever
// the base URL holds.
func TestShellWord(t *testing.T) {
	for in, want := range map[string]string{
		"https://x.example/mcp":      "https://x.example/mcp",
		"https://x.example/a b/mcp":  "'https://x.example/a b/mcp'",
		"https://x.example/$(id)":    "'https://x.example/$(id)'",
		"https://x.example/it's/mcp": `'https://x.example/it'\''s/mcp'`,
		"":                           "''",
	} {
		if got := shellWord(in); got != want {
			t.Errorf("shellWord(%q) = %q, want %q", in, got, want)
		}
	}
	if got := encodeURIComponent(`{"a":"b c/é"}`); got != "%7B%22a%22%3A%22b%20c%2F%C3%A9%22%7D" {
		t.Errorf("encodeURIComponent: %q", got)
	}
}

// The empty Connected apps page, the account page and the page after
// sign-up lead to the connect page.
func TestConnectLinks(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	h := newTestHandler(t, s, func(o *Options) { o.OAuth = &fakeApps{} })
	srv := serve(t, h)
	a := newBrowser(t, srv).post("/signup", url.Values{"email": {"zoe@example.com"}, "username": {"zoe"}, "password": {testPassword}})
	expect(t, "signup", a, http.StatusOK, "Check your email", `id="next-connect"`, `href="/connect"`)
	b := newBrowser(t, srv)
	signedIn(t, h, b, "ann@example.com", "ann", false)
	expect(t, "account", b.get("/account"), http.StatusOK, `id="connect-hint"`, `href="/connect">Connect an agent</a> has`)
	expect(t, "apps", b.get("/account/apps"), http.StatusOK, `id="no-apps"`, `href="/connect">Connect an agent</a> shows`)
}

// Branding: the site name is in every page title and the header, and in
// mail; the logo and the accent colour reach the pages through files of
// this origin (the policy allows no inline style); values that could break
// a page, a header or the policy are refused.
func TestBranding(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	for _, bad := range []func(*Options){
		func(o *Options) { o.AccentColor = "red" },
		func(o *Options) { o.AccentColor = "#12345" },
		func(o *Options) { o.AccentColor = "#1234567" },
		func(o *Options) { o.AccentColor = "#fff;}body{display:none" },
		func(o *Options) { o.AccentColor = "rgb(1,2,3)" },
		func(o *Options) { o.LogoURL = "https://cdn.example/logo.png" },
		func(o *Options) { o.LogoURL = "//cdn.example/logo.png" },
		func(o *Options) { o.LogoURL = `/\cdn.example/logo.png` },
		func(o *Options) { o.LogoURL = "javascript:alert(1)" },
		func(o *Options) { o.LogoURL = "/logo.png\" onerror=\"x" },
		func(o *Options) { o.LogoURL = "logo.png" },
		func(o *Options) { o.SiteName = "Acme\r\nBcc: x@example.com" },
		func(o *Options) { o.SiteName = strings.Repeat("a", 65) },
		func(o *Options) { o.SiteName = "bad\xff" },
		func(o *Options) { o.SiteDescription = "two\nlines" },
	} {
		opts := Options{Store: s, Accounts: newAccounts(t, s, nil), Logger: quietLogger()}
		bad(&opts)
		if _, err := New(opts); err == nil {
			t.Errorf("New accepted %+v", struct{ Site, Desc, Logo, Accent string }{opts.SiteName, opts.SiteDescription, opts.LogoURL, opts.AccentColor})
		}
	}

	h := newTestHandler(t, s, func(o *Options) {
		o.SiteName, o.LogoURL, o.AccentColor = "Acme Agents", "/brand/logo.svg", "#FFCC00"
		o.OAuth = &fakeApps{}
	})
	srv := serve(t, h)
	b := newBrowser(t, srv)
	signedIn(t, h, b, "ann@example.com", "ann", false)
	for _, path := range []string{"/", "/connect", "/account", "/account/apps", "/account/security", "/no-such-page"} {
		a := b.get(path)
		title := regexp.MustCompile(`<title>([^<]*)</title>`).FindStringSubmatch(a.Body)
		if title == nil || !strings.HasSuffix(title[1], " · Acme Agents") {
			t.Errorf("%s: title %v", path, title)
		}
		if !strings.Contains(a.Body, `<img class="logo" src="/brand/logo.svg" alt="">`) || elementText(t, a.Body, "site-name") != "Acme Agents" {
			t.Errorf("%s: no logo or site name in the header", path)
		}
		if !strings.Contains(a.Body, `<link rel="stylesheet" href="`+themePath+"?v="+h.themeVersion+`">`) {
			t.Errorf("%s: no theme stylesheet", path)
		}
	}
	css := b.get(themePath + "?v=" + h.themeVersion)
	expect(t, "theme", css, http.StatusOK, "--accent: #ffcc00;", "--accent-fg: #111111;")
	if ct := css.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/css") {
		t.Fatalf("theme Content-Type %q", ct)
	}
	if got := string(themeCSS("#1a2b3c")); !strings.Contains(got, "--accent-fg: #ffffff;") {
		t.Fatalf("dark accent: %s", got)
	}

	// Mail names the site.
	newBrowser(t, srv).post("/signup", url.Values{"email": {"zoe@example.com"}, "username": {"zoe"}, "password": {testPassword}})
	m, ok := h.DevMail().Last("zoe@example.com")
	if !ok || m.Subject != "Verify your email address for Acme Agents" {
		t.Fatalf("verification mail %+v", m)
	}

	// Without an accent colour there is no theme file to load.
	plain := newTestHandler(t, s, nil)
	a := newBrowser(t, serve(t, plain)).get("/")
	if strings.Contains(a.Body, themePath) || strings.Contains(a.Body, `class="logo"`) {
		t.Fatal("an unbranded page links a theme or a logo")
	}
	expect(t, "no theme", newBrowser(t, serve(t, plain)).get(themePath), http.StatusNotFound)
}

// Downloaded exports are named after the site.
func TestExportFileNamedAfterSite(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	acc := newAccounts(t, s, nil)
	h := newTestHandler(t, s, func(o *Options) {
		o.SiteName, o.Accounts, o.Lifecycle = "Acme Agents", acc, newLifecycle(t, s, acc)
	})
	b := newBrowser(t, serve(t, h))
	signedIn(t, h, b, "ann@example.com", "ann", false)
	for path, want := range map[string]string{
		"/account/export/manifest.json": `attachment; filename="acme-agents-manifest-ann.json"`,
		"/account/export/data.json":     `attachment; filename="acme-agents-export-ann.json"`,
	} {
		a := b.get(path)
		if a.Status != http.StatusOK || a.Header.Get("Content-Disposition") != want {
			t.Errorf("%s: %d %q", path, a.Status, a.Header.Get("Content-Disposition"))
		}
	}
}
