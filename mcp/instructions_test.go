package mcp

import (
	"net/http"
	"testing"
)

// Options.Instructions reaches the client in the initialize result; none
// set, the result carries none.
func TestInstructionsAtInitialize(t *testing.T) {
	initialize := func(f *fixture) map[string]any {
		t.Helper()
		resp := f.request(http.MethodPost, "alice-token", "", rpc(1, "initialize", map[string]any{
			"protocolVersion": testProtocol, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"},
		}))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("initialize: %s: %s", resp.Status, readAll(resp))
		}
		res, _ := result(t, resp)["result"].(map[string]any)
		return res
	}
	const text = "Find tools with capabilitiesSearch."
	if got := initialize(newFixture(t, func(o *Options) { o.Instructions = text }))["instructions"]; got != text {
		t.Fatalf("instructions = %v, want %q", got, text)
	}
	if got, ok := initialize(newFixture(t))["instructions"]; ok {
		t.Fatalf("instructions = %v without Options.Instructions", got)
	}
}
