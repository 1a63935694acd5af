package capabilities

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
)

// dropNulls removes from the objects in v (decoded JSON) every optional
// property whose value is null although its schema does not allow null,
// or the empty string although its enum does not list it: either means
// the same as leaving the property out (clients, forms and models send
// both). It reports whether it removed anything.
func dropNulls(s *jsonschema.Schema, v any) bool {
	if s == nil {
		return false
	}
	changed := false
	switch v := v.(type) {
	case map[string]any:
		for name, x := range v {
			p := s.Properties[name]
			if p == nil {
				continue
			}
			if (x == nil && !allowsNull(p)) || (x == "" && len(p.Enum) > 0 && !slices.Contains(p.Enum, any(""))) {
				if !slices.Contains(s.Required, name) {
					delete(v, name)
					changed = true
				}
				continue
			}
			changed = dropNulls(p, x) || changed
		}
	case []any:
		for _, x := range v {
			changed = dropNulls(s.Items, x) || changed
		}
	}
	return changed
}

// allowsNull reports whether s may accept null: it names null among its
// types, or names no type at all.
func allowsNull(s *jsonschema.Schema) bool {
	if s.Type == "" && len(s.Types) == 0 {
		return true
	}
	return s.Type == "null" || slices.Contains(s.Types, "null")
}

// decodeTree decodes JSON keeping numbers as written.
func decodeTree(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// describeInvalid says, in a sentence a model can act on, why v does not
// match s; err is the validator's own answer, used when the schema holds
// something the explanation does not follow.
func describeInvalid(s *jsonschema.Schema, v any, err error) string {
	if msg, ok := explain(s, v, ""); ok {
		return msg
	}
	msg := err.Error()
	for strings.HasPrefix(msg, "validating ") {
		i := strings.Index(msg, ": ")
		if i < 0 {
			break
		}
		msg = msg[i+2:]
	}
	return msg
}

// explain finds the first place where v breaks one of the common keywords
// of s and describes it.
func explain(s *jsonschema.Schema, v any, at string) (string, bool) {
	if s == nil {
		return "", false
	}
	here := func(format string, args ...any) (string, bool) {
		msg := fmt.Sprintf(format, args...)
		if at == "" {
			return "the arguments " + msg, true
		}
		return at + " " + msg, true
	}
	types := s.Types
	if s.Type != "" {
		types = []string{s.Type}
	}
	if len(types) > 0 && !slices.ContainsFunc(types, func(t string) bool { return hasType(v, t) }) {
		var want []string
		for _, t := range types {
			want = append(want, article(t))
		}
		return here("must be %s (got %s)", strings.Join(want, " or "), jsonKind(v))
	}
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(e any) bool { return sameJSON(e, v) }) {
		var vals []string
		for _, e := range s.Enum {
			vals = append(vals, show(e))
		}
		if len(vals) == 1 {
			return here("must be %s (got %s)", vals[0], show(v))
		}
		return here("must be one of %s (got %s)", strings.Join(vals, ", "), show(v))
	}
	switch x := v.(type) {
	case float64:
		switch {
		case s.Minimum != nil && x < *s.Minimum:
			return here("must be at least %s (got %s)", num(*s.Minimum), num(x))
		case s.Maximum != nil && x > *s.Maximum:
			return here("must be at most %s (got %s)", num(*s.Maximum), num(x))
		case s.ExclusiveMinimum != nil && x <= *s.ExclusiveMinimum:
			return here("must be greater than %s (got %s)", num(*s.ExclusiveMinimum), num(x))
		case s.ExclusiveMaximum != nil && x >= *s.ExclusiveMaximum:
			return here("must be less than %s (got %s)", num(*s.ExclusiveMaximum), num(x))
		}
	case string:
		n := utf8.RuneCountInString(x)
		switch {
		case s.MinLength != nil && n < *s.MinLength:
			if *s.MinLength == 1 {
				return here("must not be empty")
			}
			return here("must be at least %d characters long (got %d)", *s.MinLength, n)
		case s.MaxLength != nil && n > *s.MaxLength:
			return here("must be at most %d characters long (got %d)", *s.MaxLength, n)
		}
		if s.Pattern != "" {
			if re, err := regexp.Compile(s.Pattern); err == nil && !re.MatchString(x) {
				return here("must match the pattern %s (got %s)", s.Pattern, show(x))
			}
		}
	case []any:
		switch {
		case s.MinItems != nil && len(x) < *s.MinItems:
			return here("must have at least %d items (got %d)", *s.MinItems, len(x))
		case s.MaxItems != nil && len(x) > *s.MaxItems:
			return here("must have at most %d items (got %d)", *s.MaxItems, len(x))
		}
		for i, e := range x {
			if msg, ok := explain(s.Items, e, fmt.Sprintf("%s[%d]", at, i)); ok {
				return msg, true
			}
		}
	case map[string]any:
		for _, r := range s.Required {
			if _, ok := x[r]; !ok {
				return join(at, r) + " is required", true
			}
		}
		if ap := s.AdditionalProperties; ap != nil && ap.Not != nil && len(s.PatternProperties) == 0 {
			var unknown []string
			for k := range x {
				if _, ok := s.Properties[k]; !ok {
					unknown = append(unknown, k)
				}
			}
			if len(unknown) > 0 {
				slices.Sort(unknown)
				known := make([]string, 0, len(s.Properties))
				for k := range s.Properties {
					known = append(known, k)
				}
				slices.Sort(known)
				what := "unknown argument"
				if at != "" {
					what = at + ": unknown property"
				}
				hint := ""
				if len(known) > 0 && len(known) <= 30 {
					hint = " (expected one of: " + strings.Join(known, ", ") + ")"
				}
				return fmt.Sprintf("%s %s%s", what, show(unknown[0]), hint), true
			}
		}
		names := make([]string, 0, len(x))
		for k := range x {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			if msg, ok := explain(s.Properties[k], x[k], join(at, k)); ok {
				return msg, true
			}
		}
	}
	return "", false
}

func join(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

// hasType reports whether v (decoded JSON) is of JSON Schema type t.
func hasType(v any, t string) bool {
	switch x := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case float64:
		return t == "number" || (t == "integer" && x == math.Trunc(x) && !math.IsInf(x, 0))
	case string:
		return t == "string"
	case []any:
		return t == "array"
	case map[string]any:
		return t == "object"
	}
	return false
}

func article(t string) string {
	switch t {
	case "integer", "array", "object":
		return "an " + t
	case "null":
		return "null"
	}
	return "a " + t
}

func jsonKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		if x == math.Trunc(x) {
			return "the integer " + num(x)
		}
		return "the number " + num(x)
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// sameJSON compares an enum value with decoded JSON.
func sameJSON(e, v any) bool {
	a, err1 := json.Marshal(e)
	b, err2 := json.Marshal(v)
	if err1 != nil || err2 != nil {
		return false
	}
	if x, ok := v.(float64); ok {
		if y, err := strconv.ParseFloat(string(a), 64); err == nil {
			return x == y
		}
	}
	return bytes.Equal(a, b)
}

// show writes a value as JSON, shortened when long.
func show(v any) string {
	if f, ok := v.(float64); ok {
		return num(f)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	const most = 60
	if s := string(b); utf8.RuneCountInString(s) > most {
		r := []rune(s)
		return string(r[:most-1]) + "…"
	}
	return string(b)
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
