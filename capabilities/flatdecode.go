package capabilities

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"

	"github.com/enclave-mcp/enclave/internal/jsonscan"
)

// flatDecoder decodes the plainest arguments into a capability's input
// struct (Define's In) without encoding/json's two passes and reflection
// over its type: a struct whose fields are strings, booleans, integers or
// float64 (or pointers to them), named in plain ASCII, with no embedded
// field, no ",string" option and no type with its own decoding (nor
// json.Number, which encoding/json decodes by rules of its own). It decodes
// only an object whose keys are ASCII without escapes and each match a
// field exactly (or no field at all, even ignoring case: those are
// skipped, as encoding/json skips them); strings without escapes or bytes
// beyond ASCII; numbers without exponent, integers without fraction and
// within range. Anything else makes decode report false, and the caller
// decodes with json.Unmarshal, whose result and errors stand
// (flatdecode_test.go compares the two).
type flatDecoder struct {
	fields map[string]flatField
}

type flatField struct {
	index int
	kind  reflect.Kind
	ptr   bool         // the field is *T
	elem  reflect.Type // T
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonNumber      = reflect.TypeFor[json.Number]()
)

// compileFlatDecoder returns the decoder for struct type t, or nil when t
// is not that plain.
func compileFlatDecoder(t reflect.Type) *flatDecoder {
	if t.Kind() != reflect.Struct || t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil
	}
	d := &flatDecoder{fields: map[string]flatField{}}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			return nil
		}
		if !f.IsExported() {
			continue // encoding/json ignores it too
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		for o := range strings.SplitSeq(opts, ",") {
			if o != "" && o != "omitempty" && o != "omitzero" {
				return nil
			}
		}
		if name == "" {
			name = f.Name
		}
		if name == "-" || !plainName(name) {
			return nil // a field encoding/json skips, or a name it may read otherwise
		}
		ft, ptr := f.Type, false
		if ft.Kind() == reflect.Pointer {
			ft, ptr = ft.Elem(), true
		}
		if ft.Implements(jsonUnmarshaler) || reflect.PointerTo(ft).Implements(jsonUnmarshaler) ||
			ft.Implements(textUnmarshaler) || reflect.PointerTo(ft).Implements(textUnmarshaler) {
			return nil
		}
		if ft == jsonNumber {
			// A string without a decoding of its own, yet encoding/json
			// refuses a string for it that is not a number literal (and
			// reads a number into it).
			return nil
		}
		switch ft.Kind() {
		case reflect.String, reflect.Bool, reflect.Float64,
			reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			return nil
		}
		for other := range d.fields {
			if strings.EqualFold(other, name) {
				return nil // encoding/json's rules for such names are its own
			}
		}
		d.fields[name] = flatField{index: i, kind: ft.Kind(), ptr: ptr, elem: ft}
	}
	return d
}

// plainName reports whether a field's JSON name is letters, digits, '_'
// or '-' in ASCII.
func plainName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// decode decodes args into v (a zero struct of the compiled type) and
// reports whether it could; on false, v is to be zeroed and decoded by
// json.Unmarshal.
func (d *flatDecoder) decode(args []byte, v reflect.Value) bool {
	i := jsonscan.Space(args, 0)
	if i >= len(args) || args[i] != '{' {
		return false
	}
	i = jsonscan.Space(args, i+1)
	if i < len(args) && args[i] == '}' {
		return jsonscan.Space(args, i+1) == len(args)
	}
	for {
		if i >= len(args) || args[i] != '"' {
			return false
		}
		j := i + 1
		for ; j < len(args) && args[j] != '"'; j++ {
			if c := args[j]; c < 0x20 || c >= 0x7f || c == '\\' {
				return false
			}
		}
		if j >= len(args) {
			return false
		}
		key := args[i+1 : j]
		i = jsonscan.Space(args, j+1)
		if i >= len(args) || args[i] != ':' {
			return false
		}
		i = jsonscan.Space(args, i+1)
		next, kind, _ := scanPrimitive(args, i)
		if kind == 0 {
			return false
		}
		if f, ok := d.fields[string(key)]; ok {
			if !f.set(v.Field(f.index), args[i:next], kind) {
				return false
			}
		} else if d.folds(key) {
			return false // encoding/json would match it to a field ignoring case
		}
		i = jsonscan.Space(args, next)
		if i >= len(args) {
			return false
		}
		switch args[i] {
		case '}':
			return jsonscan.Space(args, i+1) == len(args)
		case ',':
			i = jsonscan.Space(args, i+1)
		default:
			return false
		}
	}
}

// folds reports whether key names a field when case is ignored.
func (d *flatDecoder) folds(key []byte) bool {
	for name := range d.fields {
		if bytes.EqualFold(key, []byte(name)) {
			return true
		}
	}
	return false
}

// set stores raw, a JSON value of kind (as scanPrimitive found it), in
// fv, reporting false when it is not one set takes.
func (f flatField) set(fv reflect.Value, raw []byte, kind flatType) bool {
	target := fv
	if f.ptr {
		target = reflect.New(f.elem).Elem()
	}
	switch f.kind {
	case reflect.String:
		if kind != flatString {
			return false
		}
		s := raw[1 : len(raw)-1]
		for _, c := range s {
			if c == '\\' || c >= 0x80 {
				return false
			}
		}
		target.SetString(string(s))
	case reflect.Bool:
		if kind != flatBoolean {
			return false
		}
		target.SetBool(raw[0] == 't')
	case reflect.Float64:
		if kind != flatInteger && kind != flatNumber {
			return false
		}
		n, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return false
		}
		target.SetFloat(n)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := smallInt(raw, kind)
		if !ok || target.OverflowInt(n) {
			return false
		}
		target.SetInt(n)
	default: // the unsigned kinds
		n, ok := smallInt(raw, kind)
		if !ok || raw[0] == '-' || target.OverflowUint(uint64(n)) { // encoding/json refuses even -0
			return false
		}
		target.SetUint(uint64(n))
	}
	if f.ptr {
		fv.Set(target.Addr())
	}
	return true
}

// smallInt reads raw, a JSON number without fraction (kind flatInteger)
// of at most 18 digits, which no int64 overflows.
func smallInt(raw []byte, kind flatType) (int64, bool) {
	if kind != flatInteger {
		return 0, false
	}
	neg := raw[0] == '-'
	if neg {
		raw = raw[1:]
	}
	if len(raw) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range raw {
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
