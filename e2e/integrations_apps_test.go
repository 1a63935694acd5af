package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/internal/chromiumtest"
	"github.com/enclave-mcp/enclave/oauth"
)

// TestIntegrationsUserAppAtSecondServer: server A offers no provider;
// alice registers her own OAuth client (with a secret) at a second server
// B, pastes its issuer, client id and secret on A's Connections page in
// headless Chromium, and connects with it (sign-in and consent at B
// clicked in the browser). Her agent then reaches B's API with
// {{connection:mine}} through A's outbound gateway: a real MCP session at
// B as her account there. The client secret and the token are in no
// answer, export, log line or audit row; bob can neither see, use nor
// remove her app; removing it on the page revokes the token at B.
//
// A listens on 127.0.0.2 (see TestIntegrationsConnectAtSecondServer).
func TestIntegrationsUserAppAtSecondServer(t *testing.T) {
	bin := chromiumtest.Bin(t)
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			b := enclavetest.Start(t, enclavetest.Options{Dialect: d})
			aliceAtB := b.CreateUser(t, "alice")
			clientID, secret := registerConfidentialClient(t, b.URL, "http://127.0.0.2"+integrations.AppCallbackPath+"/mine")
			api := tlsProxy(t, b.URL)
			apiHost := strings.TrimPrefix(api.URL, "https://")
			logs := &lockedBuffer{}
			a := enclavetest.Start(t, enclavetest.Options{Dialect: d, Host: "127.0.0.2", Config: enclave.Config{
				Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
				// B is plain http on loopback: allowed for tests only.
				Integrations: integrations.Options{AllowLoopbackHTTP: true}}})
			aliceAtA := a.CreateUser(t, "alice")
			bob := a.CreateUser(t, "bob")

			browser, ctx := chromiumtest.Start(t, bin, 40*time.Second)
			fail := func(step string, err error) {
				t.Helper()
				if err != nil {
					loc, _ := chromedp.Run(browser, chromedp.Location())
					t.Logf("at %s", loc)
					chromiumtest.Screenshot(t, browser, "integrations-apps-"+strings.ReplaceAll(step, " ", "-"))
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
			fail("sign in at A", chromedp.Do(ctx, chromedp.Navigate(a.URL+"/login"), signIn(aliceAtA), chromedp.WaitVisible(chromedp.CSS(`form[action$="/logout"] button`))))
			fail("connections page", chromedp.Do(ctx, chromedp.Navigate(a.URL+"/account/connections"),
				chromedp.WaitVisible(chromedp.ID("app-add")), chromedp.WaitVisible(chromedp.ID("no-apps")), chromedp.WaitVisible(chromedp.ID("no-providers"))))
			base, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("app-redirect-base")))
			fail("redirect URI shown", err)
			if base != a.URL+integrations.AppCallbackPath+"/NAME" {
				t.Fatalf("the form shows the redirect URI %q", base)
			}
			fill := func(hosts string) chromedp.Action[chromedp.Void] {
				return chromedp.Steps(
					chromedp.SetValue(chromedp.ID("app-name"), "mine"),
					chromedp.SetValue(chromedp.ID("app-issuer"), b.URL),
					chromedp.SetValue(chromedp.ID("app-client-id"), clientID),
					chromedp.SetValue(chromedp.ID("app-client-secret"), secret),
					chromedp.SetValue(chromedp.ID("app-hosts"), hosts),
					chromedp.Click(chromedp.CSS(`#app-add button[type="submit"]`)),
				)
			}
			// A private API host is refused, with the reason, on the page;
			// the form keeps what was typed but the secret.
			fail("refused app", chromedp.Do(ctx, fill("10.0.0.1"), chromedp.WaitVisible(chromedp.ID("app-error"))))
			msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("app-error")))
			fail("error text", err)
			kept, err := chromedp.Run(ctx, chromedp.Value(chromedp.ID("app-client-id")))
			fail("form kept", err)
			sec, err := chromedp.Run(ctx, chromedp.Value(chromedp.ID("app-client-secret")))
			fail("secret not kept", err)
			if !strings.Contains(msg, "10.0.0.1") || kept != clientID || sec != "" {
				t.Fatalf("refusal: %q, client id %q, secret field %q", msg, kept, sec)
			}
			fail("add app", chromedp.Do(ctx, fill(apiHost), chromedp.WaitVisible(chromedp.ID("app-mine"))))
			redirect, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#app-mine .app-redirect")))
			fail("app redirect", err)
			if redirect != a.URL+integrations.AppCallbackPath+"/mine" {
				t.Fatalf("the app's redirect URI: %q", redirect)
			}
			// Connect with it: to B, sign in there, consent.
			fail("connect", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#app-mine .app-connect`)),
				chromedp.WaitVisible(chromedp.ID("connection-continue")), chromedp.Click(chromedp.ID("connection-continue")), signIn(aliceAtB)))
			fail("consent at B", chromedp.Do(ctx,
				chromedp.WaitVisible(chromedp.CSS(`button[value="approve"]`)),
				chromedp.Click(chromedp.CSS(`button[value="approve"]`))))
			fail("back at A", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("connection-mine"))))
			status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#connection-mine .connection-status")))
			fail("status", err)
			if status != integrations.StatusActive {
				t.Fatalf("after the callback: status %q", status)
			}

			// The agent sees the connection and the app, never a secret.
			mcp := aliceAtA.MCP(t)
			r, err := mcp.Call("connectionList", map[string]any{})
			if err != nil || r.IsError || !strings.Contains(string(r.Structured), `"ownApp":true`) {
				t.Fatalf("connectionList: %+v %v", r, err)
			}
			ra, err := mcp.Call("connectionAppList", map[string]any{})
			if err != nil || ra.IsError || !strings.Contains(string(ra.Structured), clientID) || strings.Contains(ra.Text+string(ra.Structured), secret) {
				t.Fatalf("connectionAppList: %+v %v", ra, err)
			}
			c, err := a.Integrations().Use(t.Context(), aliceAtA.Owner(), "mine")
			if err != nil {
				t.Fatal(err)
			}
			token := c.AccessToken
			if strings.Contains(r.Text+string(r.Structured), token) {
				t.Fatal("connectionList shows the token")
			}
			// An agent cannot add an app: that is the web shell's.
			if rs, err := mcp.Call("connectionAppAdd", map[string]any{"name": "agents", "issuer": b.URL, "clientId": "x", "apiHosts": []string{"evil.example.com"}}); err == nil && !rs.IsError {
				t.Fatalf("an agent added an app: %+v", rs)
			}
			// Over MCP, httpRequest refuses the connection for a host that
			// is not the app's, before anything is sent.
			rh, err := mcp.Call("httpRequest", map[string]any{"url": "https://example.com/",
				"headers": map[string]string{"Authorization": "{{connection:mine}}"}})
			if err != nil || !rh.IsError || strings.Contains(rh.Text, token) {
				t.Fatalf("httpRequest to another host: %+v %v", rh, err)
			}
			// Her agent's request through the gateway reaches B's API as her.
			callWith(t, a, aliceAtA, api, "mine", token)
			r2, err := aliceAtB.MCP(t).Call("memoryList", map[string]any{})
			if err != nil || !strings.Contains(string(r2.Structured), "saved with alice's own app") {
				t.Fatalf("alice's memories at B: %+v %v", r2, err)
			}
			// Bob: no app, cannot use or remove hers.
			rb, err := bob.MCP(t).Call("connectionAppList", map[string]any{})
			if err != nil || !strings.Contains(string(rb.Structured), `"apps":[]`) {
				t.Fatalf("bob's apps: %+v %v", rb, err)
			}
			if rb, err = bob.MCP(t).Call("connectionAppRemove", map[string]any{"name": "mine"}); err == nil && !rb.IsError {
				t.Fatalf("bob removed alice's app: %+v", rb)
			}
			if _, err := gateway(t, a, bob, api).Do(t.Context(), bob.Caller(t), outbound.Request{Method: "POST", URL: api.URL + "/mcp",
				Headers: map[string]string{"Authorization": "{{connection:mine}}"}, Body: "{}"}); err == nil || !strings.Contains(err.Error(), `no connection named "mine"`) {
				t.Fatalf("bob uses alice's connection: %v", err)
			}
			// Neither the secret nor the token is in A's export, logs or audit.
			var export bytes.Buffer
			if err := a.Lifecycle().WriteExport(t.Context(), aliceAtA.Owner(), &export); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(export.String(), "integration_apps") || !strings.Contains(export.String(), clientID) {
				t.Fatal("the export lacks the app's metadata")
			}
			var rows []map[string]any
			if err := a.Store().DB.NewSelect().Table("audit_events").Scan(t.Context(), &rows); err != nil {
				t.Fatal(err)
			}
			for what, v := range map[string]string{"export": export.String(), "logs": logs.String(), "audit": fmt.Sprint(rows)} {
				if strings.Contains(v, secret) || strings.Contains(v, token) {
					t.Fatalf("the %s holds the client secret or the token", what)
				}
			}
			// Removing the app on the page disconnects it and revokes the
			// token at B.
			fail("remove app", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#app-mine .app-remove`)),
				chromedp.WaitVisible(chromedp.ID("no-apps")), chromedp.WaitVisible(chromedp.ID("no-connections"))))
			if st := mcpStatus(t, b.URL, token); st != http.StatusUnauthorized {
				t.Fatalf("B still accepts the token after the app's removal: %d", st)
			}
		})
	}
}

// registerConfidentialClient registers a client with a secret at the
// server at base, as a person registers an app at a provider.
func registerConfidentialClient(t *testing.T, base, redirect string) (id, secret string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"client_name": "alice's app", "redirect_uris": []string{redirect},
		"token_endpoint_auth_method": "client_secret_basic", "grant_types": []string{"authorization_code", "refresh_token"}, "response_types": []string{"code"},
	})
	resp, err := http.Post(base+oauth.PathRegister, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil || out.ClientID == "" || out.ClientSecret == "" {
		t.Fatalf("register at B: %d %s", resp.StatusCode, raw)
	}
	return out.ClientID, out.ClientSecret
}

// callWith opens an MCP session at B through A's gateway with the
// connection name and saves a memory there; no answer holds the token.
func callWith(t *testing.T, a *enclavetest.Server, u *enclavetest.User, api *httptest.Server, name, token string) {
	t.Helper()
	g := gateway(t, a, u, api)
	session := ""
	post := func(body string) outbound.Response {
		t.Helper()
		h := map[string]string{"Authorization": "{{connection:" + name + "}}", "Content-Type": "application/json",
			"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": enclavetest.ProtocolVersion}
		if session != "" {
			h["Mcp-Session-Id"] = session
		}
		resp, err := g.Do(t.Context(), u.Caller(t), outbound.Request{Method: "POST", URL: api.URL + "/mcp", Headers: h, Body: body})
		if err != nil {
			t.Fatalf("through the gateway: %v", err)
		}
		if strings.Contains(resp.Body, token) || strings.Contains(fmt.Sprint(resp.Headers), token) {
			t.Fatal("an answer through the gateway holds the token")
		}
		if len(resp.ConnectionsUsed) != 1 || resp.ConnectionsUsed[0] != name {
			t.Fatalf("connections used: %+v", resp)
		}
		if v := resp.Headers["Mcp-Session-Id"]; len(v) > 0 {
			session = v[0]
		}
		return resp
	}
	init := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + enclavetest.ProtocolVersion + `","capabilities":{},"clientInfo":{"name":"via-a","version":"1"}}}`)
	if init.Status != http.StatusOK {
		t.Fatalf("initialize at B: %d %s", init.Status, init.Body)
	}
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	res := post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"memorySave","arguments":{"text":"saved with alice's own app"}}}`)
	if res.Status != http.StatusOK || strings.Contains(res.Body, `"isError":true`) {
		t.Fatalf("memorySave at B: %d %s", res.Status, res.Body)
	}
}
