package e2e

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/internal/chromiumtest"
	"github.com/enclave-mcp/enclave/storage"
)

// TestRemoteMCPConsentAtSecondServer: a second enclave server (B) is the
// remote MCP server. Alice's agent on server A adds B's /mcp with
// mcpServerAdd: B asks for a token, so A registers itself at B's
// authorization server (dynamic registration: A's origin is not https, so
// no client ID metadata document) and answers consent_required. Alice,
// signed in on A in headless Chromium, grants access on A's MCP servers
// page: B asks her to sign in and consent (clicked), and A's callback
// seals the token and lists B's tools. They appear in alice's tools/list
// on A, prefixed mcp_b__, and not in bob's; calling mcp_b__whoami runs on
// B as alice's account there. The token is in no answer, log line, export
// or audit row of A. Removing the server revokes the token at B, and so
// does deleting alice's account at A (the hook remote MCP servers add to
// the assembled server's account deletion once they are wired).
func TestRemoteMCPConsentAtSecondServer(t *testing.T) {
	bin := chromiumtest.Bin(t)
	type run struct {
		d             storage.Dialect
		deleteAccount bool // instead of removing the server
	}
	var runs []run
	for _, d := range enclavetest.Dialects() {
		runs = append(runs, run{d, false}, run{d, true})
	}
	for _, rc := range runs {
		d, name, deleteAccount := rc.d, string(rc.d), rc.deleteAccount
		if deleteAccount {
			name += "/account-deleted"
		}
		t.Run(name, func(t *testing.T) {
			b := enclavetest.Start(t, enclavetest.Options{Dialect: d})
			aliceAtB := b.CreateUser(t, "alicebee")
			logs := &lockedBuffer{}
			a := enclavetest.Start(t, enclavetest.Options{Dialect: d, Host: "127.0.0.2", Config: enclave.Config{
				Logger:    slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
				RemoteMCP: remotemcp.Options{AllowLoopbackHTTP: true},
			}})
			aliceAtA := a.CreateUser(t, "alice")
			bob := a.CreateUser(t, "bob")

			// The agent adds B: consent is needed.
			r, err := aliceAtA.MCP(t).Call("mcpServerAdd", map[string]any{"url": b.URL + "/mcp", "name": "b"})
			if err != nil || r.IsError {
				t.Fatalf("mcpServerAdd: %+v %v", r, err)
			}
			var added remotemcp.Added
			if err := r.Decode(&added); err != nil || added.Status != remotemcp.StatusConsentRequired || added.Auth != remotemcp.AuthOAuth ||
				!strings.HasPrefix(added.ConsentAt, a.URL+remotemcp.PagePath) {
				t.Fatalf("added: %s %v", r.Structured, err)
			}
			// An agent cannot start consent: that is the web shell's.
			if rs, err := aliceAtA.MCP(t).Call("mcpServerConsentStart", map[string]any{"name": "b", "binding": strings.Repeat("x", 20)}); err == nil && !rs.IsError {
				t.Fatalf("an agent started consent: %+v", rs)
			}

			browser, ctx := chromiumtest.Start(t, bin, 40*time.Second)
			fail := func(step string, err error) {
				t.Helper()
				if err != nil {
					loc, _ := chromedp.Run(browser, chromedp.Location())
					t.Logf("at %s", loc)
					chromiumtest.Screenshot(t, browser, "remotemcp-"+strings.ReplaceAll(step, " ", "-"))
					t.Fatalf("%s: %v", step, err)
				}
			}
			signIn := func(u *enclavetest.User) chromedp.Action[chromedp.Void] {
				return chromedp.Steps(
					chromedp.WaitVisible(chromedp.ID("password")),
					chromedp.SendKeys(chromedp.ID("email"), u.Email),
					chromedp.SendKeys(chromedp.ID("password"), u.Password),
					chromedp.Click(chromedp.CSS(`form button[type="submit"]`)),
				)
			}
			// Signed in once the login form is gone (navigating earlier
			// would abort the sign-in's own redirect).
			fail("sign in at A", chromedp.Do(ctx, chromedp.Navigate(a.URL+"/login"), signIn(aliceAtA), chromedp.WaitNotPresent(chromedp.ID("password"))))
			fail("servers page", chromedp.Do(ctx, chromedp.Navigate(added.ConsentAt), chromedp.WaitVisible(chromedp.ID("mcp-server-b"))))
			fail("grant", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#mcp-server-b .mcp-server-consent`)),
				chromedp.WaitVisible(chromedp.ID("mcp-consent-continue")), chromedp.Click(chromedp.ID("mcp-consent-continue")), signIn(aliceAtB)))
			fail("consent at B", chromedp.Do(ctx,
				chromedp.WaitVisible(chromedp.CSS(`button[value="approve"]`)),
				chromedp.Click(chromedp.CSS(`button[value="approve"]`))))
			fail("back at A", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#mcp-server-b .mcp-server-tools"))))
			status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#mcp-server-b .mcp-server-status")))
			fail("status", err)
			if status != remotemcp.StatusActive {
				t.Fatalf("after the callback: status %q", status)
			}

			// B's tools are alice's on A, prefixed; not bob's.
			aliceTools, err := aliceAtA.MCP(t).Tools()
			if err != nil || !slices.Contains(aliceTools, "mcp_b__whoami") {
				t.Fatalf("alice's tools on A (%v): %v", err, aliceTools)
			}
			for _, n := range aliceTools {
				if strings.HasPrefix(n, remotemcp.Prefix) && !strings.HasPrefix(n, "mcp_b__") {
					t.Fatalf("unprefixed remote tool %s", n)
				}
			}
			bobTools, err := bob.MCP(t).Tools()
			if err != nil || slices.ContainsFunc(bobTools, func(n string) bool { return strings.HasPrefix(n, remotemcp.Prefix) }) {
				t.Fatalf("bob's tools on A (%v): %v", err, bobTools)
			}
			if rb, err := bob.MCP(t).Call("mcp_b__whoami", map[string]any{}); err == nil && !rb.IsError {
				t.Fatalf("bob called alice's remote tool: %+v", rb)
			}
			// Calling it runs on B as alice's account there.
			w, err := aliceAtA.MCP(t).Call("mcp_b__whoami", map[string]any{})
			if err != nil || w.IsError || !strings.Contains(w.Text, "alicebee") {
				t.Fatalf("mcp_b__whoami: %+v %v", w, err)
			}
			// The list shows the server, never a token.
			l, err := aliceAtA.MCP(t).Call("mcpServerList", map[string]any{})
			if err != nil || l.IsError || !strings.Contains(string(l.Structured), `"mcp_b__whoami"`) {
				t.Fatalf("mcpServerList: %+v %v", l, err)
			}
			token := remoteToken(t, a, aliceAtA)
			for _, ans := range []enclavetest.ToolResult{r, w, l} {
				if strings.Contains(ans.Text, token) || strings.Contains(string(ans.Structured), token) {
					t.Fatal("an answer holds the remote token")
				}
			}
			if st := mcpStatus(t, b.URL, token); st != 200 {
				t.Fatalf("B refuses the token A holds: %d", st)
			}
			scanForRemoteToken(t, a, aliceAtA, logs, token)
			if deleteAccount {
				// Deleting alice's account at A revokes the token at B.
				if res, err := a.Lifecycle().Delete(t.Context(), aliceAtA.Owner()); err != nil || !res.Completed {
					t.Fatalf("delete alice at A: %+v, %v", res, err)
				}
				if st := mcpStatus(t, b.URL, token); st != 401 {
					t.Fatalf("B still accepts the token after alice's account at A was deleted: %d", st)
				}
				return
			}
			// Removing on the page revokes the token at B.
			fail("remove", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#mcp-server-b form:last-of-type button[type="submit"]`)),
				chromedp.WaitVisible(chromedp.ID("no-mcp-servers"))))
			if st := mcpStatus(t, b.URL, token); st != 401 {
				t.Fatalf("B still accepts the token after the removal: %d", st)
			}
		})
	}
}

// remoteToken reads alice's sealed token for server b as A would use it.
func remoteToken(t *testing.T, a *enclavetest.Server, u *enclavetest.User) string {
	t.Helper()
	tok, err := a.RemoteMCP().AccessToken(t.Context(), u.Owner(), "b")
	if err != nil || tok == "" {
		t.Fatalf("alice's token for b: %v", err)
	}
	return tok
}

// scanForRemoteToken fails when token appears in alice's export, A's logs
// or any audit row; the export must hold the server's metadata.
func scanForRemoteToken(t *testing.T, a *enclavetest.Server, u *enclavetest.User, logs *lockedBuffer, token string) {
	t.Helper()
	var export bytes.Buffer
	if err := a.Lifecycle().WriteExport(t.Context(), u.Owner(), &export); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(export.String(), "remote_mcp_servers") || !strings.Contains(export.String(), "/mcp") {
		t.Fatal("the export lacks the server's metadata")
	}
	if strings.Contains(export.String(), token) {
		t.Fatal("the export holds the token")
	}
	if logs.String() == "" || strings.Contains(logs.String(), token) {
		t.Fatal("no logs captured, or a log line holds the token")
	}
	var rows []map[string]any
	if err := a.Store().DB.NewSelect().Table("audit_events").Scan(t.Context(), &rows); err != nil {
		t.Fatal(err)
	}
	consents := 0
	for _, r := range rows {
		if strings.Contains(fmt.Sprint(r), token) {
			t.Fatalf("an audit row holds the token: %v", r)
		}
		if r["action"] == "mcp_server_consent" {
			consents++
		}
	}
	if consents == 0 {
		t.Fatal("the consent is not audited")
	}
}
