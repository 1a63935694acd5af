package oauth_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// With the database unreachable, the token endpoint must not answer
// invalid_client (the client would register again) or invalid_grant (it
// would drop its refresh token): the client and the grant are fine, the
// server is not. The answer is 503 with Retry-After.
func TestTokenEndpointDuringOutage(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf, _, tok := e.signIn()
		// The outage: every pool is closed under the running server.
		if err := st.DB.Close(); err != nil {
			t.Fatal(err)
		}
		if st.Reader != st.DB {
			if err := st.Reader.Close(); err != nil {
				t.Fatal(err)
			}
		}
		resp := e.refresh(conf, tok.RefreshToken)
		if resp.Status != http.StatusServiceUnavailable || resp.Error == "invalid_client" || resp.Error == "invalid_grant" {
			t.Fatalf("refresh with the database down: %d %s %s", resp.Status, resp.Error, resp.Description)
		}
	})
}

// A client id no client can have (a NUL byte, invalid UTF-8) is an unknown
// client, on both databases: not a store failure (found by FuzzRevoke once
// store failures answered 503).
func TestUnstorableClientIDIsUnknown(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		for _, id := range []string{"\x00", "a\x00b", "\xff\xfe"} {
			resp := e.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {id}})
			if resp.Status != http.StatusUnauthorized || resp.Error != "invalid_client" {
				t.Errorf("token with client_id %q: %d %s", id, resp.Status, resp.Error)
			}
			if r := e.do(http.MethodPost, e.ts.URL+"/oauth/revoke", url.Values{"token": {"x"}, "client_id": {id}}); r.StatusCode >= 500 {
				t.Errorf("revoke with client_id %q: %d", id, r.StatusCode)
			}
		}
	})
}
