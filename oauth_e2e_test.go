package enclave_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
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
			sc := storagetest.Config(t, d)
			ts := httptest.NewUnstartedServer(nil)
			base := "http://" + ts.Listener.Addr().String()
			srv, err := enclave.New(ctx, enclave.Config{DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL, BaseURL: base, Logger: quiet(),
				Accounts: accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			ts.Config.Handler = srv.Handler()
			ts.Start()
			defer ts.Close()

			const email, password = "agent-owner@example.com", "correct horse battery staple"
			u, _, err := srv.Accounts().CreateUser(ctx, accounts.CreateUserInput{Email: email, Username: "agentfriend", Password: password, Verified: true})
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
			code, _, session, _ := rpc(t, base, tok.AccessToken, "", initialize)
			if code != 200 || session == "" {
				t.Fatalf("initialize with the token: %d", code)
			}
			rpc(t, base, tok.AccessToken, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			_, body, _, _ = rpc(t, base, tok.AccessToken, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`)
			if !strings.Contains(body, u.StableID) {
				t.Fatalf("whoami with the token: %s", body)
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
			if _, err := srv.Accounts().ChangePassword(ctx, u.ID, password, "another correct horse battery"); err != nil {
				t.Fatal(err)
			}
			if code, _, _, _ := rpc(t, base, tok.AccessToken, "", initialize); code != http.StatusUnauthorized {
				t.Fatalf("token after a password change: %d, want 401", code)
			}
			// The refusal is audited with its reason: the password change revoked
			// the grant, so the token no longer exists.
			events, err := srv.Audit().Query(ctx, audit.Filter{Category: audit.CategoryMCP}, storage.PageRequest{})
			if err != nil || len(events.Items) != 1 || events.Items[0].Reason != "unknown_or_revoked" {
				t.Fatalf("audit of the refused token: %+v, %v", events.Items, err)
			}
		})
	}
}
