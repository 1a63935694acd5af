package oauth_test

import (
	"net/http"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// RFC 8252 §7.3: a native client that registered a loopback redirect URI
// may use any port at authorization time (it listens on whatever port is
// free), on 127.0.0.1, [::1] and localhost alike; the path and query must
// still match, and every other redirect URI matches only exactly.
func TestLoopbackRedirectAnyPort(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		client := func(redirects ...string) *oauth2.Config {
			t.Helper()
			code, out := e.register(map[string]any{"redirect_uris": redirects, "token_endpoint_auth_method": "none", "client_name": "Native app"})
			if code != http.StatusCreated {
				t.Fatalf("register %v: %d %v", redirects, code, out)
			}
			return &oauth2.Config{
				ClientID: out["client_id"].(string), Scopes: []string{"mcp"},
				Endpoint: oauth2.Endpoint{AuthURL: e.ts.URL + "/oauth/authorize", TokenURL: e.ts.URL + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams},
			}
		}
		accepted := []struct{ registered, requested string }{
			{"http://127.0.0.1:9/callback", "http://127.0.0.1:50123/callback"},
			{"http://127.0.0.1/callback", "http://127.0.0.1:50124/callback"},
			{"http://localhost/callback", "http://localhost:50125/callback"},
			{"http://localhost:1234/cb?app=x", "http://localhost:50126/cb?app=x"},
			{"http://[::1]:7/callback", "http://[::1]:50127/callback"},
			{"http://[::1]/", "http://[::1]:50128/"},
		}
		for _, tt := range accepted {
			t.Run("accept "+tt.requested, func(t *testing.T) {
				conf := client(tt.registered)
				conf.RedirectURL = tt.requested
				_, email := e.createUser(userState{})
				loc := e.authorize(conf, email, nil)
				if !strings.HasPrefix(loc.String(), tt.requested) || loc.Query().Get("code") == "" {
					t.Fatalf("redirect %s, want a code at %s", loc, tt.requested)
				}
				// The code is bound to the URI used, port included.
				reg := *conf
				reg.RedirectURL = tt.registered
				if tok := e.exchange(&reg, loc.Query().Get("code"), nil); tok.Status != http.StatusBadRequest || tok.Error != "invalid_grant" {
					t.Fatalf("exchange with the registered URI: %d %s", tok.Status, tok.Error)
				}
				loc = e.authorize(conf, email, nil)
				if tok := e.exchange(conf, loc.Query().Get("code"), nil); tok.Status != http.StatusOK || tok.AccessToken == "" {
					t.Fatalf("exchange: %d %s %s", tok.Status, tok.Error, tok.Description)
				}
			})
		}
		refused := []struct{ registered, requested string }{
			{"http://127.0.0.1:9/callback", "http://127.0.0.1:50123/other"},
			{"http://127.0.0.1:9/callback", "http://127.0.0.1:50123/callback?x=1"},
			{"http://127.0.0.1:9/callback", "http://127.0.0.2:9/callback"},
			{"http://127.0.0.1:9/callback", "http://localhost:9/callback"},
			{"http://localhost/callback", "http://127.0.0.1:50123/callback"},
			{"http://localhost/callback", "http://LOCALHOST.:50123/callback"},
			{"http://[::1]/callback", "http://[::1]:50123/callback/"},
			// fosite's own loopback rule ignores the registered scheme.
			{"https://127.0.0.1/callback", "http://127.0.0.1:50123/callback"},
			{"https://127.0.0.1:8443/callback", "https://127.0.0.1:8444/callback"},
			{"https://client.example/cb", "https://client.example:444/cb"},
			{"cursor://client/cb", "cursor://client:5/cb"},
			// Nothing beyond loopback passes for it.
			{"http://127.0.0.1:9/callback", "http://127.0.0.1.evil.example:9/callback"},
			{"http://localhost:9/callback", "http://localhost.evil:9/callback"},
			{"http://127.0.0.1:9/callback", "http://127.0.0.1:9@evil.example/callback"},
			{"http://127.0.0.1:9/callback", "http://user@127.0.0.1:9/callback"},
			{"http://127.0.0.1:9/callback", "http://[::ffff:127.0.0.1]:9/callback"},
			{"http://127.0.0.1:9/callback", "http://127.1:9/callback"},
			{"http://127.0.0.1:9/callback", "http://0x7f.0.0.1:9/callback"},
			{"http://127.0.0.1:9/callback", "http://evil.example#@127.0.0.1:9/callback"},
			{"http://127.0.0.1:9/callback", "http://127.0.0.1:9/callback#x"},
			{"http://127.0.0.1:9/callback", "http://127.0.0.1:9/%63allback"},
			{"http://127.0.0.1:9/callback", "http://127.0.0.1:9//evil.example/callback"},
			{"http://127.0.0.1:9/callback", "https://127.0.0.1:9/callback"},
			{"http://127.0.0.1:9/callback", "ws://127.0.0.1:9/callback"},
			{"http://[::1]:9/callback", "http://[::1%25eth0]:9/callback"},
		}
		for _, tt := range refused {
			t.Run("refuse "+tt.requested, func(t *testing.T) {
				conf := client(tt.registered)
				conf.RedirectURL = tt.requested
				logins, _ := e.login.pages()
				resp := e.do(http.MethodGet, e.authURL(conf, nil), nil)
				if l, _ := e.login.pages(); l != logins {
					t.Fatal("the login page was shown")
				}
				if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" || !strings.Contains(readAll(resp), pageSentences[oauth.ErrorRedirectURI]) {
					t.Fatalf("status %d location %q, want 400 and the page about the redirect URI", resp.StatusCode, resp.Header.Get("Location"))
				}
			})
		}
		// The consent page names the URI actually used.
		conf := client("http://localhost/callback")
		conf.RedirectURL = "http://localhost:50200/callback"
		if resp := e.do(http.MethodGet, e.authURL(conf, nil), nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("authorize: %d", resp.StatusCode)
		}
		e.login.mu.Lock()
		last := e.login.last
		e.login.mu.Unlock()
		if last.RedirectURI != conf.RedirectURL {
			t.Fatalf("AuthorizeRequest.RedirectURI = %q, want %q", last.RedirectURI, conf.RedirectURL)
		}
	})
}
