package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// A token that cannot be checked (the verifier's store is down) is not an
// invalid token: the answer is 503 with Retry-After, so that the client
// keeps its token and retries, instead of a 401 that sends it back through
// authorization. A refused token still gets the 401 challenge.
func TestTokenCheckOutageIs503(t *testing.T) {
	var down atomic.Bool
	f := newFixture(t, func(o *Options) {
		next := o.Verifier
		o.Verifier = TokenVerifierFunc(func(ctx context.Context, token string) (TokenInfo, error) {
			if token == "odd-token" {
				// An error the verifier did not mark as an outage.
				return TokenInfo{}, errors.New("token signed with an unknown key")
			}
			if down.Load() {
				return TokenInfo{}, fmt.Errorf("%w: dial tcp 10.0.0.1:5432: connection refused", ErrTokenUnavailable)
			}
			return next.VerifyToken(ctx, token)
		})
	})
	sid := f.initialize("alice-token")
	down.Store(true)
	resp := f.request(http.MethodPost, "alice-token", sid, rpc(2, "tools/list", nil))
	body := readAll(resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || resp.Header.Get("WWW-Authenticate") != "" {
		t.Fatalf("token check during an outage: %d Retry-After %q WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("WWW-Authenticate"))
	}
	if strings.Contains(body, "10.0.0.1") || !strings.Contains(body, `"jsonrpc":"2.0"`) {
		t.Fatalf("outage answer: %s", body)
	}
	// Only an error marked as an outage is one: any other stays a refusal,
	// so that a verifier cannot turn a refused token into an endless retry.
	if resp := f.request(http.MethodPost, "odd-token", sid, rpc(5, "tools/list", nil)); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("unmarked verifier error: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	down.Store(false)
	if resp := f.request(http.MethodPost, "not-a-token", sid, rpc(3, "tools/list", nil)); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("refused token: %d", resp.StatusCode)
	}
	if resp := f.request(http.MethodPost, "alice-token", sid, rpc(4, "tools/list", nil)); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the outage: %d", resp.StatusCode)
	}
}
