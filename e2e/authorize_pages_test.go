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
	"net/url"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/web"
)

// consentEnv is a complete server for the authorization-page tests, with
// one verified account.
type consentEnv struct {
	srv      *enclave.Server
	base     string
	user     accounts.User
	email    string
	password string
}

func newConsentEnv(t *testing.T, d storage.Dialect, edits ...func(*enclave.Config)) *consentEnv {
	t.Helper()
	ctx := context.Background()
	schemes := func(c *enclave.Config) { c.OAuth = oauth.Options{PrivateURISchemes: []string{"cursor", "vscode"}} }
	srv, base := serveHTTP(t, d, append([]func(*enclave.Config){schemes}, edits...)...)
	e := &consentEnv{srv: srv, base: base, email: "browser-user@example.com", password: "correct horse battery staple"}
	var err error
	e.user, _, err = srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: e.email, Username: "browseruser", Password: e.password, Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// register registers a public client (RFC 7591) with one redirect URI and
// returns its id.
func (e *consentEnv) register(t *testing.T, name, redirect string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"client_name": name, "redirect_uris": []string{redirect}, "token_endpoint_auth_method": "none"})
	resp, err := http.Post(e.base+"/oauth/register", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var client struct {
		ClientID string `json:"client_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&client)
	if resp.StatusCode != http.StatusCreated || client.ClientID == "" {
		t.Fatalf("register %s: %d", redirect, resp.StatusCode)
	}
	return client.ClientID
}

// authorization is one authorization request with PKCE.
type authorization struct {
	clientID, redirect, state, verifier string
}

func (e *consentEnv) newAuthorization(clientID, redirect, state string) authorization {
	return authorization{clientID: clientID, redirect: redirect, state: state,
		verifier: "verifier-" + state + "-0123456789-0123456789-0123456789"}
}

// url is the authorization endpoint URL of a.
func (e *consentEnv) url(a authorization) string {
	sum := sha256.Sum256([]byte(a.verifier))
	return e.base + "/oauth/authorize?" + url.Values{
		"response_type": {"code"}, "client_id": {a.clientID}, "redirect_uri": {a.redirect},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"state": {a.state}, "scope": {"mcp"}, "resource": {e.base + "/mcp"},
	}.Encode()
}

// exchange redeems code with a's PKCE verifier and returns the access token.
func (e *consentEnv) exchange(t *testing.T, a authorization, code string) string {
	t.Helper()
	resp, err := http.PostForm(e.base+"/oauth/token", url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {a.redirect},
		"client_id": {a.clientID}, "code_verifier": {a.verifier}, "resource": {e.base + "/mcp"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&tok)
	if resp.StatusCode != http.StatusOK || tok.AccessToken == "" {
		t.Fatalf("token exchange: %d %s", resp.StatusCode, tok.Error)
	}
	return tok.AccessToken
}

// whoami calls the whoami tool over MCP with token and returns the result.
func (e *consentEnv) whoami(t *testing.T, token string) string {
	t.Helper()
	session := enclavetest.Dial(t, e.base, token).SessionID()
	_, body, _, _ := rpc(t, e.base, token, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`)
	return body
}

// The sign-in and consent pages of an authorization request let their form
// submission be redirected to that request's validated redirect URI, and
// no further: form-action gains exactly one source derived from it, every
// other directive and every other page keep the strict policy.
func TestAuthorizePagesFormAction(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			e := newConsentEnv(t, d)
			widened := func(src string) string {
				return strings.Replace(web.ContentSecurityPolicy, "form-action 'self';", "form-action 'self' "+src+";", 1)
			}
			tests := []struct {
				registered, requested, source string
			}{
				{"http://127.0.0.1:53682/callback", "http://127.0.0.1:53682/callback", "http://127.0.0.1:53682"},
				{"http://127.0.0.1/callback", "http://127.0.0.1:40001/callback", "http://127.0.0.1:40001"},
				{"http://localhost/cb", "http://localhost:40002/cb", "http://localhost:40002"},
				{"http://[::1]/cb", "http://[::1]:40003/cb", "http://*:40003"},
				{"https://client.example/oauth/callback", "https://client.example/oauth/callback", "https://client.example"},
				{"https://client.example:8443/cb", "https://client.example:8443/cb", "https://client.example:8443"},
				{"cursor://anysphere.cursor-retrieval/oauth/callback", "cursor://anysphere.cursor-retrieval/oauth/callback", "cursor:"},
				{"vscode://vscode.github-authentication/did-authenticate", "vscode://vscode.github-authentication/did-authenticate", "vscode:"},
			}
			for i, tt := range tests {
				t.Run(tt.requested, func(t *testing.T) {
					id := e.register(t, "Agent "+tt.requested, tt.registered)
					jar, _ := cookiejar.New(nil)
					browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
					a := e.newAuthorization(id, tt.requested, "state-headers-"+string(rune('a'+i)))

					resp, err := browser.Get(e.url(a))
					if err != nil {
						t.Fatal(err)
					}
					body := readBody(resp)
					if resp.StatusCode != http.StatusOK || !strings.Contains(body, `name="password"`) {
						t.Fatalf("authorize: %d, want the sign-in page", resp.StatusCode)
					}
					if got := resp.Header.Get("Content-Security-Policy"); got != widened(tt.source) {
						t.Errorf("sign-in page CSP:\n got %s\nwant %s", got, widened(tt.source))
					}
					action := formAction.FindStringSubmatch(body)
					if action == nil {
						t.Fatal("no form on the sign-in page")
					}
					// A wrong password shows the form again, with the same policy
					// (once: sign-in attempts share a rate limit).
					if i == 0 {
						resp, err = browser.PostForm(e.base+html.UnescapeString(action[1]), url.Values{"email": {e.email}, "password": {"not the password"}})
						if err != nil {
							t.Fatal(err)
						}
						readBody(resp)
						if got := resp.Header.Get("Content-Security-Policy"); resp.StatusCode == http.StatusOK || got != widened(tt.source) {
							t.Errorf("sign-in page after a wrong password: %d, CSP %s", resp.StatusCode, got)
						}
					}
					resp, err = browser.PostForm(e.base+html.UnescapeString(action[1]), url.Values{"email": {e.email}, "password": {e.password}})
					if err != nil {
						t.Fatal(err)
					}
					body = readBody(resp)
					if resp.StatusCode != http.StatusOK || !strings.Contains(body, `value="approve"`) {
						t.Fatalf("sign-in: %d, want the consent page", resp.StatusCode)
					}
					if got := resp.Header.Get("Content-Security-Policy"); got != widened(tt.source) {
						t.Errorf("consent page CSP:\n got %s\nwant %s", got, widened(tt.source))
					}
					if resp.Header.Get("X-Frame-Options") != "DENY" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
						t.Error("the consent page can be framed")
					}
					// Every other page keeps the strict policy, in the same session.
					for _, path := range []string{"/account", "/account/apps"} {
						resp, err := browser.Get(e.base + path + "?redirect_uri=" + url.QueryEscape(tt.requested))
						if err != nil {
							t.Fatal(err)
						}
						readBody(resp)
						if got := resp.Header.Get("Content-Security-Policy"); resp.StatusCode != http.StatusOK || got != web.ContentSecurityPolicy {
							t.Errorf("%s: %d, CSP %s", path, resp.StatusCode, got)
						}
					}
				})
			}
		})
	}
}

func readBody(resp *http.Response) string {
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	resp.Body.Close()
	return b.String()
}
