package tsdecl_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/codemode/tsdecl"
)

// typeTests are the cases of TestType, one or more per construct; the tsc
// test type-checks their output too.
var typeTests = []struct {
	name, schema, want string
}{
	// Types.
	{"string", `{"type":"string"}`, `string`},
	{"number", `{"type":"number"}`, `number`},
	{"integer", `{"type":"integer","minimum":0}`, `number`},
	{"boolean", `{"type":"boolean"}`, `boolean`},
	{"null", `{"type":"null"}`, `null`},
	{"type list", `{"type":["null","array"],"items":{"type":"string"}}`, `string[] | null`},
	{"type list of scalars", `{"type":["string","integer","null"]}`, `string | number | null`},
	{"unknown type name", `{"type":"bignum"}`, `unknown`},

	// Objects.
	{"object", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"number"}},"required":["a"],"additionalProperties":false}`,
		`{ a: string; b?: number }`},
	{"object without additionalProperties is closed", `{"type":"object","properties":{"a":{"type":"string"}}}`, `{ a?: string }`},
	{"empty closed object", `{"type":"object","additionalProperties":false}`, `{}`},
	{"object saying nothing of its keys", `{"type":"object"}`, `{ [key: string]: unknown }`},
	{"additionalProperties schema", `{"type":"object","additionalProperties":{"type":"integer"}}`, `{ [key: string]: number }`},
	{"additionalProperties true", `{"type":"object","additionalProperties":true}`, `{ [key: string]: unknown }`},
	{"properties and open", `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":true}`,
		`{ a: string; [key: string]: unknown }`},
	{"properties and typed index", `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":{"type":"number"}}`,
		`{ a: string } & { [key: string]: number }`},
	{"patternProperties", `{"type":"object","patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false}`, `{ [key: string]: string }`},
	{"properties imply object", `{"properties":{"a":{"type":"boolean"}},"required":["a"]}`, `{ a: boolean }`},
	{"nested objects", `{"type":"object","properties":{"o":{"type":"object","properties":{"p":{"type":"object","properties":{"q":{"type":"null"}},"required":["q"]}},"required":["p"]}},"required":["o"]}`,
		`{ o: { p: { q: null } } }`},
	{"quoted property names", `{"type":"object","properties":{"a-b":{"type":"string"},"$ok_1":{"type":"string"},"2x":{"type":"string"},"a\"b":{"type":"string"},"":{"type":"string"}},"required":["a-b","$ok_1","2x","a\"b",""]}`,
		`{ "a-b": string; $ok_1: string; "2x": string; "a\"b": string; "": string }`},
	{"long object breaks", `{"type":"object","properties":{"alpha":{"type":"string"},"bravo":{"type":"string"},"charlie":{"type":"string"},"delta":{"type":"string"},"echo":{"type":"string"},"foxtrot":{"type":"string"}},"required":["alpha","bravo","charlie","delta","echo","foxtrot"]}`,
		"{\n  alpha: string;\n  bravo: string;\n  charlie: string;\n  delta: string;\n  echo: string;\n  foxtrot: string;\n}"},

	// Arrays.
	{"array", `{"type":"array","items":{"type":"integer"}}`, `number[]`},
	{"array without items", `{"type":"array"}`, `unknown[]`},
	{"array of objects", `{"type":"array","items":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}}`, `Array<{ id: string }>`},
	{"array of unions", `{"type":"array","items":{"type":["string","null"]}}`, `Array<string | null>`},
	{"array of arrays", `{"type":"array","items":{"type":"array","items":{"type":"number"}}}`, `number[][]`},
	{"items imply array", `{"items":{"type":"string"}}`, `string[]`},
	{"prefixItems", `{"type":"array","prefixItems":[{"type":"string"},{"type":"number"}],"items":false}`, `[string, number]`},
	{"prefixItems with rest", `{"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"boolean"}}`, `[string, ...boolean[]]`},
	{"prefixItems open", `{"type":"array","prefixItems":[{"type":"string"}]}`, `[string, ...unknown[]]`},
	{"draft 7 tuple", `{"type":"array","items":[{"type":"string"}],"additionalItems":false}`, `[string]`},

	// Values.
	{"enum", `{"type":"string","enum":["open","triaged","a \"quoted\" one"]}`, `"open" | "triaged" | "a \"quoted\" one"`},
	{"enum of mixed scalars", `{"enum":[1,-2.5,true,null,"x"]}`, `1 | -2.5 | true | "x" | null`},
	{"enum with an object", `{"enum":["a",{"b":1}]}`, `unknown`},
	{"empty enum", `{"enum":[]}`, `never`},
	{"const", `{"const":"fixed"}`, `"fixed"`},
	{"const number", `{"const":42}`, `42`},

	// Combinations.
	{"anyOf", `{"anyOf":[{"type":"string"},{"type":"number"}]}`, `string | number`},
	{"oneOf", `{"oneOf":[{"type":"object","properties":{"kind":{"const":"a"}},"required":["kind"]},{"type":"object","properties":{"kind":{"const":"b"}},"required":["kind"]}]}`,
		`{ kind: "a" } | { kind: "b" }`},
	{"anyOf null moves last", `{"anyOf":[{"type":"null"},{"type":"string"}]}`, `string | null`},
	{"anyOf duplicates", `{"anyOf":[{"type":"string"},{"type":"string"},{"type":"integer"},{"type":"number"}]}`, `string | number`},
	{"anyOf with unknown", `{"anyOf":[{"type":"string"},{}]}`, `unknown`},
	{"allOf", `{"allOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},{"type":"object","properties":{"b":{"type":"number"}},"required":["b"]}]}`,
		`{ a: string } & { b: number }`},
	{"allOf of unions", `{"allOf":[{"anyOf":[{"type":"string"},{"type":"number"}]},{"anyOf":[{"const":1},{"const":"x"}]}]}`,
		`(string | number) & (1 | "x")`},
	{"allOf with never", `{"allOf":[{"type":"string"},false]}`, `never`},
	{"type with anyOf", `{"type":"object","properties":{"a":{"type":"string"}},"anyOf":[{"required":["a"]},{"required":["b"]}]}`, `{ a?: string }`},
	{"nullable", `{"type":"string","nullable":true}`, `string | null`},

	// References.
	{"$ref to $defs", `{"type":"object","properties":{"user":{"$ref":"#/$defs/User"}},"required":["user"],"$defs":{"User":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}}`,
		`{ user: { name: string } }`},
	{"$ref to definitions", `{"$ref":"#/definitions/Id","definitions":{"Id":{"type":"string"}}}`, `string`},
	{"$ref escaped pointer", `{"$ref":"#/$defs/a~1b~0c","$defs":{"a/b~c":{"type":"boolean"}}}`, `boolean`},
	{"$ref percent-encoded", `{"$ref":"#/%24defs/A","$defs":{"A":{"type":"null"}}}`, `null`},
	{"$ref into an array", `{"$ref":"#/anyOf/1","anyOf":[{"type":"string"},{"type":"number"}]}`, `number & (string | number)`},
	{"$ref with siblings", `{"$ref":"#/$defs/A","type":"object","properties":{"b":{"type":"string"}},"$defs":{"A":{"type":"object","properties":{"a":{"type":"string"}}}}}`,
		`{ a?: string } & { b?: string }`},
	{"$ref missing", `{"$ref":"#/$defs/Nope"}`, `unknown`},
	{"$ref external", `{"$ref":"https://example.com/schema.json"}`, `unknown`},
	{"$ref anchor", `{"$ref":"#thing"}`, `unknown`},
	{"$ref bad escape", `{"$ref":"#/%zz"}`, `unknown`},

	// Comments.
	{"format", `{"type":"string","format":"date-time"}`, `string /* date-time */`},
	{"default", `{"type":"integer","default":50}`, `number /* default: 50 */`},
	{"format in items", `{"type":"array","items":{"type":"string","format":"uri"}}`, `Array<string /* uri */>`},
	{"property comments", `{"type":"object","properties":{"at":{"type":"string","format":"date-time","description":"when it happened"},"limit":{"type":"integer","default":50},"old":{"type":"string","title":"Old","deprecated":true}},"required":["at"]}`,
		"{\n  /** when it happened; date-time */\n  at: string;\n  /** default: 50 */\n  limit?: number;\n  /** Old; deprecated */\n  old?: string;\n}"},
	{"long description is cut", `{"type":"object","properties":{"a":{"type":"string","description":"` + strings.Repeat("word ", 60) + `"}}}`,
		"{\n  /** " + strings.TrimSpace(strings.Repeat("word ", 40)) + "… */\n  a?: string;\n}"},
	{"nested comments indent", `{"type":"object","properties":{"o":{"type":"object","properties":{"a":{"type":"string","description":"the a"}},"required":["a"]}},"required":["o"]}`,
		"{\n  o: {\n    /** the a */\n    a: string;\n  };\n}"},

	// Degenerate schemas.
	{"empty schema", `{}`, `unknown`},
	{"description only", `{"description":"anything"}`, `unknown`},
	{"true", `true`, `unknown`},
	{"false", `false`, `never`},
	{"invalid JSON", `{"type":`, `unknown`},
	{"trailing data", `{"type":"string"} x`, `unknown`},
	{"empty input", ``, `unknown`},
	{"not a schema", `"string"`, `unknown`},
	{"number as schema", `42`, `unknown`},
	{"type of wrong kind", `{"type":7}`, `unknown`},
	{"empty type list", `{"type":[]}`, `unknown`},
	{"properties of wrong kind", `{"type":"object","properties":[1,2],"required":"a"}`, `{ [key: string]: unknown }`},
	{"items of wrong kind", `{"type":"array","items":"x"}`, `unknown[]`},
	{"anyOf of wrong kind", `{"anyOf":{"type":"string"}}`, `unknown`},
	{"empty anyOf", `{"anyOf":[]}`, `unknown`},
	{"enum of wrong kind", `{"enum":"a"}`, `unknown`},
	{"duplicate keys: last value, first place", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"a":{"type":"number"}},"required":["a","b"]}`,
		`{ a: number; b: string }`},
	{"deep nesting", strings.Repeat(`{"type":"array","items":`, 300) + `{}` + strings.Repeat(`}`, 300), `unknown`},
}

func TestType(t *testing.T) {
	for _, tt := range typeTests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tsdecl.Type(json.RawMessage(tt.schema)); got != tt.want {
				t.Errorf("Type(%s)\n got: %s\nwant: %s", tt.schema, got, tt.want)
			}
		})
	}
}

func TestDepthGuard(t *testing.T) {
	// 40 nested arrays: beyond the depth guard the innermost become unknown.
	schema := strings.Repeat(`{"type":"array","items":`, 40) + `{"type":"string"}` + strings.Repeat(`}`, 40)
	got := tsdecl.Type(json.RawMessage(schema))
	if !strings.HasPrefix(got, "unknown[]") || strings.Contains(got, "string") {
		t.Errorf("Type = %s, want unknown[]…[]", got)
	}
}

func TestCycles(t *testing.T) {
	tests := []struct {
		name, schema, want string
	}{
		{"self through $defs", `{"$ref":"#/$defs/Node","$defs":{"Node":{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/Node"}}},"required":["name"]}}}`,
			`{ name: string; children?: unknown[] }`},
		{"root", `{"type":"object","properties":{"next":{"$ref":"#"}}}`, `{ next?: unknown }`},
		{"mutual", `{"$ref":"#/$defs/A","$defs":{"A":{"type":"object","properties":{"b":{"$ref":"#/$defs/B"}}},"B":{"type":"object","properties":{"a":{"$ref":"#/$defs/A"}}}}}`,
			`{ b?: { a?: unknown } }`},
		{"ref to itself", `{"$defs":{"A":{"$ref":"#/$defs/A"}},"$ref":"#/$defs/A"}`, `unknown`},
		{"same target, two spellings", `{"$ref":"#/$defs/A","$defs":{"A":{"type":"object","properties":{"a":{"$ref":"#/%24defs/A"}}}}}`,
			`{ a?: unknown }`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tsdecl.Type(json.RawMessage(tt.schema)); got != tt.want {
				t.Errorf("Type(%s)\n got: %s\nwant: %s", tt.schema, got, tt.want)
			}
		})
	}
}

// TestExpansionBudget checks that references that double at every level
// (2^30 leaves if expanded naively) stay bounded.
func TestExpansionBudget(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"$ref":"#/$defs/d0","$defs":{`)
	for i := range 30 {
		next := `{"type":"string"}`
		if i < 29 {
			next = `{"$ref":"#/$defs/d` + strconv.Itoa(i+1) + `"}`
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"d` + strconv.Itoa(i) + `":{"type":"object","properties":{"l":` + next + `,"r":` + next + `},"required":["l","r"]}`)
	}
	b.WriteString(`}}`)
	got := tsdecl.Type(json.RawMessage(b.String()))
	t.Logf("%d bytes", len(got))
	if len(got) > 1<<20 {
		t.Fatalf("output of %d bytes", len(got))
	}
	if !strings.Contains(got, "unknown") {
		t.Errorf("expected the budget to cut the expansion to unknown")
	}
}

func TestDeclare(t *testing.T) {
	got := tsdecl.Declare("codemode", []tsdecl.Func{
		{Name: "ping", Description: "Replies pong."},
		{Name: "echo", Description: "", Input: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
			Output: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)},
		{Name: "list", Input: json.RawMessage(`{"type":"object","properties":{"limit":{"type":"integer"}}}`)},
		{Name: "free", Input: json.RawMessage(`{}`), Output: json.RawMessage(`not json`)},
		{Name: "scalar", Input: json.RawMessage(`{"type":"string"}`)},
		{Name: "not-an-identifier", Input: json.RawMessage(`{"type":"object","additionalProperties":false}`)},
	})
	want := `declare const codemode: {
  /** Replies pong. */
  ping(args?: {}): Promise<unknown>;
  echo(args: { text: string }): Promise<{ text: string }>;
  list(args?: { limit?: number }): Promise<unknown>;
  free(args?: unknown): Promise<unknown>;
  scalar(args: string): Promise<unknown>;
  "not-an-identifier"(args?: {}): Promise<unknown>;
};
`
	if got != want {
		t.Errorf("Declare:\n%s\nwant:\n%s", got, want)
	}
	if got := tsdecl.Declare("", nil); got != "declare const codemode: {\n};\n" {
		t.Errorf("Declare with no funcs = %q", got)
	}
}

func TestHostileDescriptions(t *testing.T) {
	evil := "Nice. */ declare const pwned: 1; /*\nline two */ } ; {\r\nthree\u2028four\u2029five */"
	schema, _ := json.Marshal(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"a": map[string]any{"type": "string", "description": evil, "format": "*/x", "default": "*/"},
		},
		"required": []string{"a"},
	})
	items, _ := json.Marshal(map[string]any{"type": "array", "items": map[string]any{"type": "string", "format": "*/ evil\n"}})
	out := tsdecl.Declare("codemode", []tsdecl.Func{
		{Name: "f", Description: evil, Input: schema, Output: items},
	})
	// Removing every comment must leave only the declaration's own code.
	t.Log("\n" + out)
	code := stripComments(t, out)
	want := "declare const codemode: {\n  \n  f(args: {\n    \n    a: string;\n  }): Promise<Array<string >>;\n};\n"
	if code != want {
		t.Errorf("the descriptions leak into the code:\n%s\ncode left without comments:\n%q", out, code)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.ContainsAny(l, "\r\u2028\u2029") {
			t.Errorf("a line terminator inside a comment: %q", l)
		}
	}
}

// stripComments removes block comments, failing on one left open.
func stripComments(t *testing.T, s string) string {
	t.Helper()
	var b strings.Builder
	for {
		i := strings.Index(s, "/*")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		j := strings.Index(s[i+2:], "*/")
		if j < 0 {
			t.Fatalf("unterminated comment: %q", s[i:])
		}
		s = s[i+2+j+2:]
	}
}

func TestDeterministicOrder(t *testing.T) {
	// Property order is the JSON text's, not sorted, and identical across runs.
	schema := json.RawMessage(`{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"number"},"mid":{"type":"object","properties":{"y":{"type":"string"},"b":{"type":"string"}}}},"required":["mid","zeta"]}`)
	want := `{ zeta: string; alpha?: number; mid: { y?: string; b?: string } }`
	for range 20 {
		if got := tsdecl.Type(schema); got != want {
			t.Fatalf("Type = %s, want %s", got, want)
		}
	}
	funcs := realFuncs(t)
	first := tsdecl.Declare("codemode", funcs)
	for range 10 {
		if got := tsdecl.Declare("codemode", funcs); got != first {
			t.Fatal("Declare is not deterministic")
		}
	}
}

func TestGlobals(t *testing.T) {
	checkBalanced(t, tsdecl.Globals)
	for _, name := range []string{"declare function fetch(", "declare const storage", "get(key: string)", "set(key: string, value: any)",
		"delete(key: string)", "list(opts?:", "declare const console", "log(", "info(", "warn(", "error(", "debug("} {
		if !strings.Contains(tsdecl.Globals, name) {
			t.Errorf("Globals lacks %q", name)
		}
	}
}

// FuzzType checks that no schema makes Type panic or print a comment that
// does not close. Run it with go test -fuzz FuzzType.
func FuzzType(f *testing.F) {
	for _, tt := range typeTests {
		f.Add(tt.schema)
	}
	f.Fuzz(func(t *testing.T, schema string) {
		out := tsdecl.Type(json.RawMessage(schema))
		if out == "" {
			t.Fatal("empty type")
		}
		stripComments(t, out)
	})
}
