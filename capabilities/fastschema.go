package capabilities

import (
	"math"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
)

// flatObject is a compiled check of the commonest input schema: an object
// whose properties each have one primitive type (string, boolean, integer
// or number) and nothing else to check, with required properties and
// additional properties allowed or refused. The general validator
// (jsonschema-go) walks every schema by reflection and costs several
// microseconds a call, the largest part of the choke point for such a
// capability.
//
// It only ever says "valid" when the general validator would: a schema
// with any other keyword is not compiled (compileFlatObject returns nil),
// and arguments it does not pass go to the general validator, whose verdict
// and message stand (TestFlatObjectAgreesWithValidator compares the two).
type flatObject struct {
	props    map[string]flatType
	required []string
	closed   bool // additionalProperties: false
}

type flatType uint8

const (
	flatString flatType = iota + 1
	flatBoolean
	flatInteger
	flatNumber
)

var flatTypes = map[string]flatType{"string": flatString, "boolean": flatBoolean, "integer": flatInteger, "number": flatNumber}

// compileFlatObject compiles s, or returns nil when s uses anything the
// compiled check does not cover.
func compileFlatObject(s *jsonschema.Schema) *flatObject {
	if s == nil || s.Type != "object" {
		return nil
	}
	rest := *s
	rest.Type, rest.Title, rest.Description = "", "", ""
	rest.Properties, rest.Required, rest.AdditionalProperties = nil, nil, nil
	if !reflect.ValueOf(rest).IsZero() {
		return nil
	}
	f := &flatObject{props: make(map[string]flatType, len(s.Properties)), required: s.Required}
	if a := s.AdditionalProperties; a != nil {
		// Only false ({"not":{}}, as jsonschema-go reads it) is compiled.
		if a.Not == nil || !reflect.ValueOf(*a.Not).IsZero() {
			return nil
		}
		n := *a
		n.Not = nil
		if !reflect.ValueOf(n).IsZero() {
			return nil
		}
		f.closed = true
	}
	for name, p := range s.Properties {
		if p == nil {
			return nil
		}
		t, ok := flatTypes[p.Type]
		if !ok {
			return nil
		}
		rest := *p
		rest.Type, rest.Title, rest.Description = "", "", ""
		if !reflect.ValueOf(rest).IsZero() {
			return nil
		}
		f.props[name] = t
	}
	return f
}

// valid reports whether v, a value decoded by encoding/json into any, is
// an object that the schema accepts. False means "ask the general
// validator", not necessarily invalid.
func (f *flatObject) valid(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for name, x := range m {
		t, ok := f.props[name]
		if !ok {
			if f.closed {
				return false
			}
			continue
		}
		switch t {
		case flatString:
			_, ok = x.(string)
		case flatBoolean:
			_, ok = x.(bool)
		case flatNumber:
			_, ok = x.(float64)
		case flatInteger:
			var n float64
			if n, ok = x.(float64); ok {
				_, frac := math.Modf(n)
				ok = frac == 0
			}
		}
		if !ok {
			return false
		}
	}
	for _, name := range f.required {
		if _, ok := m[name]; !ok {
			return false
		}
	}
	return true
}
