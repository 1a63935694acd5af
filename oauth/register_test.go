package oauth_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func manyRedirects(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("https://a.example/cb%d", i)
	}
	return out
}

func TestRegister(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		tests := []struct {
			name      string
			md        map[string]any
			wantError string // empty: 201
		}{
			{"https", map[string]any{"redirect_uris": []string{"https://agent.example/cb"}, "token_endpoint_auth_method": "none"}, ""},
			{"loopback v4 any port", map[string]any{"redirect_uris": []string{"http://127.0.0.1:53682/cb"}, "token_endpoint_auth_method": "none"}, ""},
			{"loopback v6", map[string]any{"redirect_uris": []string{"http://[::1]:8080/cb"}, "token_endpoint_auth_method": "none"}, ""},
			{"localhost", map[string]any{"redirect_uris": []string{"http://localhost:3000/cb"}, "token_endpoint_auth_method": "none"}, ""},
			{"allowed private scheme", map[string]any{"redirect_uris": []string{"cursor://anysphere.cursor-retrieval/oauth/callback"}, "token_endpoint_auth_method": "none"}, ""},
			{"confidential", map[string]any{"redirect_uris": []string{"https://agent.example/cb"}, "token_endpoint_auth_method": "client_secret_basic"}, ""},
			{"http elsewhere", map[string]any{"redirect_uris": []string{"http://agent.example/cb"}}, "invalid_redirect_uri"},
			{"other private scheme", map[string]any{"redirect_uris": []string{"evil://cb"}}, "invalid_redirect_uri"},
			{"javascript", map[string]any{"redirect_uris": []string{"javascript:alert(1)"}}, "invalid_redirect_uri"},
			{"fragment", map[string]any{"redirect_uris": []string{"https://agent.example/cb#x"}}, "invalid_redirect_uri"},
			{"relative", map[string]any{"redirect_uris": []string{"/cb"}}, "invalid_redirect_uri"},
			{"no redirect", map[string]any{"client_name": "x"}, "invalid_redirect_uri"},
			{"implicit grant", map[string]any{"redirect_uris": []string{"https://a.example/cb"}, "grant_types": []string{"implicit"}}, "invalid_client_metadata"},
			{"client credentials", map[string]any{"redirect_uris": []string{"https://a.example/cb"}, "grant_types": []string{"client_credentials"}}, "invalid_client_metadata"},
			{"token response", map[string]any{"redirect_uris": []string{"https://a.example/cb"}, "response_types": []string{"token"}}, "invalid_client_metadata"},
			{"jwt auth", map[string]any{"redirect_uris": []string{"https://a.example/cb"}, "token_endpoint_auth_method": "private_key_jwt"}, "invalid_client_metadata"},
			{"unknown scope", map[string]any{"redirect_uris": []string{"https://a.example/cb"}, "scope": "mcp nonesuch"}, "invalid_client_metadata"},
			{"javascript client_uri", map[string]any{"redirect_uris": []string{"https://a.example/cb"}, "client_uri": "javascript:alert(1)"}, "invalid_client_metadata"},
			{"long name", map[string]any{"redirect_uris": []string{"https://a.example/cb"}, "client_name": strings.Repeat("x", 300)}, "invalid_client_metadata"},
			{"too many redirects", map[string]any{"redirect_uris": manyRedirects(11)}, "invalid_redirect_uri"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				code, out := e.register(tt.md)
				if tt.wantError != "" {
					if code != http.StatusBadRequest || out["error"] != tt.wantError {
						t.Fatalf("got %d %v, want 400 %s", code, out, tt.wantError)
					}
					return
				}
				if code != http.StatusCreated || out["client_id"] == "" {
					t.Fatalf("got %d %v", code, out)
				}
				_, hasSecret := out["client_secret"]
				if confidential := tt.md["token_endpoint_auth_method"] != "none"; hasSecret != confidential {
					t.Errorf("client_secret present %v, confidential %v", hasSecret, confidential)
				}
			})
		}
		t.Run("identical public registration returns the same client", func(t *testing.T) {
			md := map[string]any{"redirect_uris": []string{"http://127.0.0.1:7777/cb"}, "token_endpoint_auth_method": "none", "client_name": "Same"}
			_, a := e.register(md)
			_, b := e.register(md)
			if a["client_id"] != b["client_id"] {
				t.Errorf("re-registration got a new client: %v %v", a["client_id"], b["client_id"])
			}
			md["client_name"] = "Different"
			if _, c := e.register(md); c["client_id"] == a["client_id"] {
				t.Error("different metadata got the same client")
			}
			e.clock.Advance(11 * 60e9)
			defer e.clock.Advance(-11 * 60e9)
			md["client_name"] = "Same"
			if _, d := e.register(md); d["client_id"] == a["client_id"] {
				t.Error("registration after the window got the old client")
			}
		})
		t.Run("confidential clients authenticate", func(t *testing.T) {
			_, out := e.register(map[string]any{"redirect_uris": []string{"https://agent.example/cb"}, "token_endpoint_auth_method": "client_secret_post"})
			id, secret := out["client_id"].(string), out["client_secret"].(string)
			got := e.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {id}, "client_secret": {"wrong"}})
			if got.Status != http.StatusUnauthorized || got.Error != "invalid_client" {
				t.Fatalf("wrong secret: %+v", got)
			}
			got = e.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {id}, "client_secret": {secret}})
			if got.Error != "invalid_grant" {
				t.Fatalf("right secret, bogus token: %+v", got)
			}
		})
	})
}
