package oauth_test

import (
	"net/http"
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
