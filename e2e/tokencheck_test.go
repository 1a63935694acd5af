package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/storage"
)

// An embedder's verifier that refuses a recognised token with an error of
// its own (not wrapping mcp.ErrInvalidToken) still refuses it: 401 and an
// audit row, as Config.TokenVerifier documents. Only an error wrapping
// mcp.ErrTokenUnavailable is an outage (503, nothing audited): "any other
// error" must not turn refusals into endless retries that the audit log
// never sees.
func TestVerifierErrorsAreRefusalsUnlessMarkedUnavailable(t *testing.T) {
	ctx := context.Background()
	verifier := mcp.TokenVerifierFunc(func(_ context.Context, token string) (mcp.TokenInfo, error) {
		if sid, ok := strings.CutPrefix(token, "revoked:"); ok {
			return mcp.TokenInfo{UserID: sid}, errors.New("token revoked at the issuer")
		}
		if sid, ok := strings.CutPrefix(token, "outage:"); ok {
			return mcp.TokenInfo{UserID: sid}, fmt.Errorf("%w: issuer unreachable", mcp.ErrTokenUnavailable)
		}
		return mcp.TokenInfo{}, mcp.ErrInvalidToken
	})
	srv, base := serveHTTP(t, storage.SQLite, func(c *enclave.Config) { c.TokenVerifier = verifier })
	u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: "alice@example.com", Username: "alice", Password: "a long password for alice"})
	if err != nil {
		t.Fatal(err)
	}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	audited := func() int {
		t.Helper()
		events, err := srv.Audit().Query(ctx, audit.Filter{Category: audit.CategoryMCP}, storage.PageRequest{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range events.Items {
			if e.Result == audit.ResultDenied && e.UserHash == srv.Audit().HashUser(u.StableID) {
				n++
			}
		}
		return n
	}

	code, _, _, h := rpc(t, base, "revoked:"+u.StableID, "", initialize)
	if code != http.StatusUnauthorized || h.Get("Retry-After") != "" {
		t.Fatalf("token the verifier refused with its own error: %d Retry-After %q", code, h.Get("Retry-After"))
	}
	if n := audited(); n != 1 {
		t.Fatalf("refusals audited: %d, want 1", n)
	}
	code, _, _, h = rpc(t, base, "outage:"+u.StableID, "", initialize)
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Fatalf("token the verifier could not check: %d Retry-After %q", code, h.Get("Retry-After"))
	}
	if n := audited(); n != 1 {
		t.Fatalf("an outage was audited as a refusal: %d rows", n)
	}
}
