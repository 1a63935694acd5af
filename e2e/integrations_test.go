package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/internal/chromiumtest"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
)

// TestIntegrationsConnectAtSecondServer: a second enclave server (B) is the
// OAuth provider. Alice, signed in on server A in headless Chromium,
// connects her account at B from A's Connections page: B asks her to sign
// in and to consent (clicked in the browser), and A's callback stores the
// connection. Her agent then sees it in connectionList over MCP (no token
// in the answer). A request with {{connection:b}} through A's outbound
// gateway code (with A's integrations service, allowed to reach the
// loopback https proxy in front of B) opens an MCP session at B as alice
// and saves a memory there; no answer holds the token. Bob sees no
// connection, cannot use or disconnect hers. Disconnecting revokes the
// token at B: B refuses it afterwards; so does deleting alice's account
// at A (account deletion's connected-accounts hook, which stands for the
// integrations wired after it).
//
// A listens on 127.0.0.2: browsers keep cookies per host, not per port,
// and both servers name their session cookie alike.
func TestIntegrationsConnectAtSecondServer(t *testing.T) {
	bin := chromiumtest.Bin(t)
	type run struct {
		d             storage.Dialect
		deleteAccount bool // instead of disconnecting
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
			aliceAtB := b.CreateUser(t, "alice")
			clientID := registerClient(t, b.URL)
			// B's API over https: the outbound gateway sends only there.
			api := tlsProxy(t, b.URL)
			logs := &lockedBuffer{}
			a := enclavetest.Start(t, enclavetest.Options{Dialect: d, Host: "127.0.0.2", Config: enclave.Config{
				Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
				Integrations: integrations.Options{Providers: []integrations.Provider{{
					Name: "b", Issuer: b.URL, ClientID: clientID, APIHosts: []string{strings.TrimPrefix(api.URL, "https://")},
				}}}}})
			aliceAtA := a.CreateUser(t, "alice")
			bob := a.CreateUser(t, "bob")

			browser, ctx := chromiumtest.Start(t, bin, 40*time.Second)
			fail := func(step string, err error) {
				t.Helper()
				if err != nil {
					loc, _ := chromedp.Run(browser, chromedp.Location())
					t.Logf("at %s", loc)
					chromiumtest.Screenshot(t, browser, "integrations-"+strings.ReplaceAll(step, " ", "-"))
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
				chromedp.WaitVisible(chromedp.ID("connection-connect")), chromedp.WaitVisible(chromedp.ID("no-connections"))))
			// To B: sign in there, then consent.
			fail("connect", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#connection-connect button[type="submit"]`)),
				chromedp.WaitVisible(chromedp.ID("connection-continue")), chromedp.Click(chromedp.ID("connection-continue")), signIn(aliceAtB)))
			fail("consent at B", chromedp.Do(ctx,
				chromedp.WaitVisible(chromedp.CSS(`button[value="approve"]`)),
				chromedp.Click(chromedp.CSS(`button[value="approve"]`))))
			fail("back at A", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("connection-b"))))
			status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#connection-b .connection-status")))
			fail("status", err)
			location, err := chromedp.Run(ctx, chromedp.Location())
			fail("location", err)
			if status != integrations.StatusActive || !strings.HasPrefix(location, a.URL+"/account/connections") {
				t.Fatalf("after the callback: status %q at %s", status, location)
			}

			// The agent sees the connection, never its token.
			r, err := aliceAtA.MCP(t).Call("connectionList", map[string]any{})
			if err != nil || r.IsError {
				t.Fatalf("connectionList: %+v %v", r, err)
			}
			var list integrations.ListOutput
			if err := r.Decode(&list); err != nil || len(list.Connections) != 1 || list.Connections[0].Name != "b" || list.Connections[0].Provider != "b" {
				t.Fatalf("alice's connections: %+v %v", list, err)
			}
			token := useToken(t, a, aliceAtA)
			if strings.Contains(r.Text, token) || strings.Contains(string(r.Structured), token) {
				t.Fatal("connectionList shows the token")
			}
			// The token is alice's at B: B's /mcp accepts it as her.
			if st := mcpStatus(t, b.URL, token); st != http.StatusOK {
				t.Fatalf("B refuses the connection's token: %d", st)
			}
			// Over MCP, httpRequest refuses the connection for a host that
			// is not its provider's, before anything is sent.
			rh, err := aliceAtA.MCP(t).Call("httpRequest", map[string]any{"url": "https://example.com/",
				"headers": map[string]string{"Authorization": "{{connection:b}}"}})
			if err != nil || !rh.IsError || !strings.Contains(rh.Text, "provider's hosts") || strings.Contains(rh.Text, token) {
				t.Fatalf("httpRequest to another host: %+v %v", rh, err)
			}
			// Alice's agent's request through the outbound gateway, with
			// {{connection:b}}: a real MCP session at B as alice's account
			// there, which saves a memory B then holds for her.
			callB(t, a, aliceAtA, api)
			r2, err := aliceAtB.MCP(t).Call("memoryList", map[string]any{})
			if err != nil || !strings.Contains(string(r2.Structured), "saved from A through the gateway") {
				t.Fatalf("alice's memories at B: %+v %v", r2, err)
			}
			// Bob's agent cannot use alice's connection.
			bobGW := gateway(t, a, bob, api)
			if _, err := bobGW.Do(t.Context(), bob.Caller(t), outbound.Request{Method: "POST", URL: api.URL + "/mcp",
				Headers: map[string]string{"Authorization": "{{connection:b}}"}, Body: "{}"}); err == nil || !strings.Contains(err.Error(), `no connection named "b"`) {
				t.Fatalf("bob uses alice's connection: %v", err)
			}
			// The token is in no export, log line or audit row of A.
			scanForToken(t, a, aliceAtA, logs, token)
			// Bob has no connection and cannot remove alice's.
			rb, err := bob.MCP(t).Call("connectionList", map[string]any{})
			if err != nil || !strings.Contains(string(rb.Structured), `"connections":[]`) {
				t.Fatalf("bob's list: %+v %v", rb, err)
			}
			if rb, err = bob.MCP(t).Call("connectionDisconnect", map[string]any{"name": "b"}); err == nil && !rb.IsError {
				t.Fatalf("bob disconnected alice's connection: %+v", rb)
			}
			// An agent cannot start a connection: that is the web shell's.
			if rs, err := aliceAtA.MCP(t).Call("connectionConnectStart", map[string]any{"provider": "b", "binding": strings.Repeat("x", 20)}); err == nil && !rs.IsError {
				t.Fatalf("an agent started a connection: %+v", rs)
			}
			if deleteAccount {
				// Deleting alice's account at A revokes the token at B.
				if res, err := a.Lifecycle().Delete(t.Context(), aliceAtA.Owner()); err != nil || !res.Completed {
					t.Fatalf("delete alice at A: %+v, %v", res, err)
				}
				if st := mcpStatus(t, b.URL, token); st != http.StatusUnauthorized {
					t.Fatalf("B still accepts the token after alice's account at A was deleted: %d", st)
				}
				return
			}
			// Disconnecting on the page revokes the token at B.
			fail("disconnect", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#connection-b button[type="submit"]`)),
				chromedp.WaitVisible(chromedp.ID("no-connections"))))
			if st := mcpStatus(t, b.URL, token); st != http.StatusUnauthorized {
				t.Fatalf("B still accepts the token after the disconnect: %d", st)
			}
		})
	}
}

// registerClient registers a public client at the server at base whose
// redirect URI is A's callback on a loopback address (any port, as RFC
// 8252 allows).
func registerClient(t *testing.T, base string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"client_name": "server A", "redirect_uris": []string{"http://127.0.0.2" + integrations.CallbackPath + "/b"},
		"token_endpoint_auth_method": "none", "grant_types": []string{"authorization_code", "refresh_token"}, "response_types": []string{"code"},
	})
	resp, err := http.Post(base+oauth.PathRegister, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		ClientID string `json:"client_id"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil || out.ClientID == "" {
		t.Fatalf("register at B: %d %s", resp.StatusCode, raw)
	}
	return out.ClientID
}

// useToken opens alice's connection as the outbound gateway does.
func useToken(t *testing.T, a *enclavetest.Server, u *enclavetest.User) string {
	t.Helper()
	c, err := a.Integrations().Use(t.Context(), u.Owner(), "b")
	if err != nil {
		t.Fatal(err)
	}
	return c.AccessToken
}

// mcpStatus posts an MCP initialize to base's /mcp with token and returns
// the status.
func mcpStatus(t *testing.T, base, token string) int {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// tlsProxy serves target over https on loopback.
func tlsProxy(t *testing.T, target string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }})
	t.Cleanup(srv.Close)
	return srv
}

// gateway is server a's outbound gateway logic with its connections and
// secrets, allowed to reach the loopback TLS proxy api (the server's own
// gateway refuses loopback addresses, and no configuration changes that).
func gateway(t *testing.T, a *enclavetest.Server, u *enclavetest.User, api *httptest.Server) *outbound.Gateway {
	t.Helper()
	owner := u.Owner()
	return outbound.New(outbound.Options{
		Secrets: a.Secrets(), Connections: a.Integrations(), Audit: a.Audit(),
		Owner: func(context.Context, capabilities.Caller) (capabilities.Owner, error) {
			return capabilities.Owner(owner), nil
		},
		AllowPrivate: true, TLSConfig: api.Client().Transport.(*http.Transport).TLSClientConfig,
	})
}

// callB opens an MCP session at B through the gateway with alice's
// connection, and saves a memory there; every answer is checked for the
// token.
func callB(t *testing.T, a *enclavetest.Server, u *enclavetest.User, api *httptest.Server) {
	t.Helper()
	g := gateway(t, a, u, api)
	token := useToken(t, a, u)
	session := ""
	post := func(body string) outbound.Response {
		t.Helper()
		h := map[string]string{"Authorization": "{{connection:b}}", "Content-Type": "application/json",
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
		if len(resp.ConnectionsUsed) != 1 || resp.ConnectionsUsed[0] != "b" {
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
	res := post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"memorySave","arguments":{"text":"saved from A through the gateway"}}}`)
	if res.Status != http.StatusOK || strings.Contains(res.Body, `"isError":true`) {
		t.Fatalf("memorySave at B: %d %s", res.Status, res.Body)
	}
}

// lockedBuffer is a log destination safe for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// scanForToken fails when token appears in alice's export, the server's
// logs or any audit row; the export must hold the connection's metadata.
func scanForToken(t *testing.T, a *enclavetest.Server, u *enclavetest.User, logs *lockedBuffer, token string) {
	t.Helper()
	var export bytes.Buffer
	if err := a.Lifecycle().WriteExport(t.Context(), u.Owner(), &export); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(export.String(), "integration_connections") || !strings.Contains(export.String(), `"provider"`) {
		t.Fatal("the export lacks the connection's metadata")
	}
	if strings.Contains(export.String(), token) {
		t.Fatal("the export holds the token")
	}
	if logs.String() == "" {
		t.Fatal("no logs captured")
	}
	if strings.Contains(logs.String(), token) {
		t.Fatal("a log line holds the token")
	}
	var rows []map[string]any
	if err := a.Store().DB.NewSelect().Table("audit_events").Scan(t.Context(), &rows); err != nil {
		t.Fatal(err)
	}
	uses := 0
	for _, r := range rows {
		if strings.Contains(fmt.Sprint(r), token) {
			t.Fatalf("an audit row holds the token: %v", r)
		}
		if r["action"] == "connection_use" || r["action"] == "connection_connect" {
			uses++
		}
	}
	if uses < 2 {
		t.Fatalf("the connection and its use are not audited (%d rows)", uses)
	}
}
