package codemode_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// TestReviewInputSchemaRefVariantsCrashTheProcess: the same crash as
// TestReviewInputSchemaRefCrashesTheProcess, through spellings of the
// keyword that a check of the exact key "$ref" does not see but that
// encoding/json (case-insensitive field matching, which jsonschema-go's
// Schema decoding uses) reads as $ref all the same: "$REF", and "$Ref"
// inside allOf. Each variant runs in a child process; the test fails when
// one of them dies.
func TestReviewInputSchemaRefVariantsCrashTheProcess(t *testing.T) {
	variants := map[string]map[string]any{
		"upper":       {"type": "object", "$REF": "#"},
		"nested-case": {"type": "object", "allOf": []any{map[string]any{"$Ref": "#"}}},
	}
	if v := os.Getenv(reviewChildEnv); strings.HasPrefix(v, t.Name()+"/") {
		schema := variants[strings.TrimPrefix(v, t.Name()+"/")]
		s := enclavetest.Start(t, enclavetest.Options{})
		a := s.CreateUser(t, "mallory").MCP(t)
		res, err := a.Call("packageSave", map[string]any{
			"name":  "loop",
			"files": map[string]string{"main.js": `export async function f() { return 1 }`},
			"manifest": map[string]any{"exports": map[string]any{"f": map[string]any{
				"description": "d", "inputSchema": schema}}},
		})
		if err != nil || res.IsError {
			t.Logf("the schema was refused at save: %v %s", err, res.Text)
			return
		}
		_, _ = a.Call(codemode.ExportCapabilityName("loop", "f"), map[string]any{})
		return
	}
	for name := range variants {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestReviewInputSchemaRefVariantsCrashTheProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), reviewChildEnv+"=TestReviewInputSchemaRefVariantsCrashTheProcess/"+name)
			out, err := cmd.CombinedOutput()
			if err != nil {
				text := string(out)
				if i := strings.Index(text, "fatal error"); i >= 0 {
					text = text[i:min(len(text), i+200)]
				} else if len(text) > 1500 {
					text = text[len(text)-1500:]
				}
				t.Fatalf("an export with inputSchema %s killed the server process (%v):\n%s", mustJSON(variants[name]), err, text)
			}
		})
	}
}
