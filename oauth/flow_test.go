package oauth_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestMetadata(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, func(o *oauth.Options) { o.Scopes = []string{"notes"} })
		var as map[string]any
		resp := e.do(http.MethodGet, e.ts.URL+"/.well-known/oauth-authorization-server", nil)
		if err := json.NewDecoder(resp.Body).Decode(&as); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{
			"issuer":                                         e.ts.URL,
			"authorization_endpoint":                         e.ts.URL + "/oauth/authorize",
			"token_endpoint":                                 e.ts.URL + "/oauth/token",
			"registration_endpoint":                          e.ts.URL + "/oauth/register",
			"revocation_endpoint":                            e.ts.URL + "/oauth/revoke",
			"response_types_supported":                       []any{"code"},
			"grant_types_supported":                          []any{"authorization_code", "refresh_token"},
			"code_challenge_methods_supported":               []any{"S256"},
			"token_endpoint_auth_methods_supported":          []any{"none", "client_secret_basic", "client_secret_post", "private_key_jwt"},
			"client_id_metadata_document_supported":          true,
			"scopes_supported":                               []any{"mcp", "admin", "notes"},
			"authorization_response_iss_parameter_supported": true,
		}
		for k, v := range want {
			if got, _ := json.Marshal(as[k]); string(got) != mustJSON(v) {
				t.Errorf("%s = %s, want %s", k, got, mustJSON(v))
			}
		}
		for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
			var pr oauth.ResourceMetadata
			resp := e.do(http.MethodGet, e.ts.URL+path, nil)
			if err := json.NewDecoder(resp.Body).Decode(&pr); err != nil {
				t.Fatal(err)
			}
			if pr.Resource != e.ts.URL+"/mcp" || len(pr.AuthorizationServers) != 1 || pr.AuthorizationServers[0] != e.ts.URL ||
				mustJSON(pr.BearerMethodsSupported) != `["header"]` || mustJSON(pr.ScopesSupported) != `["mcp","admin","notes"]` {
				t.Errorf("%s: %+v", path, pr)
			}
		}
	})
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The whole authorization code flow with a real PKCE client, then the
// resource, a refresh and a revocation.
func TestAuthorizationCodeFlow(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf := e.publicClient()
		uid, email := e.createUser(userState{})

		u := e.authorize(conf, email, nil)
		q := u.Query()
		if q.Get("state") != testState || q.Get("iss") != e.ts.URL || q.Get("code") == "" {
			t.Fatalf("authorization response %s: want code, state and iss", u)
		}
		if e.login.last.ClientName == "" || e.login.last.RedirectHost != "127.0.0.1:9" || mustJSON(e.login.last.Scopes) != `["mcp"]` {
			t.Errorf("consent saw %+v", e.login.last)
		}
		verifier := verifierOf(conf)
		tok, err := conf.Exchange(context.Background(), q.Get("code"), oauth2.VerifierOption(verifier),
			oauth2.SetAuthURLParam("resource", e.srv.Resource()))
		if err != nil {
			t.Fatal(err)
		}
		if tok.RefreshToken == "" || tok.TokenType != "bearer" || tok.Expiry.IsZero() {
			t.Fatalf("token: %+v", tok)
		}
		if got := e.mcpStatus(tok.AccessToken); got != http.StatusOK {
			t.Fatalf("/mcp with the token: %d", got)
		}
		a, err := e.srv.VerifyAccessToken(context.Background(), tok.AccessToken)
		if err != nil {
			t.Fatal(err)
		}
		if a.UserID != uid || a.ClientID != conf.ClientID || mustJSON(a.Scopes) != `["mcp"]` || mustJSON(a.Audience) != mustJSON([]string{e.srv.Resource()}) {
			t.Errorf("access: %+v", a)
		}

		// A second authorization by the same user for the same scopes
		// skips the consent page.
		_, consentsBefore := e.login.pages()
		authURL := e.authURL(conf, nil)
		resp := e.do(http.MethodGet, authURL, nil, &http.Cookie{Name: "test_user", Value: itoa(uid)})
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("remembered consent: want a redirect, got %d", resp.StatusCode)
		}
		if _, c := e.login.pages(); c != consentsBefore {
			t.Errorf("consent page shown again")
		}

		// Refresh through the oauth2 package's token source.
		expired := *tok
		expired.Expiry = expired.Expiry.Add(-2 * oauth.DefaultAccessTokenLifetime)
		fresh, err := conf.TokenSource(context.Background(), &expired).Token()
		if err != nil {
			t.Fatal(err)
		}
		if fresh.AccessToken == tok.AccessToken || fresh.RefreshToken == tok.RefreshToken {
			t.Fatal("refresh did not rotate")
		}
		if got := e.mcpStatus(fresh.AccessToken); got != http.StatusOK {
			t.Fatalf("/mcp with the refreshed token: %d", got)
		}

		// Revoking the refresh token ends the grant.
		resp = e.do(http.MethodPost, e.ts.URL+"/oauth/revoke", url.Values{"token": {fresh.RefreshToken}, "client_id": {conf.ClientID}})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("revoke: %d", resp.StatusCode)
		}
		for _, at := range []string{tok.AccessToken, fresh.AccessToken} {
			if got := e.mcpStatus(at); got != http.StatusUnauthorized {
				t.Errorf("/mcp after revoke: %d", got)
			}
		}
		if got := e.refresh(conf, fresh.RefreshToken); got.Error != "invalid_grant" {
			t.Errorf("refresh after revoke: %+v", got)
		}
	})
}

func itoa(n int64) string { return json.Number(mustJSON(n)).String() }
