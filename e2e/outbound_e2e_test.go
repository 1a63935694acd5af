package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// Over MCP, with a real token: agents see httpRequest but not the
// policy capability, cannot approve hosts, and the server's gateway
// refuses a loopback destination even for an approved secret (no
// test-only option is reachable from Config). Config.Outbound's daily
// limit applies.
func TestOutboundOverMCP(t *testing.T) {
	var hits atomic.Int32
	target := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer target.Close()
	enclavetest.Each(t, enclavetest.Options{Config: enclave.Config{Outbound: outbound.Limits{DailyRequests: 2}}}, func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		alice := s.CreateUser(t, "alice")
		if _, _, err := s.Secrets().Put(ctx, alice.Owner(), "api", "", []byte("sk-e2e-value"), &secrets.Policy{AllowedHosts: []string{strings.TrimPrefix(target.URL, "https://")}}); err != nil {
			t.Fatal(err)
		}
		c := alice.MCP(t)
		tools, err := c.Tools()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(tools, "httpRequest") || slices.Contains(tools, "secretPolicySet") {
			t.Fatalf("tools: %v", tools)
		}
		r, err := c.Call("secretSet", map[string]any{"name": "api", "value": "x", "allowedHosts": []string{"evil.example"}})
		if err != nil || !r.IsError || !strings.Contains(r.Text, `unknown argument "allowedHosts"`) {
			t.Fatalf("agent approves a host: %+v %v", r, err)
		}
		args := map[string]any{"url": target.URL, "headers": map[string]string{"X-Key": "{{secret:api}}"}}
		r, err = c.Call("httpRequest", args)
		if err != nil || !r.IsError || !strings.Contains(r.Text, "not on the public internet") || strings.Contains(r.Text, "sk-e2e") {
			t.Fatalf("loopback request: %+v %v", r, err)
		}
		if r, err = c.Call("httpRequest", map[string]any{"url": target.URL}); err != nil || !r.IsError {
			t.Fatalf("second request: %+v %v", r, err)
		}
		// Over the quota: a JSON-RPC error (the transport's mapping of
		// quota_exceeded), sent before any connection.
		if _, err = c.Call("httpRequest", args); err == nil || !strings.Contains(err.Error(), "Daily limit of 2 outbound requests") {
			t.Fatalf("third request of the day: %v", err)
		}
		if hits.Load() != 0 {
			t.Fatal("the loopback server was reached")
		}
		if s.Outbound() == nil {
			t.Fatal("no Go API")
		}
	})
}
