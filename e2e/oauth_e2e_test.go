package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

var formAction = regexp.MustCompile(`<form[^>]*method="post"[^>]*action="([^"]*/oauth/authorize[^"]*)"`)

// The whole path an agent takes, through the real pages: register a client,
// authorize with PKCE (sign in and consent on the web shell's pages),
// exchange the code, call a capability on /mcp with the token; then a
// password change ends the token (sessions die with the password).
func TestOAuthThroughWebPagesToMCP(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv, base := serveHTTP(t, d, func(c *enclave.Config) { c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} })

			const email, password = "agent-owner@example.com", "correct horse battery staple"
			u, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: email, Username: "agentfriend", Password: password, Verified: true})
			if err != nil {
				t.Fatal(err)
			}

			jar, _ := cookiejar.New(nil)
			browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

			// Dynamic client registration (RFC 7591).
			redirect := "http://127.0.0.1:53682/callback"
			resp, err := http.Post(base+"/oauth/register", "application/json",
				strings.NewReader(`{"client_name":"Test Agent","redirect_uris":["`+redirect+`"],"token_endpoint_auth_method":"none"}`))
			if err != nil {
				t.Fatal(err)
			}
			var client struct {
				ClientID string `json:"client_id"`
			}
			json.NewDecoder(resp.Body).Decode(&client)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || client.ClientID == "" {
				t.Fatalf("register: %d", resp.StatusCode)
			}

			verifier := "a-verifier-of-at-least-forty-three-characters-0123456789"
			sum := sha256.Sum256([]byte(verifier))
			q := url.Values{
				"response_type": {"code"}, "client_id": {client.ClientID}, "redirect_uri": {redirect},
				"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
				"state": {"state-0123456789"}, "scope": {"mcp"}, "resource": {base + "/mcp"},
			}
			page := func(resp *http.Response) string {
				t.Helper()
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return string(b)
			}
			resp, err = browser.Get(base + "/oauth/authorize?" + q.Encode())
			if err != nil {
				t.Fatal(err)
			}
			body := page(resp)
			m := formAction.FindStringSubmatch(body)
			if resp.StatusCode != 200 || m == nil || !strings.Contains(body, `name="password"`) {
				t.Fatalf("authorize did not show the sign-in page: %d %.300s", resp.StatusCode, body)
			}
			resp, err = browser.PostForm(base+html.UnescapeString(m[1]), url.Values{"email": {email}, "password": {password}})
			if err != nil {
				t.Fatal(err)
			}
			body = page(resp)
			m = formAction.FindStringSubmatch(body)
			if resp.StatusCode != 200 || m == nil || !strings.Contains(body, "Test Agent") || resp.Header.Get("X-Frame-Options") != "DENY" {
				t.Fatalf("sign-in did not lead to the consent page: %d %.300s", resp.StatusCode, body)
			}
			resp, err = browser.PostForm(base+html.UnescapeString(m[1]), url.Values{"decision": {"approve"}})
			if err != nil {
				t.Fatal(err)
			}
			page(resp)
			loc, _ := url.Parse(resp.Header.Get("Location"))
			if resp.StatusCode != http.StatusSeeOther && resp.StatusCode != http.StatusFound || loc == nil || loc.Query().Get("code") == "" {
				t.Fatalf("consent: %d, location %v", resp.StatusCode, loc)
			}
			if loc.Query().Get("state") != "state-0123456789" || loc.Query().Get("iss") != base {
				t.Fatalf("authorization response lacks state or iss: %v", loc)
			}

			resp, err = http.PostForm(base+"/oauth/token", url.Values{
				"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "redirect_uri": {redirect},
				"client_id": {client.ClientID}, "code_verifier": {verifier}, "resource": {base + "/mcp"},
			})
			if err != nil {
				t.Fatal(err)
			}
			var tok struct {
				AccessToken  string `json:"access_token"`
				RefreshToken string `json:"refresh_token"`
			}
			json.NewDecoder(resp.Body).Decode(&tok)
			resp.Body.Close()
			if resp.StatusCode != 200 || tok.AccessToken == "" || tok.RefreshToken == "" {
				t.Fatalf("token: %d", resp.StatusCode)
			}

			initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
			session := enclavetest.Dial(t, base, tok.AccessToken).SessionID()
			_, body, _, _ = rpc(t, base, tok.AccessToken, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`)
			if !strings.Contains(body, u.StableID) {
				t.Fatalf("whoami with the token: %s", body)
			}

			// The audit log finds this user's rows of every kind with one
			// hash: web sign-in, capability denial, token refusal (with the
			// client address found through the trusted proxy). A made-up
			// token writes nothing.
			rpc(t, base, tok.AccessToken, session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"adminAuditLogQuery","arguments":{}}}`)
			if _, err := srv.Accounts().Lifecycle.Suspend(ctx, u.ID); err != nil {
				t.Fatal(err)
			}
			if code := rpcVia(t, base, tok.AccessToken, "203.0.113.5", initialize); code != http.StatusForbidden {
				t.Fatalf("token of a suspended account: %d, want 403", code)
			}
			if _, err := srv.Accounts().Lifecycle.Unsuspend(ctx, u.ID); err != nil {
				t.Fatal(err)
			}
			mcpRows := func() int {
				page, err := srv.Audit().Query(ctx, audit.Filter{Category: audit.CategoryMCP}, storage.PageRequest{})
				if err != nil {
					t.Fatal(err)
				}
				return len(page.Items)
			}
			before := mcpRows()
			for _, made := range []string{"made-up", tok.AccessToken[:len(tok.AccessToken)-4] + "AAAA", "ory_at_" + strings.Repeat("A", 43) + "." + strings.Repeat("B", 43)} {
				if code := rpcVia(t, base, made, "203.0.113.5", initialize); code != http.StatusUnauthorized {
					t.Fatalf("made-up token: %d", code)
				}
			}
			if n := mcpRows(); n != before {
				t.Fatalf("tokens matching no grant wrote %d audit rows", n-before)
			}
			admin, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "auditor@example.com", Username: "auditor", Password: password, Verified: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Accounts().Roles.GrantAdminAsOperator(ctx, admin.ID); err != nil {
				t.Fatal(err)
			}
			adminCaller, err := srv.Accounts().LoadCaller(ctx, admin.StableID)
			if err != nil {
				t.Fatal(err)
			}
			adminCaller.AllScopes = true // no token: as the CLI calls it
			res, err := srv.Registry().Invoke(ctx, adminCaller, "adminAuditLogQuery", json.RawMessage(`{"userId":"`+u.StableID+`"}`))
			if err != nil {
				t.Fatal(err)
			}
			out, _ := res.Structured.(audit.QueryOutput)
			kinds := map[string]audit.Event{}
			for _, e := range out.Events {
				kinds[e.Category+" "+e.Result] = e
			}
			if e, ok := kinds["auth success"]; !ok || e.IPHash != srv.Audit().HashIP("127.0.0.1") {
				t.Errorf("no web sign-in row for the user: %+v", out.Events)
			}
			if e, ok := kinds["capability denied"]; !ok || e.Action != "tool:adminAuditLogQuery" {
				t.Errorf("no capability denial row for the user: %+v", out.Events)
			}
			if e, ok := kinds["mcp denied"]; !ok || e.Reason != "account_suspended" || e.IPHash != srv.Audit().HashIP("203.0.113.5") {
				t.Errorf("no token refusal row for the user (with the forwarded client address): %+v", out.Events)
			}

			// The grant shows on the connected-apps page (same browser session).
			resp, err = browser.Get(base + "/account/apps")
			if err != nil {
				t.Fatal(err)
			}
			if body := page(resp); !strings.Contains(body, "Test Agent") {
				t.Fatalf("connected apps page lacks the client: %.300s", body)
			}

			// Changing the password revokes the grant: the token stops working.
			if _, err := srv.Accounts().Credentials.ChangePassword(ctx, u.ID, password, "another correct horse battery"); err != nil {
				t.Fatal(err)
			}
			if code, _, _, _ := rpc(t, base, tok.AccessToken, "", initialize); code != http.StatusUnauthorized {
				t.Fatalf("token after a password change: %d, want 401", code)
			}
			// The password change revoked the grant, so the token matches no
			// grant any more: its refusal writes no row.
			if n := mcpRows(); n != before {
				t.Fatalf("a token of a revoked grant wrote %d audit rows", n-before)
			}
		})
	}
}

// rpcVia posts body to /mcp with a bearer token, as if through a reverse
// proxy that forwarded the request of client, and returns the status.
func rpcVia(t *testing.T, base, token, client, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-Forwarded-For", client)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
