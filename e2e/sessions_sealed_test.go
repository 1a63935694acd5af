package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
)

// TestSessionEventsSealedAtRest: on PostgreSQL the assembled server records
// the SSE events of shared sessions for resumption; a tool result streamed
// after a progress notification (it may hold a credential shown once) is
// not kept in the clear.
func TestSessionEventsSealedAtRest(t *testing.T) {
	ctx := context.Background()
	// Shared sessions need PostgreSQL: skipped without it.
	var base string
	srv, base := serveHTTP(t, storage.Postgres, func(c *enclave.Config) { c.TokenVerifier = testVerifier(&base) })
	const secret = "sk-live-sealed-4242"
	if err := srv.Registry().Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "mintKey", Domain: "test", Description: "Reports progress, then shows a key once.",
		Annotations: &capabilities.Annotations{ReadOnly: true},
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			if err := call.Progress(ctx, 1, 2, "minting"); err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult("your key: " + secret), nil
		},
	})); err != nil {
		t.Fatal(err)
	}
	u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: "alice@example.com", Username: "alice", Password: "a long password for alice"})
	if err != nil {
		t.Fatal(err)
	}
	token := "test-token:" + u.StableID
	post := func(sid, body string) (*http.Response, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	sid := enclavetest.Dial(t, base, token, enclavetest.WithProtocolVersion("2025-11-25")).SessionID()
	resp, body := post(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"mintKey","arguments":{},"_meta":{"progressToken":"p1"}}}`)
	if !strings.Contains(body, secret) || !strings.Contains(body, "id: ") {
		t.Fatalf("tools/call: %d %s (want the key on an SSE stream with event ids)", resp.StatusCode, body)
	}
	var msgs []string
	if err := srv.Store().DB.NewRaw("SELECT message FROM mcp_session_events").Scan(ctx, &msgs); err != nil {
		t.Fatal(err)
	}
	if len(msgs) < 2 {
		t.Fatalf("%d events recorded; want the progress notice and the result", len(msgs))
	}
	for _, m := range msgs {
		if strings.Contains(m, secret) || strings.Contains(m, "minting") {
			t.Fatalf("an SSE event kept in the clear: %s", m)
		}
	}
}
