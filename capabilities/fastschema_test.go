package capabilities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

type flatIn struct {
	Text  string   `json:"text" jsonschema:"some text"`
	N     int      `json:"n,omitempty" jsonschema:"a count"`
	X     *float64 `json:"x,omitempty" jsonschema:"a number"`
	Flag  bool     `json:"flag,omitempty" jsonschema:"a flag"`
	Other string   `json:"other,omitempty" jsonschema:"more text"`
}

type notFlatIn struct {
	State string `json:"state" jsonschema:"the state" schema:"enum=open|closed"`
}

func resolvedOf(t testing.TB, c Capability) *Capability {
	t.Helper()
	c.Handler = func(context.Context, *Call, json.RawMessage) (Result, error) { return Result{}, nil }
	if c.Annotations == nil {
		c.Annotations = &Annotations{ReadOnly: true}
	}
	if err := c.validate(builtin, capabilityName); err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestFlatObjectAgreesWithValidator: for the schemas the compiled check
// covers, it says valid exactly when jsonschema-go does, over generated
// arguments of every JSON kind; schemas with other keywords are not
// compiled.
func TestFlatObjectAgreesWithValidator(t *testing.T) {
	defined := resolvedOf(t, Define(Spec[flatIn, Result]{Name: "flat", Domain: "test", Description: "d"}))
	if defined.flat == nil {
		t.Fatalf("the schema Define derives for a struct of primitives is not compiled: %s", defined.InputSchema)
	}
	if c := resolvedOf(t, Define(Spec[notFlatIn, Result]{Name: "notFlat", Domain: "test", Description: "d"})); c.flat != nil {
		t.Errorf("a schema with an enum was compiled: %s", c.InputSchema)
	}
	for _, raw := range []string{
		`{"type":"object","properties":{"a":{"type":"string","maxLength":3}}}`,
		`{"type":"object","properties":{"a":{"type":["string","null"]}}}`,
		`{"type":"object","properties":{"a":{"type":"array"}}}`,
		`{"type":"object","properties":{"a":{}}}`,
		`{"type":"object","additionalProperties":{"type":"string"}}`,
		`{"type":"object","minProperties":1}`,
		`{"type":"object","$ref":"#/$defs/x","$defs":{"x":{"type":"object"}}}`,
	} {
		if c := resolvedOf(t, Capability{Name: "raw", Domain: "test", Description: "d", InputSchema: json.RawMessage(raw)}); c.flat != nil {
			t.Errorf("compiled %s", raw)
		}
	}
	caps := []*Capability{defined}
	for _, raw := range []string{
		`{"type":"object"}`,
		`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"number"},"c":{"type":"boolean"}},"required":["a","c"]}`,
		`{"type":"object","properties":{"a":{"type":"string"}},"required":["a","zz"],"additionalProperties":false}`,
	} {
		c := resolvedOf(t, Capability{Name: "raw", Domain: "test", Description: "d", InputSchema: json.RawMessage(raw)})
		if c.flat == nil {
			t.Fatalf("not compiled: %s", raw)
		}
		caps = append(caps, c)
	}
	names := []string{"text", "n", "x", "flag", "other", "a", "b", "c", "zz", "extra"}
	values := []string{`"s"`, `""`, `1`, `-3`, `1.5`, `1e3`, `2.0`, `true`, `false`, `null`, `[]`, `["s"]`, `{}`, `{"text":"s"}`}
	rng := rand.New(rand.NewPCG(1, 2))
	checked := map[bool]int{}
	for range 20000 {
		var b strings.Builder
		b.WriteString("{")
		for i := range rng.IntN(5) {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "%q:%s", names[rng.IntN(len(names))], values[rng.IntN(len(values))])
		}
		b.WriteString("}")
		raw := b.String()
		if rng.IntN(20) == 0 {
			raw = values[rng.IntN(len(values))] // not an object
		}
		var v any
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			t.Fatal(err)
		}
		for _, c := range caps {
			dropNulls(c.input.Schema(), v)
			fast, slow := c.flat.valid(v), c.input.Validate(v) == nil
			if fast != slow {
				t.Fatalf("schema %s, arguments %s: compiled check %v, jsonschema-go %v", c.InputSchema, raw, fast, slow)
			}
			checked[slow]++
		}
	}
	if checked[true] < 1000 || checked[false] < 1000 {
		t.Errorf("the generated arguments are too one-sided: %v", checked)
	}
}

// TestFlatObjectErrorsUnchanged: arguments the compiled check does not
// pass get the general validator's refusal, as before.
func TestFlatObjectErrorsUnchanged(t *testing.T) {
	c := resolvedOf(t, Define(Spec[flatIn, Result]{Name: "flat", Domain: "test", Description: "d"}))
	for _, raw := range []string{`{}`, `{"text":1}`, `{"text":"s","n":1.5}`, `{"text":"s","extra":1}`, `[]`} {
		_, err := c.validateInput(json.RawMessage(raw))
		if err == nil {
			t.Errorf("%s accepted", raw)
			continue
		}
		flat := c.flat
		c.flat = nil
		_, want := c.validateInput(json.RawMessage(raw))
		c.flat = flat
		if want == nil || err.Error() != want.Error() {
			t.Errorf("%s: %v, without the compiled check %v", raw, err, want)
		}
	}
	if got, err := c.validateInput(json.RawMessage(`{"text":"s","other":null}`)); err != nil || string(got) != `{"text":"s"}` {
		t.Errorf("a null optional argument: %s, %v", got, err)
	}
}

// BenchmarkValidateInput: the input check of a capability with a flat
// schema, with the compiled check and with jsonschema-go alone.
func BenchmarkValidateInput(b *testing.B) {
	c := resolvedOf(b, Define(Spec[flatIn, Result]{Name: "flat", Domain: "test", Description: "d"}))
	args := json.RawMessage(`{"text":"client 3 call 7","n":3,"flag":true}`)
	run := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.validateInput(args); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("compiled", run)
	c.flat = nil
	b.Run("jsonschema-go", run)
}

// TestNULArgumentsRefused: U+0000 anywhere in the arguments (a string, a
// nested one, an element, an object's key) is refused as invalid input
// naming where it is, before any handler runs: neither database stores it
// in text. An escaped backslash followed by u0000 is not a NUL and passes.
func TestNULArgumentsRefused(t *testing.T) {
	raw := `{"type":"object","properties":{"s":{"type":"string"},"o":{"type":"object"},"l":{"type":"array"}}}`
	c := resolvedOf(t, Capability{Name: "raw", Domain: "test", Description: "d", InputSchema: json.RawMessage(raw)})
	for args, where := range map[string]string{
		`{"s":"\u0000"}`:              `argument "s"`,
		`{"s":"ok\u0000ok"}`:          `argument "s"`,
		`{"o":{"k":"\u0000"}}`:        `argument "o.k"`,
		`{"l":["a","b\u0000"]}`:       `argument "l[1]"`,
		`{"o":{"k\u0000":1}}`:         `the name of argument "o.k\x00"`,
		`{"l":[{"deep":["\u0000"]}]}`: `argument "l[0].deep[0]"`,
	} {
		_, err := c.validateInput(json.RawMessage(args))
		var ce *Error
		if !errors.As(err, &ce) || ce.Code != CodeInvalidInput || !strings.Contains(ce.Message, where+" contains the character U+0000") {
			t.Errorf("arguments %s: %v, want invalid input naming %s", args, err, where)
		}
	}
	for _, args := range []string{`{"s":"\\u0000"}`, `{"s":"a\\\\u0000"}`, `{"s":"plain"}`, `{}`} {
		if _, err := c.validateInput(json.RawMessage(args)); err != nil {
			t.Errorf("arguments %s: %v, want valid", args, err)
		}
	}
}

// rawAgrees fails t when validRaw passes args that validateInput without
// the compiled checks (decoding, NUL and null handling, jsonschema-go)
// would refuse or hand on changed. It reports whether validRaw passed them.
func rawAgrees(t testing.TB, c *Capability, args string) bool {
	t.Helper()
	if !c.flat.validRaw([]byte(args)) {
		return false
	}
	flat := c.flat
	c.flat = nil
	got, err := c.validateInput(json.RawMessage(args))
	c.flat = flat
	if err != nil || string(got) != args {
		t.Fatalf("schema %s: validRaw passed %q, validateInput answers %q, %v", c.InputSchema, args, got, err)
	}
	return true
}

// TestValidRawAgreesWithDecoding: the check of raw arguments passes only
// what the decoding path accepts unchanged, over generated arguments with
// spacing, escapes, numbers of every spelling, duplicate keys and broken
// syntax; and it passes the plain arguments agents send.
func TestValidRawAgreesWithDecoding(t *testing.T) {
	caps := []*Capability{resolvedOf(t, Define(Spec[flatIn, Result]{Name: "flat", Domain: "test", Description: "d"}))}
	for _, raw := range []string{
		`{"type":"object"}`,
		`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"number"},"c":{"type":"boolean"}},"required":["a","c"]}`,
		`{"type":"object","properties":{"a":{"type":"string"}},"required":["a","zz"],"additionalProperties":false}`,
	} {
		caps = append(caps, resolvedOf(t, Capability{Name: "raw", Domain: "test", Description: "d", InputSchema: json.RawMessage(raw)}))
	}
	names := []string{`"text"`, `"n"`, `"x"`, `"flag"`, `"other"`, `"a"`, `"b"`, `"c"`, `"zz"`, `"extra"`, `"te\u0078t"`, `"é"`, `"TEXT"`}
	values := []string{`"s"`, `""`, `"a\"b\\c\/\b\f\n\r\t\u00e9\ud83d"`, `"\u0000"`, `"\\u0000"`, `"bad \x"`, `"\u12"`, "\"ctl\x01\"", "\"\xff\"",
		`0`, `1`, `-3`, `-0`, `01`, `-`, `1.`, `.5`, `1.5`, `2.0`, `2.000`, `1e3`, `1E-2`, `1e400`, `12345678901234567890`, `1.00000000000000000001`,
		`true`, `false`, `tru`, `nul`, `null`, `[]`, `["s"]`, `{}`, `{"text":"s"}`}
	spaces := []string{"", " ", "\n\t", "\r"}
	rng := rand.New(rand.NewPCG(3, 4))
	sp := func() string { return spaces[rng.IntN(len(spaces))] }
	passed := 0
	for range 50000 {
		var b strings.Builder
		b.WriteString(sp() + "{" + sp())
		for i := range rng.IntN(5) {
			if i > 0 {
				b.WriteString("," + sp())
			}
			b.WriteString(names[rng.IntN(len(names))] + sp() + ":" + sp() + values[rng.IntN(len(values))] + sp())
		}
		b.WriteString("}" + sp())
		raw := b.String()
		switch rng.IntN(20) {
		case 0:
			raw = values[rng.IntN(len(values))] // not an object
		case 1:
			raw = raw[:rng.IntN(len(raw)+1)] // cut short
		case 2:
			raw += "}"
		}
		for _, c := range caps {
			if rawAgrees(t, c, raw) {
				passed++
			}
		}
	}
	if passed < 5000 {
		t.Errorf("validRaw passed only %d generated arguments", passed)
	}
	c := caps[0]
	for _, args := range []string{`{"text":"client 3 call 7"}`, `{ "text": "s", "n": 3, "x": -1.5, "flag": true }`, `{"text":"é \u00e9"}`} {
		if !rawAgrees(t, c, args) {
			t.Errorf("validRaw does not pass %s", args)
		}
	}
}

// FuzzValidRaw: whatever the bytes, validRaw passes only what the decoding
// path accepts unchanged.
func FuzzValidRaw(f *testing.F) {
	c := resolvedOf(f, Define(Spec[flatIn, Result]{Name: "flat", Domain: "test", Description: "d"}))
	for _, s := range []string{`{"text":"s"}`, `{"text":"s","n":1.0,"x":2,"flag":false}`, `{"text":"\u0000"}`, `{"text":"s","text":1}`, ` {"text" : "s"} `} {
		f.Add(s)
	}
	addReviewSeeds(f) // the review's odd spellings (review_perf_test.go)
	f.Fuzz(func(t *testing.T, args string) { rawAgrees(t, c, args) })
}
