package tsdecl

import (
	"regexp"
	"strings"
)

// tsType is a TypeScript type expression, built from a schema and then
// printed.
type tsType struct {
	kind    kind
	text    string     // kindPrim: the type's name; kindLiteral: the literal
	note    string     // an inline comment after the type
	elem    *tsType    // kindArray: the element; kindTuple: the rest element, nil for none
	members []*tsType  // kindUnion, kindIntersection: the members; kindTuple: the leading elements
	props   []property // kindObject
	index   *tsType    // kindObject: the index signature's value, nil for none
	// optional counts the optional props of a kindObject.
	optional int

	flat     string // the one-line rendering, once computed
	flatDone bool
	flatOK   bool // false when a property comment prevents one line
}

type kind int

const (
	kindUnknown kind = iota
	kindNever
	kindPrim
	kindLiteral
	kindArray
	kindTuple
	kindObject
	kindUnion
	kindIntersection
)

// property is one property of an object type.
type property struct {
	name     string
	optional bool
	doc      string // a one-line comment, already safe
	typ      *tsType
}

func unknownType() *tsType { return &tsType{kind: kindUnknown, text: "unknown"} }

func prim(name string) *tsType {
	if name == "never" {
		return &tsType{kind: kindNever, text: name}
	}
	return &tsType{kind: kindPrim, text: name}
}

func (t *tsType) clone() *tsType {
	c := *t
	c.flat, c.flatDone, c.flatOK = "", false, false
	return &c
}

// optionalArgument reports whether a function taking t may be called
// without it: t is unknown or an object without required properties.
func (t *tsType) optionalArgument() bool {
	switch t.kind {
	case kindUnknown:
		return true
	case kindObject:
		return t.optional == len(t.props)
	}
	return false
}

// union builds A | B | …: nested unions are flattened, never and
// duplicates dropped, null moved last; unknown absorbs everything.
func union(members ...*tsType) *tsType {
	var out, nulls []*tsType
	seen := map[string]bool{}
	var add func(m *tsType) bool
	add = func(m *tsType) bool {
		switch {
		case m.kind == kindUnknown:
			return false
		case m.kind == kindNever:
			return true
		case m.kind == kindUnion && m.note == "":
			for _, n := range m.members {
				if !add(n) {
					return false
				}
			}
			return true
		}
		key := render(m, 0)
		if seen[key] {
			return true
		}
		seen[key] = true
		if m.kind == kindPrim && m.text == "null" {
			nulls = append(nulls, m)
		} else {
			out = append(out, m)
		}
		return true
	}
	for _, m := range members {
		if !add(m) {
			return unknownType()
		}
	}
	out = append(out, nulls...)
	switch len(out) {
	case 0:
		return prim("never")
	case 1:
		return out[0]
	}
	return &tsType{kind: kindUnion, members: out}
}

// intersection builds A & B & …: nested intersections are flattened,
// unknown and duplicates dropped; never absorbs everything.
func intersection(members ...*tsType) *tsType {
	var out []*tsType
	seen := map[string]bool{}
	var add func(m *tsType) bool
	add = func(m *tsType) bool {
		switch {
		case m.kind == kindNever:
			return false
		case m.kind == kindUnknown:
			return true
		case m.kind == kindIntersection && m.note == "":
			for _, n := range m.members {
				if !add(n) {
					return false
				}
			}
			return true
		}
		key := render(m, 0)
		if !seen[key] {
			seen[key] = true
			out = append(out, m)
		}
		return true
	}
	for _, m := range members {
		if !add(m) {
			return prim("never")
		}
	}
	switch len(out) {
	case 0:
		return unknownType()
	case 1:
		return out[0]
	}
	return &tsType{kind: kindIntersection, members: out}
}

// maxFlat is the longest type kept on one line when it has objects to
// break over several.
const maxFlat = 80

// render prints t; level is the indentation of the line it starts on.
// Objects go on one line when the whole of t fits and no property has a
// comment.
func render(t *tsType, level int) string {
	if s, ok := t.oneLine(); ok && len(s) <= maxFlat {
		return s
	}
	return t.print(level, func(m *tsType, level int) string { return render(m, level) })
}

// oneLine prints t on one line, if nothing in it requires several.
func (t *tsType) oneLine() (string, bool) {
	if !t.flatDone {
		t.flatDone, t.flatOK = true, true
		if t.kind == kindObject {
			for _, p := range t.props {
				if p.doc != "" {
					t.flatOK = false
				}
			}
		}
		if t.flatOK {
			t.flat = t.print(-1, func(m *tsType, _ int) string {
				s, ok := m.oneLine()
				if !ok {
					t.flatOK = false
				}
				return s
			})
		}
	}
	return t.flat, t.flatOK
}

// print prints t, followed by its note, calling sub for its parts. A level
// below zero asks for one line.
func (t *tsType) print(level int, sub func(*tsType, int) string) string {
	s := t.printBare(level, sub)
	if t.note != "" {
		s += " /* " + t.note + " */"
	}
	return s
}

// printBare prints t without its note.
func (t *tsType) printBare(level int, sub func(*tsType, int) string) string {
	switch t.kind {
	case kindArray:
		e := sub(t.elem, level)
		if t.elem.note == "" && (t.elem.kind == kindPrim || t.elem.kind == kindLiteral ||
			t.elem.kind == kindUnknown || t.elem.kind == kindNever || t.elem.kind == kindArray) {
			return e + "[]"
		}
		return "Array<" + e + ">"
	case kindTuple:
		var parts []string
		for _, m := range t.members {
			parts = append(parts, sub(m, level))
		}
		if t.elem != nil {
			parts = append(parts, "..."+sub(&tsType{kind: kindArray, elem: t.elem}, level))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case kindUnion, kindIntersection:
		sep := " | "
		if t.kind == kindIntersection {
			sep = " & "
		}
		parts := make([]string, len(t.members))
		for i, m := range t.members {
			parts[i] = sub(m, level)
			if t.kind == kindIntersection && m.kind == kindUnion {
				parts[i] = "(" + parts[i] + ")"
			}
		}
		return strings.Join(parts, sep)
	case kindObject:
		return t.printObject(level, sub)
	}
	return t.text
}

// printObject prints an object type, on one line when level is below zero.
func (t *tsType) printObject(level int, sub func(*tsType, int) string) string {
	var members []string
	for _, p := range t.props {
		opt := ""
		if p.optional {
			opt = "?"
		}
		m := propertyName(p.name) + opt + ": " + sub(p.typ, level+1)
		if p.doc != "" && level >= 0 {
			m = "/** " + p.doc + " */\n" + indent(level+1) + m
		}
		members = append(members, m)
	}
	if t.index != nil {
		members = append(members, "[key: string]: "+sub(t.index, level+1))
	}
	if len(members) == 0 {
		return "{}"
	}
	if level < 0 {
		return "{ " + strings.Join(members, "; ") + " }"
	}
	var b strings.Builder
	b.WriteString("{\n")
	for _, m := range members {
		b.WriteString(indent(level+1) + m + ";\n")
	}
	b.WriteString(indent(level) + "}")
	return b.String()
}

var identifier = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// propertyName is name as a property or method name: quoted unless it is
// an identifier.
func propertyName(name string) string {
	if identifier.MatchString(name) {
		return name
	}
	return quote(name)
}
