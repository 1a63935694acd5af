package capabilities_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

type tagIn struct {
	Status string   `json:"status,omitempty" jsonschema:"which items" schema:"enum=open|closed|all,default=open"`
	Limit  int      `json:"limit,omitempty" jsonschema:"page size" schema:"minimum=1,maximum=50,default=10"`
	Slug   string   `json:"slug,omitempty" jsonschema:"a slug" schema:"minLength=1,maxLength=8,pattern=^[a-z]{1,8}(-[a-z]+)?$"`
	Since  string   `json:"since,omitempty" jsonschema:"a time" schema:"format=date-time"`
	Kinds  []string `json:"kinds,omitempty" jsonschema:"kinds" schema:"enum=a|b,maxItems=2"`
	Level  int      `json:"level,omitempty" jsonschema:"a level" schema:"enum=1|2|3"`
	After  *int64   `json:"after" jsonschema:"a cursor"`
	Items  []item   `json:"items,omitempty" jsonschema:"nested items"`
}

type item struct {
	Op  string `json:"op" jsonschema:"the operation" schema:"enum=set|delete"`
	Key string `json:"key" jsonschema:"the key"`
}

type tagOut struct {
	Names   []string          `json:"names"`
	Tags    map[string]string `json:"tags"`
	Nested  []nestedOut       `json:"nested"`
	When    *time.Time        `json:"when,omitempty"`
	Maybe   *string           `json:"maybe"`
	Payload json.RawMessage   `json:"payload,omitempty"`
	Bytes   []byte            `json:"bytes"`
	Extra   *json.RawMessage  `json:"extra"`
}

type nestedOut struct {
	Values []int `json:"values"`
}

func schemaOf(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func prop(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		if p == "[]" {
			m, _ = m["items"].(map[string]any)
			continue
		}
		props, _ := m["properties"].(map[string]any)
		m, _ = props[p].(map[string]any)
	}
	return m
}

// The schema tag's constraints land in the input schema, slices are plain
// arrays and pointers are optional, not nullable.
func TestDefineSchemaTags(t *testing.T) {
	var got tagIn
	c := capabilities.Define(capabilities.Spec[tagIn, tagOut]{
		Name: "tagged", Domain: "test", Description: "Tests tags.", Annotations: &read,
		Handler: func(_ context.Context, _ *capabilities.Call, in tagIn) (tagOut, error) {
			got = in
			return tagOut{}, nil
		},
	})
	reg := capabilities.NewRegistry(capabilities.Options{})
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	in := schemaOf(t, c.InputSchema)
	check := func(p map[string]any, key string, want any) {
		t.Helper()
		b, _ := json.Marshal(p[key])
		w, _ := json.Marshal(want)
		if string(b) != string(w) {
			t.Errorf("%s = %s, want %s (in %v)", key, b, w, p)
		}
	}
	check(prop(in, "status"), "enum", []string{"open", "closed", "all"})
	check(prop(in, "status"), "default", "open")
	check(prop(in, "limit"), "minimum", 1)
	check(prop(in, "limit"), "maximum", 50)
	check(prop(in, "limit"), "default", 10)
	check(prop(in, "slug"), "pattern", "^[a-z]{1,8}(-[a-z]+)?$")
	check(prop(in, "slug"), "maxLength", 8)
	check(prop(in, "since"), "format", "date-time")
	check(prop(in, "kinds"), "type", "array")
	check(prop(in, "kinds"), "maxItems", 2)
	check(prop(in, "kinds", "[]"), "enum", []string{"a", "b"})
	check(prop(in, "level"), "enum", []int{1, 2, 3})
	check(prop(in, "after"), "type", "integer")
	check(prop(in, "items"), "type", "array")
	check(prop(in, "items", "[]", "op"), "enum", []string{"set", "delete"})
	if req, _ := in["required"].([]any); len(req) != 0 {
		t.Errorf("required = %v: a pointer field is optional", req)
	}
	out := schemaOf(t, c.OutputSchema)
	check(prop(out, "names"), "type", "array")
	check(prop(out, "tags"), "type", "object")
	check(prop(out, "nested", "[]", "values"), "type", "array")
	check(prop(out, "when"), "type", "string")
	check(prop(out, "maybe"), "type", []string{"null", "string"}) // no omitempty: nil is sent as null
	check(prop(out, "bytes"), "type", "string")
	for _, name := range []string{"payload", "extra"} {
		if p := prop(out, name); len(p) != 0 {
			t.Errorf("%s = %v, want any JSON value", name, p)
		}
	}

	// An absent argument with a default is decoded as the default.
	caller := capabilitiestest.User("u1")
	if _, err := reg.Invoke(context.Background(), caller, "tagged", nil); err != nil {
		t.Fatal(err)
	}
	if got.Status != "open" || got.Limit != 10 {
		t.Fatalf("defaults not applied: %+v", got)
	}
	// A given argument wins; a null optional one counts as absent.
	if _, err := reg.Invoke(context.Background(), caller, "tagged", json.RawMessage(`{"limit":3,"status":null,"after":null,"kinds":null,"items":[{"op":"set","key":"k"}]}`)); err != nil {
		t.Fatal(err)
	}
	if got.Status != "open" || got.Limit != 3 || got.After != nil || len(got.Items) != 1 {
		t.Fatalf("got %+v", got)
	}
	// So does an empty string for an optional enum that does not list it.
	got = tagIn{}
	if _, err := reg.Invoke(context.Background(), caller, "tagged", json.RawMessage(`{"status":""}`)); err != nil {
		t.Fatal(err)
	}
	if got.Status != "open" {
		t.Fatalf("status = %q, want the default", got.Status)
	}
	// Large integers pass through exactly when the arguments are rewritten.
	if _, err := reg.Invoke(context.Background(), caller, "tagged", json.RawMessage(`{"after":9007199254740993,"status":null}`)); err != nil {
		t.Fatal(err)
	}
	if got.After == nil || *got.After != 9007199254740993 {
		t.Fatalf("after = %v", got.After)
	}
}

// Arguments breaking a constraint are refused as invalid input, with a
// message naming the argument and what it must be; the handler never runs.
func TestDefineConstraintsRefuseBadInput(t *testing.T) {
	runs := 0
	reg := capabilities.NewRegistry(capabilities.Options{})
	err := reg.Register(capabilities.Define(capabilities.Spec[tagIn, tagOut]{
		Name: "tagged", Domain: "test", Description: "Tests tags.", Annotations: &read,
		Handler: func(context.Context, *capabilities.Call, tagIn) (tagOut, error) { runs++; return tagOut{}, nil },
	}))
	if err != nil {
		t.Fatal(err)
	}
	caller := capabilitiestest.User("u1")
	for _, tc := range []struct{ args, want string }{
		{`{"status":"pending"}`, `status must be one of "open", "closed", "all" (got "pending")`},
		{`{"limit":0}`, `limit must be at least 1 (got 0)`},
		{`{"limit":51}`, `limit must be at most 50 (got 51)`},
		{`{"limit":2.5}`, `limit must be an integer (got the number 2.5)`},
		{`{"slug":"Abc"}`, `slug must match the pattern ^[a-z]{1,8}(-[a-z]+)?$ (got "Abc")`},
		{`{"slug":"abcdefghi"}`, `slug must be at most 8 characters long (got 9)`},
		{`{"slug":""}`, `slug must not be empty`},
		{`{"kinds":["a","c"]}`, `kinds[1] must be one of "a", "b" (got "c")`},
		{`{"kinds":["a","b","a"]}`, `kinds must have at most 2 items (got 3)`},
		{`{"level":4}`, `level must be one of 1, 2, 3 (got 4)`},
		{`{"items":[{"op":"set","key":"k"},{"op":"drop","key":"k"}]}`, `items[1].op must be one of "set", "delete" (got "drop")`},
		{`{"items":[{"op":"set"}]}`, `items[0].key is required`},
		{`{"item":1}`, `unknown argument "item" (expected one of: after, items, kinds, level, limit, since, slug, status)`},
		{`{"items":null,"limit":"ten"}`, `limit must be an integer (got a string)`},
		{`[1]`, `the arguments must be an object (got an array)`},
	} {
		_, err := reg.Invoke(context.Background(), caller, "tagged", json.RawMessage(tc.args))
		if capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Errorf("%s: err = %v, want invalid input", tc.args, err)
			continue
		}
		var ce *capabilities.Error
		if !errors.As(err, &ce) || ce.Message != "invalid arguments: "+tc.want {
			msg := ""
			if ce != nil {
				msg = ce.Message
			}
			t.Errorf("%s:\n got %q\nwant %q", tc.args, msg, "invalid arguments: "+tc.want)
		}
	}
	if runs != 0 {
		t.Fatalf("the handler ran %d times for invalid input", runs)
	}
}

// A nil slice or map in the output is sent as [] or {}: the text block and
// the structured content match the output schema, and the handler's value
// is not modified.
func TestDefineOutputNilSlices(t *testing.T) {
	shared := &tagOut{Nested: []nestedOut{{}}}
	reg := capabilities.NewRegistry(capabilities.Options{})
	err := reg.Register(capabilities.Define(capabilities.Spec[struct{}, tagOut]{
		Name: "empty", Domain: "test", Description: "Returns nothing much.", Annotations: &read,
		Handler: func(context.Context, *capabilities.Call, struct{}) (tagOut, error) { return *shared, nil },
	}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := reg.Invoke(context.Background(), capabilitiestest.User("u1"), "empty", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"names":[],"tags":{},"nested":[{"values":[]}],"maybe":null,"bytes":"","extra":null}`
	if text := res.Content[0].(capabilities.Text).Text; text != want {
		t.Fatalf("text = %s\nwant %s", text, want)
	}
	b, _ := json.Marshal(res.Structured)
	if string(b) != want {
		t.Fatalf("structured = %s", b)
	}
	if _, ok := res.Structured.(tagOut); !ok {
		t.Fatalf("structured is %T, want tagOut", res.Structured)
	}
	if shared.Names != nil || shared.Nested[0].Values != nil {
		t.Fatalf("the handler's value was modified: %+v", shared)
	}
}

func TestNormalizeOutput(t *testing.T) {
	type inner struct {
		List []string
		Skip []string `json:"-"`
		any  []string
	}
	type outer struct {
		P     *inner
		Any   any
		M     map[string][]int
		Arr   [2]inner
		Stamp time.Time
	}
	v := outer{P: &inner{}, Any: inner{}, M: map[string][]int{"a": nil}}
	got := capabilities.NormalizeOutput(v)
	b, _ := json.Marshal(got)
	want := `{"P":{"List":[]},"Any":{"List":[]},"M":{"a":[]},"Arr":[{"List":[]},{"List":[]}],"Stamp":"0001-01-01T00:00:00Z"}`
	if string(b) != want {
		t.Fatalf("got %s\nwant %s", b, want)
	}
	if v.P.List != nil || v.M["a"] != nil || !reflect.DeepEqual(v.Any, inner{}) {
		t.Fatalf("the original was modified: %+v", v)
	}
	// Nothing to replace: the value comes back as it was.
	same := capabilities.NormalizeOutput(struct{ N int }{7})
	if same.N != 7 {
		t.Fatal(same)
	}
}

// A tag that cannot hold is a definition error, reported by Register.
func TestDefineSchemaTagErrors(t *testing.T) {
	def := func(in any) error {
		var c capabilities.Capability
		switch in.(type) {
		case badKey:
			c = defineWith[badKey]()
		case badEnum:
			c = defineWith[badEnum]()
		case badRequiredDefault:
			c = defineWith[badRequiredDefault]()
		case badPattern:
			c = defineWith[badPattern]()
		case badDefault:
			c = defineWith[badDefault]()
		case badMinimum:
			c = defineWith[badMinimum]()
		case badItems:
			c = defineWith[badItems]()
		}
		return capabilities.NewRegistry(capabilities.Options{}).Register(c)
	}
	for _, tc := range []struct {
		in   any
		want string
	}{
		{badKey{}, `unknown key "enums"`},
		{badEnum{}, `enum value "x"`},
		{badRequiredDefault{}, "a required field cannot have a default"},
		{badPattern{}, "pattern"},
		{badDefault{}, "default"},
		{badMinimum{}, "minimum needs a number field"},
		{badItems{}, "maxItems needs a slice field"},
	} {
		err := def(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%T: err = %v, want %q", tc.in, err, tc.want)
		}
	}
}

type (
	badKey struct {
		A string `json:"a,omitempty" schema:"enums=x"`
	}
	badEnum struct {
		A int `json:"a,omitempty" schema:"enum=1|x"`
	}
	badRequiredDefault struct {
		A int `json:"a" schema:"default=3"`
	}
	badPattern struct {
		A string `json:"a,omitempty" schema:"pattern=("`
	}
	badDefault struct {
		A string `json:"a,omitempty" schema:"enum=x|y,default=z"`
	}
	badMinimum struct {
		A string `json:"a,omitempty" schema:"minimum=1"`
	}
	badItems struct {
		A string `json:"a,omitempty" schema:"maxItems=1"`
	}
)

func defineWith[In any]() capabilities.Capability {
	return capabilities.Define(capabilities.Spec[In, struct{}]{
		Name: "bad", Domain: "test", Description: "Bad tags.", Annotations: &read,
		Handler: func(context.Context, *capabilities.Call, In) (struct{}, error) { return struct{}{}, nil },
	})
}
