package mcp

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

// TestToolHeadersMatch: the direct path's check of the standard headers
// of a tools/call decides as mcp-go's ValidateStandardHeaders does.
func TestToolHeadersMatch(t *testing.T) {
	names := []string{"echo", "", "é日本", "a b", "<&>", `q"\`, "=?base64?ZWNobw==?=", "line\u2028"}
	b64 := func(s string) string { return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(s)) + "?=" }
	agreed := map[bool]int{}
	for _, v := range []string{"2026-07-28", "2025-11-25", ""} {
		for _, method := range []string{"tools/call", "", "prompts/get", "Tools/Call"} {
			for _, name := range names {
				for _, header := range []string{name, "", "other", b64(name), b64("other"), "=?base64?!!!?=", "=?base64?ZWNobw==", name + " "} {
					get := func(key string) string {
						switch key {
						case mcpgo.HeaderMethod:
							return method
						case mcpgo.HeaderName:
							return header
						}
						return ""
					}
					params, err := json.Marshal(struct {
						Name string `json:"name"`
					}{name})
					if err != nil {
						t.Fatal(err)
					}
					want := mcpgo.ValidateStandardHeaders(get, v, mcpgo.MethodToolsCall, params) == nil
					if got := toolHeadersMatch(get, v, name); got != want {
						t.Fatalf("version %q, Mcp-Method %q, name %q, Mcp-Name %q: %v, mcp-go %v", v, method, name, header, got, want)
					}
					agreed[want]++
				}
			}
		}
	}
	if agreed[true] < 50 || agreed[false] < 50 {
		t.Errorf("one-sided cases: %v", agreed)
	}
}
