package capabilities

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// SchemaTag is the struct tag Define reads a field's constraints from, next
// to `json:"…"` (its name) and `jsonschema:"…"` (its description). The tag
// is a comma-separated list of key=value items:
//
//	enum=a|b|c           the value is one of these (for a slice: each item is)
//	minimum=1            numbers: the smallest value allowed (for a slice: of each item)
//	maximum=50           numbers: the largest value allowed (for a slice: of each item)
//	minLength=1          strings: the fewest characters (for a slice: of each item)
//	maxLength=200        strings: the most characters (for a slice: of each item)
//	minItems=1           slices: the fewest items
//	maxItems=20          slices: the most items
//	format=date-time     strings: a JSON Schema format (an annotation: not checked)
//	default=10           the value an absent field takes (the field must be optional)
//	pattern=^[a-z]+$     strings: a regular expression the value must match (Go syntax)
//
// Enum values are separated by "|" and are read as the field's type
// (strings, integers, numbers or booleans). A value cannot contain a comma,
// except pattern's: pattern runs to the end of the tag, so put it last.
const SchemaTag = "schema"

// schemaUse says which side of a capability a schema describes.
type schemaUse int

const (
	useInput schemaUse = iota
	useOutput
)

// typeSchemas are the schemas of types whose JSON is not what their Go
// shape suggests.
var typeSchemas = map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[json.RawMessage](): {},
	reflect.TypeFor[[]byte]():          {Type: "string", ContentEncoding: "base64"},
}

// InputSchema returns the object schema Define derives for an input type T
// (see Define for the rules). It is for code that builds a Capability by
// hand and wants the schema Define would write.
func InputSchema[T any]() (*jsonschema.Schema, error) {
	return deriveSchema(reflect.TypeFor[T](), useInput)
}

// OutputSchema returns the object schema Define derives for an output type
// T. Values of T should pass through NormalizeOutput before they are sent.
func OutputSchema[T any]() (*jsonschema.Schema, error) {
	return deriveSchema(reflect.TypeFor[T](), useOutput)
}

// schemaFor derives the schema of T as JSON.
func schemaFor[T any](use schemaUse) (json.RawMessage, error) {
	s, err := deriveSchema(reflect.TypeFor[T](), use)
	if err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

// deriveSchema infers an object schema for t and applies this package's
// rules: slices are arrays (never null), pointers are optional rather than
// nullable, and SchemaTag constraints are added.
func deriveSchema(t reflect.Type, use schemaUse) (*jsonschema.Schema, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s is not a struct", t)
	}
	s, err := jsonschema.ForType(t, &jsonschema.ForOptions{TypeSchemas: typeSchemas})
	if err != nil {
		return nil, err
	}
	if err := refine(s, t, use, "", false); err != nil {
		return nil, err
	}
	// A default or pattern that does not fit its field is a definition error.
	if _, err := s.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true}); err != nil {
		return nil, fmt.Errorf("a default does not match its field's schema: %w", err)
	}
	return s, nil
}

// refine walks s alongside the Go type it was inferred from. keepNull keeps
// the null of a pointer's schema (an output field a nil pointer is sent for).
func refine(s *jsonschema.Schema, t reflect.Type, use schemaUse, at string, keepNull bool) error {
	if s == nil {
		return nil
	}
	if t.Kind() == reflect.Pointer {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if !keepNull {
			dropNull(s)
		}
	}
	if ts, ok := typeSchemas[t]; ok {
		if ts.Type == "" && len(ts.Types) == 0 {
			s.Types = nil // any JSON value, null included: not "null" alone
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		// A nil slice is sent as [] (NormalizeOutput) and null is not an
		// argument worth inviting.
		dropNull(s)
		return refine(s.Items, t.Elem(), use, at+"[]", use == useOutput)
	case reflect.Map:
		return refine(s.AdditionalProperties, t.Elem(), use, at+"{}", use == useOutput)
	case reflect.Struct:
		if s.Properties == nil {
			return nil // a type with a schema of its own, such as time.Time
		}
		for _, f := range reflect.VisibleFields(t) {
			if f.Anonymous {
				continue
			}
			name, optional, ok := jsonField(f)
			if !ok {
				continue
			}
			p := s.Properties[name]
			if p == nil {
				continue
			}
			where := strings.TrimPrefix(at+"."+name, ".")
			keep := false
			if f.Type.Kind() == reflect.Pointer {
				if use == useInput {
					// The decoder leaves an absent field nil, as it does a
					// null one: a pointer field is optional.
					s.Required = slices.DeleteFunc(s.Required, func(r string) bool { return r == name })
				} else {
					// An output field without omitempty is sent as null
					// when nil: say so.
					keep = !optional
				}
			}
			if err := refine(p, f.Type, use, where, keep); err != nil {
				return err
			}
			if tag, ok := f.Tag.Lookup(SchemaTag); ok {
				if err := applyTag(p, f.Type, tag, slices.Contains(s.Required, name)); err != nil {
					return fmt.Errorf("field %s: %s tag: %w", where, SchemaTag, err)
				}
			}
		}
	}
	return nil
}

// jsonField is f's JSON name and whether it may be absent, as
// encoding/json and the schema inference read its tag.
func jsonField(f reflect.StructField) (name string, optional, ok bool) {
	if !f.IsExported() {
		return "", false, false
	}
	name = f.Name
	tag, has := f.Tag.Lookup("json")
	if !has {
		return name, false, true
	}
	n, rest, found := strings.Cut(tag, ",")
	if n == "-" && !found {
		return "", false, false
	}
	if n != "" {
		name = n
	}
	for o := range strings.SplitSeq(rest, ",") {
		if o == "omitempty" || o == "omitzero" {
			optional = true
		}
	}
	return name, optional, true
}

// dropNull removes "null" from a union of types.
func dropNull(s *jsonschema.Schema) {
	if len(s.Types) == 0 {
		return
	}
	types := slices.DeleteFunc(slices.Clone(s.Types), func(t string) bool { return t == "null" })
	switch len(types) {
	case 0:
		s.Types = nil
	case 1:
		s.Type, s.Types = types[0], nil
	default:
		s.Types = types
	}
}

// applyTag adds the constraints of a SchemaTag value to the schema p of a
// field of type ft.
func applyTag(p *jsonschema.Schema, ft reflect.Type, tag string, required bool) error {
	for ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	list := (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array) && typeSchemas[ft] == nil
	item := p
	if list {
		if item = p.Items; item == nil {
			return errors.New("the slice has no item schema")
		}
	}
	items, err := parseTag(tag)
	if err != nil {
		return err
	}
	for _, kv := range items {
		k, v := kv[0], kv[1]
		switch k {
		case "enum":
			var vals []any
			for e := range strings.SplitSeq(v, "|") {
				x, err := scalar(item, e)
				if err != nil {
					return fmt.Errorf("enum value %q: %w", e, err)
				}
				vals = append(vals, x)
			}
			item.Enum = vals
		case "minimum", "maximum":
			if item.Type != "integer" && item.Type != "number" {
				return fmt.Errorf("%s needs a number field", k)
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("%s: %q is not a number", k, v)
			}
			if k == "minimum" {
				item.Minimum = &f
			} else {
				item.Maximum = &f
			}
		case "minLength", "maxLength", "minItems", "maxItems":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("%s: %q is not a count", k, v)
			}
			switch k {
			case "minLength", "maxLength":
				if item.Type != "string" {
					return fmt.Errorf("%s needs a string field", k)
				}
				if k == "minLength" {
					item.MinLength = &n
				} else {
					item.MaxLength = &n
				}
			default:
				if !list {
					return fmt.Errorf("%s needs a slice field", k)
				}
				if k == "minItems" {
					p.MinItems = &n
				} else {
					p.MaxItems = &n
				}
			}
		case "pattern":
			if item.Type != "string" {
				return errors.New("pattern needs a string field")
			}
			if _, err := regexp.Compile(v); err != nil {
				return fmt.Errorf("pattern: %w", err)
			}
			item.Pattern = v
		case "format":
			if item.Type != "string" || v == "" {
				return errors.New("format needs a string field and a format name")
			}
			item.Format = v
		case "default":
			if required {
				return errors.New("a required field cannot have a default: add omitempty to its json tag")
			}
			if list {
				return errors.New("a slice field cannot have a default")
			}
			x, err := scalar(p, v)
			if err != nil {
				return fmt.Errorf("default %q: %w", v, err)
			}
			raw, err := json.Marshal(x)
			if err != nil {
				return err
			}
			p.Default = raw
		default:
			return fmt.Errorf("unknown key %q", k)
		}
	}
	return nil
}

// parseTag splits a SchemaTag value into key=value pairs.
func parseTag(tag string) ([][2]string, error) {
	var out [][2]string
	seen := map[string]bool{}
	for tag != "" {
		part := tag
		if i := strings.IndexByte(tag, ','); i >= 0 {
			part, tag = tag[:i], tag[i+1:]
		} else {
			tag = ""
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if k == "pattern" && ok {
			// The pattern takes the rest of the tag, commas and all.
			if tag != "" {
				v += "," + tag
			}
			tag = ""
		}
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want key=value", part)
		}
		if seen[k] {
			return nil, fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		out = append(out, [2]string{k, v})
	}
	if len(out) == 0 {
		return nil, errors.New("empty tag")
	}
	return out, nil
}

// scalar reads text as a value of s's type.
func scalar(s *jsonschema.Schema, text string) (any, error) {
	switch s.Type {
	case "string":
		return text, nil
	case "integer":
		return strconv.ParseInt(text, 10, 64)
	case "number":
		return strconv.ParseFloat(text, 64)
	case "boolean":
		return strconv.ParseBool(text)
	}
	return nil, fmt.Errorf("a field of type %q takes no such value", s.Type)
}

// applyDefaults sets every absent property of the objects in v (decoded
// JSON) that has a default in s, recursing into present objects and the
// items of present arrays. It reports whether it changed anything.
func applyDefaults(s *jsonschema.Schema, v any) bool {
	if s == nil {
		return false
	}
	changed := false
	switch v := v.(type) {
	case map[string]any:
		for name, p := range s.Properties {
			x, ok := v[name]
			if !ok || x == nil {
				if p.Default != nil {
					var d any
					if json.Unmarshal(p.Default, &d) == nil {
						v[name] = d
						changed = true
					}
				}
				continue
			}
			changed = applyDefaults(p, x) || changed
		}
	case []any:
		for _, x := range v {
			changed = applyDefaults(s.Items, x) || changed
		}
	}
	return changed
}

// hasDefaults reports whether any schema under s has a default.
func hasDefaults(s *jsonschema.Schema) bool {
	if s == nil {
		return false
	}
	if s.Default != nil {
		return true
	}
	for _, p := range s.Properties {
		if hasDefaults(p) {
			return true
		}
	}
	return hasDefaults(s.Items)
}

// NormalizeOutput returns v as Define sends a handler's output: every nil
// slice and nil map reachable from it (through struct fields, pointers,
// slices, maps and interfaces) replaced by an empty one, so that it
// encodes as [] or {} as the output schema says, never as null. v itself is
// not modified: what holds a replaced value is copied. Values of types
// with their own JSON or text encoding are left alone.
func NormalizeOutput[T any](v T) T {
	rv := reflect.ValueOf(&v).Elem()
	if !mayHoldNil(rv.Type()) {
		return v
	}
	if nv, changed := fillNil(rv); changed {
		return nv.Interface().(T)
	}
	return v
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	nilCache          sync.Map // reflect.Type → bool
)

// ownEncoding reports whether t encodes itself.
func ownEncoding(t reflect.Type) bool {
	if t.Implements(marshalerType) || t.Implements(textMarshalerType) {
		return true
	}
	pt := reflect.PointerTo(t)
	return pt.Implements(marshalerType) || pt.Implements(textMarshalerType)
}

// mayHoldNil reports whether a value of t may hold a nil slice or map that
// fillNil would replace.
func mayHoldNil(t reflect.Type) bool {
	if v, ok := nilCache.Load(t); ok {
		return v.(bool)
	}
	r := computeMayHoldNil(t, map[reflect.Type]bool{})
	nilCache.Store(t, r)
	return r
}

func computeMayHoldNil(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	if ownEncoding(t) {
		return false
	}
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Slice, reflect.Map:
		return true
	case reflect.Pointer, reflect.Array:
		return computeMayHoldNil(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.IsExported() || f.Anonymous {
				if computeMayHoldNil(f.Type, seen) {
					return true
				}
			}
		}
	}
	return false
}

// fillNil returns v with nil slices and maps replaced, and whether it
// replaced anything (when not, the returned value is v).
func fillNil(v reflect.Value) (reflect.Value, bool) {
	t := v.Type()
	if ownEncoding(t) {
		return v, false
	}
	switch t.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return v, false
		}
		inner, changed := fillNil(v.Elem())
		if !changed {
			return v, false
		}
		out := reflect.New(t).Elem()
		out.Set(inner)
		return out, true
	case reflect.Pointer:
		if v.IsNil() {
			return v, false
		}
		inner, changed := fillNil(v.Elem())
		if !changed {
			return v, false
		}
		p := reflect.New(t.Elem())
		p.Elem().Set(inner)
		return p, true
	case reflect.Slice:
		if v.IsNil() {
			return reflect.MakeSlice(t, 0, 0), true
		}
		if t.Elem().Kind() == reflect.Uint8 {
			return v, false
		}
		var out reflect.Value
		for i := range v.Len() {
			e, changed := fillNil(v.Index(i))
			if !changed {
				continue
			}
			if !out.IsValid() {
				out = reflect.MakeSlice(t, v.Len(), v.Len())
				reflect.Copy(out, v)
			}
			out.Index(i).Set(e)
		}
		if out.IsValid() {
			return out, true
		}
		return v, false
	case reflect.Map:
		if v.IsNil() {
			return reflect.MakeMap(t), true
		}
		var out reflect.Value
		it := v.MapRange()
		for it.Next() {
			e, changed := fillNil(it.Value())
			if !changed {
				continue
			}
			if !out.IsValid() {
				out = reflect.MakeMapWithSize(t, v.Len())
				for _, k := range v.MapKeys() {
					out.SetMapIndex(k, v.MapIndex(k))
				}
			}
			out.SetMapIndex(it.Key(), e)
		}
		if out.IsValid() {
			return out, true
		}
		return v, false
	case reflect.Array:
		var out reflect.Value
		for i := range v.Len() {
			e, changed := fillNil(v.Index(i))
			if !changed {
				continue
			}
			if !out.IsValid() {
				out = reflect.New(t).Elem()
				out.Set(v)
			}
			out.Index(i).Set(e)
		}
		if out.IsValid() {
			return out, true
		}
		return v, false
	case reflect.Struct:
		if !mayHoldNil(t) {
			return v, false
		}
		var out reflect.Value
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue // encoding/json skips it (an embedded unexported struct's fields are not settable here)
			}
			e, changed := fillNil(v.Field(i))
			if !changed {
				continue
			}
			if !out.IsValid() {
				out = reflect.New(t).Elem()
				out.Set(v)
			}
			out.Field(i).Set(e)
		}
		if out.IsValid() {
			return out, true
		}
		return v, false
	}
	return v, false
}
