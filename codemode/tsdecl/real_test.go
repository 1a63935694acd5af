package tsdecl_test

import (
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/codemode/tsdecl"
	"github.com/enclave-mcp/enclave/features"
	"github.com/enclave-mcp/enclave/feedback"
)

// realFuncs returns the declarations of real capabilities, plus one
// defined here with the Go types the others do not use.
func realFuncs(t *testing.T) []tsdecl.Func {
	t.Helper()
	var caps []capabilities.Capability
	caps = append(caps, (&secrets.Service{}).Capabilities(nil)...)
	caps = append(caps, (&feedback.Service{}).Capabilities()...)
	caps = append(caps, (&features.Store{}).Capabilities()...)
	caps = append(caps, capabilities.Define(capabilities.Spec[kitchenIn, kitchenOut]{
		Name: "kitchenSink", Domain: "test", Title: "Kitchen sink",
		Description: "Takes every kind of Go field.\nSecond line.",
	}))
	var funcs []tsdecl.Func
	for _, c := range caps {
		if len(c.InputSchema) == 0 {
			t.Fatalf("%s: no input schema (definition error?)", c.Name)
		}
		funcs = append(funcs, tsdecl.Func{Name: c.Name, Description: c.Description, Input: c.InputSchema, Output: c.OutputSchema})
	}
	return funcs
}

type kitchenIn struct {
	Tags     map[string]string `json:"tags,omitempty" jsonschema:"labels to attach"`
	Extra    map[string]any    `json:"extra,omitempty"`
	When     time.Time         `json:"when" jsonschema:"when it happens"`
	Ratio    float64           `json:"ratio"`
	Count    *int              `json:"count"`
	Data     []byte            `json:"data,omitempty"`
	Anything any               `json:"anything,omitempty"`
	Nested   struct {
		Deep []struct {
			X int `json:"x"`
		} `json:"deep"`
	} `json:"nested"`
	Pair [2]string `json:"pair,omitempty"`
}

type kitchenOut struct {
	OK    bool                    `json:"ok"`
	Items []kitchenItem           `json:"items"`
	ByID  map[string]*kitchenItem `json:"byId,omitempty"`
}

type kitchenItem struct {
	ID string `json:"id"`
}

func TestRealCapabilities(t *testing.T) {
	funcs := realFuncs(t)
	out := tsdecl.Declare("codemode", funcs)
	t.Log("\n" + out)
	if !strings.HasPrefix(out, "declare const codemode: {\n") || !strings.HasSuffix(out, "\n};\n") {
		t.Errorf("not a codemode declaration:\n%s", out)
	}
	checkBalanced(t, out)
	for _, f := range funcs {
		if !strings.Contains(out, "\n  "+f.Name+"(args") {
			t.Errorf("%s is not declared", f.Name)
		}
	}
	// Only kitchenSink's free-form fields are unknown: every real schema is
	// understood.
	if n := strings.Count(out, "unknown"); n != 2 {
		t.Errorf("%d unknowns, want 2 (kitchenSink's extra and anything)", n)
	}
}

// checkBalanced checks that brackets outside comments and string literals
// balance.
func checkBalanced(t *testing.T, ts string) {
	t.Helper()
	var stack []rune
	pairs := map[rune]rune{'}': '{', ']': '[', ')': '(', '>': '<'}
	rs := []rune(ts)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '/' && i+1 < len(rs) && rs[i+1] == '*':
			end := strings.Index(string(rs[i+2:]), "*/")
			if end < 0 {
				t.Fatalf("unterminated comment at %d", i)
			}
			i += 2 + len([]rune(string(rs[i+2:])[:end])) + 1
		case r == '"':
			for i++; i < len(rs) && rs[i] != '"'; i++ {
				if rs[i] == '\\' {
					i++
				}
			}
		case r == '=' && i+1 < len(rs) && rs[i+1] == '>':
			i++ // an arrow, not a closing angle bracket
		case r == '{' || r == '[' || r == '(' || r == '<':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				t.Fatalf("unbalanced %q at %d in:\n%s", r, i, ts)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		t.Fatalf("unclosed %q in:\n%s", stack, ts)
	}
}
