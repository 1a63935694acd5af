package tsdecl

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"strconv"
	"strings"
)

// object is a JSON object that remembers the order of its keys, which
// encoding/json's maps lose. A duplicated key keeps its first position and
// its last value, as encoding/json does.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(key string) (any, bool) {
	v, ok := o.vals[key]
	return v, ok
}

func (o *object) str(key string) string {
	s, _ := o.vals[key].(string)
	return s
}

func (o *object) list(key string) []any {
	l, _ := o.vals[key].([]any)
	return l
}

// maxNesting bounds the nesting of the JSON text itself.
const maxNesting = 256

// parse decodes JSON into *object, []any, string, json.Number, bool and nil.
func parse(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("tsdecl: trailing data after the schema")
	}
	return v, nil
}

func parseValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxNesting {
		return nil, errors.New("tsdecl: schema nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &object{vals: map[string]any{}}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			v, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			if _, dup := o.vals[k]; !dup {
				o.keys = append(o.keys, k)
			}
			o.vals[k] = v
		}
		_, err := dec.Token() // '}'
		return o, err
	case json.Delim('['):
		l := []any{}
		for dec.More() {
			v, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		_, err := dec.Token() // ']'
		return l, err
	}
	return tok, nil
}

// Limits on the conversion: beyond them a subschema becomes unknown, so
// that a hostile or pathological schema (deep nesting, a reference
// expanded again and again) cannot make the output explode.
const (
	maxDepth = 32   // nested subschemas, counting resolved references
	maxNodes = 4000 // subschemas converted for one document
	maxDoc   = 200  // runes of a property's comment
)

// converter turns one schema document into a tsType.
type converter struct {
	root  any
	stack []*object // references being expanded, for the cycle guard
	nodes int
}

// convert parses and converts a schema document; invalid JSON is unknown.
func convert(raw json.RawMessage) *tsType {
	root, err := parse(raw)
	if err != nil {
		return unknownType()
	}
	c := &converter{root: root}
	if o, ok := root.(*object); ok {
		c.stack = append(c.stack, o) // "#" refers to the document itself
	}
	return c.value(root, 0)
}

// value converts a subschema in a position without its own comment (array
// items, union members, the top level): its format and default follow the
// type as an inline comment.
func (c *converter) value(s any, depth int) *tsType {
	t := c.schema(s, depth)
	if o, ok := s.(*object); ok {
		if n := note(o); n != "" && t.kind != kindUnknown {
			t = t.clone()
			t.note = n
		}
	}
	return t
}

// schema converts a subschema (a boolean or an object).
func (c *converter) schema(s any, depth int) *tsType {
	c.nodes++
	if depth > maxDepth || c.nodes > maxNodes {
		return unknownType()
	}
	switch v := s.(type) {
	case bool:
		if v {
			return unknownType()
		}
		return prim("never")
	case *object:
		return c.schemaObject(v, depth)
	}
	return unknownType()
}

// schemaObject converts a schema object: what it says of the value itself
// (enum, const, type and the keywords of that type), intersected with its
// $ref and allOf, its anyOf union and its oneOf union.
func (c *converter) schemaObject(o *object, depth int) *tsType {
	var parts []*tsType
	if ref := o.str("$ref"); ref != "" {
		parts = append(parts, c.ref(ref, depth))
	}
	if base := c.base(o, depth); base != nil {
		parts = append(parts, base)
	}
	for _, s := range o.list("allOf") {
		parts = append(parts, c.value(s, depth+1))
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := o.get(key); ok {
			l, _ := alts.([]any)
			var members []*tsType
			for _, s := range l {
				members = append(members, c.value(s, depth+1))
			}
			if len(l) == 0 { // invalid schema: say nothing rather than never
				members = []*tsType{unknownType()}
			}
			parts = append(parts, union(members...))
		}
	}
	t := intersection(parts...)
	if nullable, _ := o.vals["nullable"].(bool); nullable { // OpenAPI 3.0
		t = union(t, prim("null"))
	}
	return t
}

// base converts enum, const or type; nil when the schema has none of them
// and nothing that implies a type.
func (c *converter) base(o *object, depth int) *tsType {
	if enum, ok := o.get("enum"); ok {
		l, isList := enum.([]any)
		if !isList {
			return unknownType()
		}
		var members []*tsType
		for _, v := range l {
			members = append(members, literal(v))
		}
		return union(members...)
	}
	if v, ok := o.get("const"); ok {
		return literal(v)
	}
	var types []string
	switch t := o.vals["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		for _, v := range t {
			s, _ := v.(string)
			types = append(types, s)
		}
		if len(types) == 0 {
			return unknownType()
		}
	case nil:
		if _, ok := o.vals["type"]; ok {
			return unknownType()
		}
		if has(o, "properties", "additionalProperties", "patternProperties") {
			types = []string{"object"}
		} else if has(o, "items", "prefixItems") {
			types = []string{"array"}
		} else {
			return nil
		}
	default:
		return unknownType()
	}
	var members []*tsType
	for _, name := range types {
		switch name {
		case "string", "boolean", "null", "number":
			members = append(members, prim(name))
		case "integer":
			members = append(members, prim("number"))
		case "object":
			members = append(members, c.objectType(o, depth))
		case "array":
			members = append(members, c.arrayType(o, depth))
		default:
			members = append(members, unknownType())
		}
	}
	return union(members...)
}

func has(o *object, keys ...string) bool {
	for _, k := range keys {
		if _, ok := o.vals[k]; ok {
			return true
		}
	}
	return false
}

// objectType converts the object keywords: properties in their order in
// the JSON text, required, additionalProperties and patternProperties.
func (c *converter) objectType(o *object, depth int) *tsType {
	t := &tsType{kind: kindObject}
	required := map[string]bool{}
	for _, r := range o.list("required") {
		if s, ok := r.(string); ok {
			required[s] = true
		}
	}
	props, _ := o.vals["properties"].(*object)
	if props != nil {
		for _, name := range props.keys {
			s := props.vals[name]
			p := property{name: name, optional: !required[name], typ: c.schema(s, depth+1)}
			if so, ok := s.(*object); ok {
				p.doc = propertyDoc(so)
			}
			if p.optional {
				t.optional++
			}
			t.props = append(t.props, p)
		}
	}

	// The index signature: additionalProperties and patternProperties.
	var index []*tsType
	additional, hasAdditional := o.get("additionalProperties")
	if hasAdditional {
		if b, ok := additional.(bool); !ok || b {
			index = append(index, c.value(additional, depth+1))
		}
	}
	if patterns, ok := o.vals["patternProperties"].(*object); ok {
		for _, k := range patterns.keys {
			index = append(index, c.value(patterns.vals[k], depth+1))
		}
	}
	if !hasAdditional && props == nil && len(index) == 0 {
		// {"type":"object"} alone says nothing about the keys.
		index = append(index, unknownType())
	}
	if len(index) == 0 {
		return t
	}
	idx := union(index...)
	if len(t.props) == 0 || idx.kind == kindUnknown {
		t.index = idx
		return t
	}
	// TypeScript requires every property to fit the index signature, which
	// a typed one need not: keep it apart.
	return intersection(t, &tsType{kind: kindObject, index: idx})
}

// arrayType converts items, and prefixItems (or items as a list, before
// draft 2020-12) as a tuple.
func (c *converter) arrayType(o *object, depth int) *tsType {
	prefix, rest := o.list("prefixItems"), any(nil)
	if _, ok := o.get("prefixItems"); ok {
		rest = o.vals["items"]
	} else if l, ok := o.vals["items"].([]any); ok {
		prefix, rest = l, o.vals["additionalItems"]
	} else {
		items, ok := o.get("items")
		if !ok {
			return &tsType{kind: kindArray, elem: unknownType()}
		}
		return &tsType{kind: kindArray, elem: c.value(items, depth+1)}
	}
	t := &tsType{kind: kindTuple}
	for _, s := range prefix {
		t.members = append(t.members, c.value(s, depth+1))
	}
	switch r := rest.(type) {
	case nil:
		t.elem = unknownType()
	case bool:
		if r {
			t.elem = unknownType()
		}
	default:
		t.elem = c.value(r, depth+1)
		if t.elem.kind == kindNever {
			t.elem = nil
		}
	}
	return t
}

// ref resolves a reference within the document (a JSON pointer fragment
// such as #/$defs/Name) inline. A reference elsewhere, one that does not
// resolve, or one already being expanded (a cycle) is unknown.
func (c *converter) ref(ref string, depth int) *tsType {
	target, ok := c.resolve(ref)
	if !ok {
		return unknownType()
	}
	o, isObject := target.(*object)
	if isObject {
		for _, open := range c.stack {
			if open == o {
				return unknownType()
			}
		}
		c.stack = append(c.stack, o)
		defer func() { c.stack = c.stack[:len(c.stack)-1] }()
	}
	return c.value(target, depth+1)
}

func (c *converter) resolve(ref string) (any, bool) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, false
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return nil, false
	}
	cur := c.root
	if frag == "" {
		return cur, true
	}
	tokens, ok := strings.CutPrefix(frag, "/")
	if !ok {
		return nil, false // an $anchor name: not supported
	}
	for _, tok := range strings.Split(tokens, "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch v := cur.(type) {
		case *object:
			next, ok := v.vals[tok]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			cur = v[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// literal is the literal type of an enum or const value; objects and
// arrays have none.
func literal(v any) *tsType {
	switch v.(type) {
	case nil:
		return prim("null")
	case string, json.Number, bool:
		return &tsType{kind: kindLiteral, text: jsonText(v)}
	}
	return unknownType()
}

// propertyDoc is the comment of a property: its description (or title),
// format and default, on one short line.
func propertyDoc(o *object) string {
	var parts []string
	desc := o.str("description")
	if desc == "" {
		desc = o.str("title")
	}
	if d := strings.Join(strings.Fields(desc), " "); d != "" {
		parts = append(parts, d)
	}
	if n := note(o); n != "" {
		parts = append(parts, n)
	}
	if d, _ := o.vals["deprecated"].(bool); d {
		parts = append(parts, "deprecated")
	}
	return oneLine(strings.Join(parts, "; "), maxDoc)
}

// note describes a schema's format and default.
func note(o *object) string {
	var parts []string
	if f := o.str("format"); f != "" {
		parts = append(parts, f)
	}
	if d, ok := o.get("default"); ok {
		parts = append(parts, "default: "+oneLine(jsonText(d), 40))
	}
	return oneLine(strings.Join(parts, ", "), maxDoc)
}

// jsonText encodes a parsed value back to compact JSON (valid JavaScript,
// string escapes included), keeping object key order.
func jsonText(v any) string {
	switch v := v.(type) {
	case *object:
		var b strings.Builder
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(quote(k) + ":" + jsonText(v.vals[k]))
		}
		b.WriteByte('}')
		return b.String()
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = jsonText(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case string:
		return quote(v)
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	}
	return "null"
}

// quote returns s as a JSON string literal, which is also a JavaScript one.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
