package capabilities

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestFlatObjectCompilesNoOtherKeyword: a schema that uses any keyword
// jsonschema-go enforces, on the object or on one of its properties (in
// any case of its spelling), is left to the general validator.
func TestFlatObjectCompilesNoOtherKeyword(t *testing.T) {
	prop := []string{`"minLength":2`, `"maxLength":1`, `"pattern":"^x$"`, `"format":"email"`, `"enum":["s"]`, `"const":"s"`,
		`"const":null`, `"minimum":5`, `"maximum":0`, `"exclusiveMinimum":0`, `"exclusiveMaximum":0`, `"multipleOf":7`,
		`"not":{"type":"string"}`, `"allOf":[{"minLength":2}]`, `"anyOf":[{"minLength":2}]`, `"oneOf":[{"minLength":2}]`,
		`"if":{"minLength":1},"then":{"maxLength":0}`, `"default":"s"`, `"MinLength":2`, `"ENUM":["s"]`, `"x-custom":1`}
	object := []string{`"minProperties":3`, `"maxProperties":0`, `"patternProperties":{"^a":{"type":"integer"}}`,
		`"propertyNames":{"maxLength":0}`, `"dependentRequired":{"a":["zz"]}`, `"unevaluatedProperties":false`,
		`"additionalProperties":{"type":"integer"}`, `"additionalProperties":true`, `"not":{"required":["a"]}`,
		`"allOf":[{"required":["zz"]}]`, `"required":["a"],"dependentSchemas":{"a":{"required":["zz"]}}`}
	for _, kw := range prop {
		for _, typ := range []string{"string", "integer", "number", "boolean"} {
			raw := `{"type":"object","properties":{"a":{"type":"` + typ + `",` + kw + `}}}`
			c := resolvedOf(t, Capability{Name: "raw", Domain: "test", Description: "d", InputSchema: json.RawMessage(raw)})
			if c.flat != nil {
				t.Errorf("compiled %s", raw)
			}
		}
	}
	for _, kw := range object {
		raw := `{"type":"object","properties":{"a":{"type":"string"}},` + kw + `}`
		c := resolvedOf(t, Capability{Name: "raw", Domain: "test", Description: "d", InputSchema: json.RawMessage(raw)})
		if c.flat != nil {
			t.Errorf("compiled %s", raw)
		}
	}
}

// TestFlatObjectOddArguments: arguments spelled oddly (numbers as
// exponents, negative zero, beyond int64, duplicate members, escaped
// names) are judged as jsonschema-go judges them.
func TestFlatObjectOddArguments(t *testing.T) {
	raw := `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"number"},"s":{"type":"string"},"f":{"type":"boolean"}},"required":["a"],"additionalProperties":false}`
	c := resolvedOf(t, Capability{Name: "raw", Domain: "test", Description: "d", InputSchema: json.RawMessage(raw)})
	if c.flat == nil {
		t.Fatalf("not compiled: %s", raw)
	}
	args := []string{`{"a":1.0}`, `{"a":1e2}`, `{"a":-0}`, `{"a":-0.0}`, `{"a":1e308}`, `{"a":12345678901234567890}`,
		`{"a":1.0000000000000001}`, `{"a":0.5}`, `{"a":1e-400}`, `{"a":"1"}`, `{"a":true}`, `{"a":null}`, `{"a":{}}`, `{"a":[1]}`,
		`{"a":1,"a":"x"}`, `{"a":"x","a":1}`, `{"\u0061":1}`, `{"A":1}`, `{"a":1,"A":1}`, `{"a":1,"\u0073":5}`,
		`{"a":1,"s":{"s":"x"}}`, `{"a":1,"b":-0}`, `{"a":1,"b":"1"}`, `{"a":1,"f":0}`, `{"a":1,"f":"true"}`,
		`{"a":1,"s":null}`, `{"a":1,"s":"\u0000\ud800"}`, `{"a":1,"\u00e9":1}`, `{"a":1,"":1}`, `{}`, `[]`, `null`, `1`, `"a"`}
	for _, a := range args {
		var v any
		if err := json.Unmarshal([]byte(a), &v); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		dropNulls(c.input.Schema(), v)
		fast, slow := c.flat.valid(v), c.input.Validate(v) == nil
		if fast && !slow {
			t.Errorf("arguments %s: the compiled check passes what jsonschema-go refuses", a)
		}
		// U+0000 is refused before either check (TestNULArgumentsRefused).
		want := slow && !strings.Contains(a, `\u0000`)
		if _, err := c.validateInput(json.RawMessage(a)); (err == nil) != want {
			t.Errorf("arguments %s: validateInput err %v, want valid %v", a, err, want)
		}
	}
}
