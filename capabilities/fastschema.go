package capabilities

import (
	"bytes"
	"math"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/enclave-mcp/enclave/internal/jsonscan"
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

// validRaw reports whether args, raw JSON arguments, are an object that
// the schema accepts and that validateInput would hand on unchanged: it
// checks the bytes as they are, without decoding them into a map first.
// It says true only for the plainest arguments: an object whose keys are
// ASCII without escapes, every value a string, a number or true/false (no
// null, which validateInput may drop, no nested value), with no U+0000
// escape; a number counts as an integer only when written without a
// fraction or exponent, and only numbers without an exponent count at all
// (so none can overflow float64). It checks the JSON syntax of all it
// reads. False means "decode and ask valid", not necessarily invalid.
func (f *flatObject) validRaw(args []byte) bool {
	if len(f.required) > 64 || bytes.Contains(args, nulEscape) {
		return false
	}
	var seen uint64 // f.required[i] was given
	i := jsonscan.Space(args, 0)
	if i >= len(args) || args[i] != '{' {
		return false
	}
	i = jsonscan.Space(args, i+1)
	if i < len(args) && args[i] == '}' {
		i++
	} else {
		for {
			// A key.
			if i >= len(args) || args[i] != '"' {
				return false
			}
			start := i + 1
			j := start
			for ; j < len(args) && args[j] != '"'; j++ {
				if c := args[j]; c < 0x20 || c >= 0x80 || c == '\\' {
					return false
				}
			}
			if j >= len(args) {
				return false
			}
			key := args[start:j]
			i = jsonscan.Space(args, j+1)
			if i >= len(args) || args[i] != ':' {
				return false
			}
			i = jsonscan.Space(args, i+1)
			// Its value.
			t, known := f.props[string(key)]
			if !known && f.closed {
				return false
			}
			var kind flatType
			var integral bool
			if i, kind, integral = scanPrimitive(args, i); kind == 0 {
				return false
			}
			if known && !kindFits(t, kind, integral) {
				return false
			}
			for n, name := range f.required {
				if string(key) == name {
					seen |= 1 << n
				}
			}
			i = jsonscan.Space(args, i)
			if i >= len(args) {
				return false
			}
			if args[i] == '}' {
				i++
				break
			}
			if args[i] != ',' {
				return false
			}
			i = jsonscan.Space(args, i+1)
		}
	}
	if jsonscan.Space(args, i) != len(args) {
		return false
	}
	return seen == 1<<len(f.required)-1
}

// kindFits reports whether a value of kind fits a property of type t.
func kindFits(t, kind flatType, integral bool) bool {
	switch t {
	case flatNumber:
		return kind == flatInteger || kind == flatNumber
	case flatInteger:
		return kind == flatInteger || kind == flatNumber && integral
	}
	return kind == t
}

// scanPrimitive reads the JSON string, number (without exponent) or
// true/false at b[i:] and returns the index after it and its kind:
// flatString, flatBoolean, flatInteger (a number without a fraction),
// flatNumber (with one; integral when the fraction is all zeros), or 0
// when it is none of those or is not valid JSON.
func scanPrimitive(b []byte, i int) (next int, kind flatType, integral bool) {
	if i >= len(b) {
		return i, 0, false
	}
	switch c := b[i]; {
	case c == '"':
		end, _ := jsonscan.String(b, i)
		if end < 0 {
			return i, 0, false
		}
		return end, flatString, false
	case c == 't':
		if bytes.HasPrefix(b[i:], []byte("true")) {
			return i + 4, flatBoolean, false
		}
	case c == 'f':
		if bytes.HasPrefix(b[i:], []byte("false")) {
			return i + 5, flatBoolean, false
		}
	case c == '-' || c >= '0' && c <= '9':
		j := i
		if b[j] == '-' {
			j++
		}
		switch {
		case j < len(b) && b[j] == '0':
			j++
		case j < len(b) && b[j] >= '1' && b[j] <= '9':
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				j++
			}
		default:
			return j, 0, false
		}
		kind, integral = flatInteger, true
		if j < len(b) && b[j] == '.' {
			j++
			k := j
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				integral = integral && b[j] == '0'
				j++
			}
			if j == k {
				return j, 0, false
			}
			kind = flatNumber
		}
		// No exponent (it could overflow float64), and no number so long
		// that its digits alone could: encoding/json refuses those.
		if j < len(b) && (b[j] == 'e' || b[j] == 'E') || j-i > 300 {
			return j, 0, false
		}
		return j, kind, integral
	}
	return i, 0, false
}
