package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/storage"
)

// rpc posts one JSON-RPC request to /mcp and returns the response body
// (the single message of a JSON or SSE reply) and the session id.
func rpc(t *testing.T, url, token, session, body string) (int, string, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, string(readMessage(t, resp)), resp.Header.Get("Mcp-Session-Id"), resp.Header
}

// The assembled server serves MCP at /mcp: tokens checked by the
// configured verifier, callers loaded fresh from accounts, tools from the
// registry (built-ins included).
func TestMCPEndpoint(t *testing.T) {
	ctx := context.Background()
	var base string
	verifier := mcp.TokenVerifierFunc(func(_ context.Context, token string) (mcp.TokenInfo, error) {
		if sid, ok := strings.CutPrefix(token, "refused-token:"); ok {
			// Recognised but refused: the verifier names the user.
			return mcp.TokenInfo{UserID: sid}, mcp.ErrInvalidToken
		}
		sid, ok := strings.CutPrefix(token, "test-token:")
		if !ok {
			return mcp.TokenInfo{}, mcp.ErrInvalidToken
		}
		return mcp.TokenInfo{UserID: sid, Audience: []string{base + "/mcp"}}, nil
	})
	srv, base := serveHTTP(t, storage.SQLite, func(c *enclave.Config) {
		c.TokenVerifier, c.AllowedOrigins = verifier, []string{"https://app.example"}
	})

	u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: "alice@example.com", Username: "alice", Password: "a long password for alice"})
	if err != nil {
		t.Fatal(err)
	}

	code, _, _, h := rpc(t, base, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if code != http.StatusUnauthorized || !strings.Contains(h.Get("WWW-Authenticate"), `resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp"`) {
		t.Fatalf("no token: %d %q", code, h.Get("WWW-Authenticate"))
	}

	// A token the embedder's verifier matches to no one writes no audit
	// row; one it recognises and refuses is audited with the user's hash
	// and the hashed client address (never the token).
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for range 3 {
		if code, _, _, _ := rpc(t, base, "not-a-test-token", "", initialize); code != http.StatusUnauthorized {
			t.Fatalf("bad token: %d", code)
		}
	}
	events, err := srv.Audit().Query(ctx, audit.Filter{Category: audit.CategoryMCP}, storage.PageRequest{})
	if err != nil || len(events.Items) != 0 {
		t.Fatalf("audit after tokens matching no one: %+v %v", events.Items, err)
	}
	if code, _, _, _ := rpc(t, base, "refused-token:"+u.StableID, "", initialize); code != http.StatusUnauthorized {
		t.Fatalf("refused token: %d", code)
	}
	events, err = srv.Audit().Query(ctx, audit.Filter{Category: audit.CategoryMCP}, storage.PageRequest{})
	if err != nil || len(events.Items) != 1 || events.Items[0].Result != audit.ResultDenied ||
		events.Items[0].IPHash != srv.Audit().HashIP("127.0.0.1") || events.Items[0].UserHash != srv.Audit().HashUser(u.StableID) {
		t.Fatalf("audit after a refused token: %+v %v", events.Items, err)
	}

	token := "test-token:" + u.StableID
	// Browsers' cross-origin requests pass only from Config.AllowedOrigins.
	for origin, want := range map[string]int{"https://evil.example": http.StatusForbidden, "https://app.example": http.StatusOK, base: http.StatusOK} {
		req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("initialize from %s: %d, want %d", origin, resp.StatusCode, want)
		}
	}
	session := enclavetest.Dial(t, base, token).SessionID()
	_, body, _, _ := rpc(t, base, token, session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	for _, want := range []string{"whoami", "secretSet", "accountExportManifest"} {
		if !strings.Contains(body, `"`+want+`"`) {
			t.Errorf("tools/list lacks %s", want)
		}
	}
	if strings.Contains(body, "adminAuditLogQuery") {
		t.Error("a user sees the admin capability")
	}
	_, body, _, _ = rpc(t, base, token, session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`)
	var res struct {
		Result struct {
			Structured map[string]any `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.NewDecoder(bytes.NewReader([]byte(body))).Decode(&res); err != nil || res.Result.Structured == nil {
		t.Fatalf("whoami: %s", body)
	}
	if !strings.Contains(body, u.StableID) || !strings.Contains(body, "alice") {
		t.Fatalf("whoami does not name alice: %s", body)
	}
}
