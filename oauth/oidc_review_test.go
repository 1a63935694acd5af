package oauth_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The nonce is kept with the authorization code and copied into the ID
// token: a client may not make every code row and ID token tens of
// kilobytes with it. A nonce of a sensible length still works.
func TestOpenIDNonceIsBounded(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf := e.publicClient()
		conf.Scopes = []string{"openid"}
		resp := e.do(http.MethodGet, e.authURL(conf, url.Values{"nonce": {strings.Repeat("n", 32<<10)}}), nil)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
			t.Errorf("a 32 KiB nonce: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
		_, email := e.createUser(userState{})
		out := e.oidcSignIn(conf, email, strings.Repeat("n", 255))
		if out["status"] != float64(200) || out["id_token"] == nil {
			t.Errorf("a 255-character nonce: %v", out)
		}
	})
}
