package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
)

// hiddenHeaderTool is an admin-only capability whose input schema mirrors
// a parameter in a header (x-mcp-header).
const hiddenHeaderTool = "adminRegion"

func hiddenHeaderCap(t testing.TB, reg *capabilities.Registry) {
	t.Helper()
	must(t, reg.Register(capabilities.Capability{Name: hiddenHeaderTool, Domain: "test", Description: "Admins only, region in a header.",
		Annotations: readOnly, Requires: capabilities.Requirement{Role: capabilities.RoleAdmin},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`),
		Handler: func(context.Context, *capabilities.Call, json.RawMessage) (capabilities.Result, error) {
			return capabilities.TextResult("ran"), nil
		}}))
}

// A 2026-07-28 tools/call of a hidden tool whose schema mirrors a
// parameter in a header, sent without (or with a wrong) header, is
// answered exactly like the same call of an unknown tool, with the same
// denials audited: the header check (headerRefusal) must not run for a
// tool the caller cannot see, or its "header mismatch" tells the tool
// exists.
func TestHiddenHeaderToolAnsweredLikeUnknown(t *testing.T) {
	fx := taskFixture(t)
	hiddenHeaderCap(t, fx.reg)
	lw := &lateWriter{}
	for _, region := range []string{"", "us"} {
		send := func(tool string) wireAnswer {
			body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool + `","arguments":{"region":"eu"},` +
				`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
			h := map[string]string{"Authorization": "Bearer alice-token", "Content-Type": "application/json",
				versionHeader: "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool}
			if region != "" {
				h["Mcp-Param-Region"] = region
			}
			return fuzzServe(t, fx, lw, h, body)
		}
		a, twin := send(hiddenHeaderTool), send(unknownTwin)
		got, want := a.seen(false), strings.ReplaceAll(twin.seen(false), unknownTwin, hiddenHeaderTool)
		if got != want {
			t.Fatalf("Region header %q: a hidden header tool is answered unlike an unknown one:\nhidden  %s\nunknown %s", region, got, want)
		}
		if len(a.denials) != 1 || len(twin.denials) != 1 {
			t.Fatalf("Region header %q: %d denials audited for the hidden tool, %d for an unknown one, want 1 each", region, len(a.denials), len(twin.denials))
		}
	}
}
