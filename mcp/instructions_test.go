package mcp

import (
	"net/http"
	"strings"
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

// DefaultInstructions names the site and a domain's capability only when
// the registry holds it.
func TestDefaultInstructionsNameOnlyWhatIsOn(t *testing.T) {
	none := DefaultInstructions("Acme", func(string) bool { return false })
	if !strings.HasPrefix(none, "Acme ") || !strings.Contains(none, "capabilitiesSearch") {
		t.Fatalf("instructions without domains: %q", none)
	}
	for _, name := range []string{"execute", "memorySave", "httpRequest"} {
		if strings.Contains(none, name) {
			t.Errorf("%s named while off: %q", name, none)
		}
		on := DefaultInstructions("Acme", func(n string) bool { return n == name })
		if !strings.Contains(on, name) {
			t.Errorf("%s not named while on: %q", name, on)
		}
	}
}
