package tsdecl

import (
	"encoding/json"
	"strings"
)

// Func is one function to declare.
type Func struct {
	Name        string          // a JS identifier (camelCase capability name); other names are quoted
	Description string          // becomes a JSDoc comment
	Input       json.RawMessage // JSON Schema of the single argument object; empty: no argument (`args?: {}`)
	Output      json.RawMessage // JSON Schema of the resolved value; empty: `unknown`
}

// Declare returns a TypeScript declaration of a constant named ns (a JS
// identifier; empty means "codemode") whose members are funcs, in order:
//
//	declare const codemode: {
//	  /** Lists the signed-in user's secrets. */
//	  secretList(args?: { limit?: number; cursor?: string }): Promise<{ ... }>;
//	};
//
// The argument is optional when the input schema requires no property.
func Declare(ns string, funcs []Func) string {
	if ns == "" {
		ns = "codemode"
	}
	var b strings.Builder
	b.WriteString("declare const ")
	b.WriteString(ns)
	b.WriteString(": {\n")
	for _, f := range funcs {
		writeDoc(&b, f.Description, 1)
		b.WriteString(indent(1))
		b.WriteString(propertyName(f.Name))
		b.WriteString(signature(f))
		b.WriteString(";\n")
	}
	b.WriteString("};\n")
	return b.String()
}

// signature renders `(args: In): Promise<Out>` for f, at indentation level 1.
func signature(f Func) string {
	in := &tsType{kind: kindObject}
	if len(f.Input) > 0 {
		in = convert(f.Input)
	}
	out := unknownType()
	if len(f.Output) > 0 {
		out = convert(f.Output)
	}
	arg := "args: "
	if in.optionalArgument() {
		arg = "args?: "
	}
	return "(" + arg + render(in, 1) + "): Promise<" + render(out, 1) + ">"
}

// Type renders one schema as a TypeScript type expression. Objects that do
// not fit on one line, or whose properties carry comments, span several
// lines indented by two spaces.
func Type(schema json.RawMessage) string {
	return render(convert(schema), 0)
}

// Globals declares the bindings the sandbox offers besides the capability
// namespace: fetch, storage and console.
const Globals = `declare function fetch(url: string, init?: { method?: string; headers?: Record<string, string>; body?: string }): Promise<{
  status: number;
  ok: boolean;
  url: string;
  headers: Record<string, string | string[]>;
  text(): Promise<string>;
  json(): Promise<any>;
}>;
/** A storage bucket: this run's own for execute (exec:<runId>), the package's for its exports and jobs (package:<name>). */
declare const storage: {
  get(key: string): Promise<any>;
  set(key: string, value: any): Promise<void>;
  delete(key: string): Promise<boolean>;
  list(opts?: { prefix?: string; cursor?: string; limit?: number }): Promise<{ keys: string[]; cursor?: string }>;
};
declare const console: {
  log(...args: any[]): void;
  info(...args: any[]): void;
  warn(...args: any[]): void;
  error(...args: any[]): void;
  debug(...args: any[]): void;
};
`

// writeDoc writes text as a JSDoc comment at the given indentation level:
// on one line when it has one line, else as a block. Nothing in text can
// end the comment early.
func writeDoc(b *strings.Builder, text string, level int) {
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		lines = append(lines, commentSafe(strings.TrimRight(l, " \t\r")))
	}
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	switch len(lines) {
	case 0:
		return
	case 1:
		b.WriteString(indent(level) + "/** " + strings.TrimSpace(lines[0]) + " */\n")
		return
	}
	b.WriteString(indent(level) + "/**\n")
	for _, l := range lines {
		if l == "" {
			b.WriteString(indent(level) + " *\n")
		} else {
			b.WriteString(indent(level) + " * " + l + "\n")
		}
	}
	b.WriteString(indent(level) + " */\n")
}

// commentSafe makes s safe inside a block comment: "*/" would end it, and
// the other line terminators JavaScript knows become spaces.
func commentSafe(s string) string {
	s = strings.ReplaceAll(s, "*/", `*\/`)
	return strings.NewReplacer("\r", " ", "\u2028", " ", "\u2029", " ").Replace(s)
}

// oneLine collapses s to one line of at most max runes, safe in a comment.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		s = strings.TrimRight(string(r[:max-1]), " ") + "…"
	}
	return commentSafe(s)
}

func indent(level int) string { return strings.Repeat("  ", level) }
