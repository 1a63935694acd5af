package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The sign-in page of the OAuth authorization endpoint reads its form
// outside web's parseForm: a NUL byte or invalid UTF-8 in a field is
// refused there too (400), on both databases, instead of a failed lookup
// (500 on PostgreSQL).
func TestOAuthSignInRefusesNULAndInvalidUTF8(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			sc := storagetest.Config(t, d)
			l := startLive(t, enclave.Config{DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL})
			srv, base := l.srv, l.base
			const email, password = "nul-owner@example.com", "correct horse battery staple"
			if _, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: email, Username: "nulowner", Password: password, Verified: true}); err != nil {
				t.Fatal(err)
			}
			redirect := "http://127.0.0.1:53682/callback"
			resp, err := http.Post(base+"/oauth/register", "application/json",
				strings.NewReader(`{"client_name":"NUL Agent","redirect_uris":["`+redirect+`"],"token_endpoint_auth_method":"none"}`))
			if err != nil {
				t.Fatal(err)
			}
			var client struct {
				ClientID string `json:"client_id"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&client)
			resp.Body.Close()
			sum := sha256.Sum256([]byte("a-verifier-of-at-least-forty-three-characters-0123456789"))
			q := url.Values{
				"response_type": {"code"}, "client_id": {client.ClientID}, "redirect_uri": {redirect},
				"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
				"state": {"state-0123456789"}, "scope": {"mcp"}, "resource": {base + "/mcp"},
			}
			noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err = noRedirect.Get(base + "/oauth/authorize?" + q.Encode())
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			m := formAction.FindStringSubmatch(string(b))
			if resp.StatusCode != http.StatusOK || m == nil {
				t.Fatalf("authorize: %d", resp.StatusCode)
			}
			action := base + html.UnescapeString(m[1])
			for _, form := range []url.Values{
				{"email": {"nul-owner\x00@example.com"}, "password": {password}},
				{"email": {"nul-owner@example.com\xff"}, "password": {password}},
				{"email": {email}, "password": {"pass\x00word"}},
				{"email": {email}, "password": {password}, "remember": {"\x00"}},
			} {
				resp, err := noRedirect.PostForm(action, form)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("sign-in form %q: %d, want 400: %.200s", form, resp.StatusCode, b)
				}
			}
		})
	}
}
