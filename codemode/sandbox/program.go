package sandbox

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Names of the modules the sandbox makes itself. They are resolved only
// when the driver (the module "<eval>") imports them; the program asking
// for them goes to its Resolver like any other import.
const (
	driverModule  = "<eval>"    // the name the engine gives the code Go evaluates
	preludeModule = "<sandbox>" // the file name of the prelude, and the module that hands its run to the driver
	programModule = "<program>" // Program.Code, wrapped in a function
	entryModule   = "<entry>"   // stands for Program.Module
)

// programOpener and programCloser wrap the body of Program.Code in the
// default export of the module "<program>". The opener goes in just after
// the static imports, on the same line, so the program's lines keep their
// numbers; only the columns after it on that one line move (see position).
// Its semicolon ends an import that has none.
const (
	programOpener = ";export default async function () {"
	programCloser = "\n}\n"
)

// scriptOpener and scriptCloser make the body of a Program.Code without
// static imports into a script whose value is the body as a function, named
// "default" like the module's: a script costs less to evaluate than the
// modules the other way needs. Go evaluates it in strict mode, as module
// code is, under the engine's name "<eval>".
const (
	scriptOpener = "({default: async function () {"
	scriptCloser = "\n}}).default"
)

// program is Program.Code made into the module "<program>", or a script.
type program struct {
	source string
	// module tells which: a module when the code has static imports (or
	// uses import.meta, which only modules have).
	module bool
	// file is the name the engine gives source in stack traces and errors:
	// programModule or driverModule.
	file   string
	opener string
	// line and column (1-based, in characters as the engine counts them) of
	// the point where opener was inserted.
	line, column int
	code         string
}

func newProgram(code string) program {
	at := importsEnd(code)
	if at == 0 && !hasImportMeta(code) {
		return program{
			source: scriptOpener + code + scriptCloser,
			file:   driverModule,
			opener: scriptOpener,
			line:   1,
			column: 1,
			code:   code,
		}
	}
	before := code[:at]
	line := 1 + strings.Count(before, "\n")
	column := 1 + utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:])
	return program{
		source: before + programOpener + code[at:] + programCloser,
		module: true,
		file:   programModule,
		opener: programOpener,
		line:   line,
		column: column,
		code:   code,
	}
}

// hasImportMeta reports whether code may use import.meta: "import" followed
// by a dot, after spaces maybe. Comments in between are taken for not, and
// fail as a syntax error.
func hasImportMeta(code string) bool {
	for {
		i := strings.Index(code, "import")
		if i < 0 {
			return false
		}
		code = strings.TrimLeft(code[i+len("import"):], " \t\r\n")
		if strings.HasPrefix(code, ".") {
			return true
		}
	}
}

// position maps a line and column the engine reported in the program's
// source to the same place in the program's own code.
func (p *program) position(line, column int) (int, int) {
	if line != p.line || column < p.column {
		return line, column
	}
	n := len(p.opener)
	if column < p.column+n {
		return line, p.column // inside the opener: the start of the body
	}
	return line, column - n
}

var (
	modulePosition = regexp.MustCompile(regexp.QuoteMeta(programModule) + `:(\d+):(\d+)`)
	scriptPosition = regexp.MustCompile(regexp.QuoteMeta(driverModule) + `:(\d+):(\d+)`)
)

// fixStack rewrites a JS stack for the program's author (see fixFrames).
func (p *program) fixStack(stack string) string {
	stack = strings.TrimSpace(p.fixFrames(stack))
	if stack == "" {
		return ""
	}
	return "    " + stack + "\n"
}

// fixFrames rewrites the stack frames in text, as an Error's stack or a
// console message showing one: the sandbox's own frames go (the prelude's,
// and the driver's if there is one), positions in the program's source are
// mapped back to the code and shown in "<program>", and the frame of the
// wrapper function, named "default", is shown as the program's. Other lines
// stay.
func (p *program) fixFrames(text string) string {
	if !strings.Contains(text, "    at ") {
		return text
	}
	lines := strings.Split(text, "\n")
	out := lines[:0]
	for _, line := range lines {
		if !strings.HasPrefix(strings.TrimSpace(line), "at ") {
			out = append(out, line)
			continue
		}
		if strings.Contains(line, preludeModule) || (p == nil || p.module) && strings.Contains(line, driverModule) {
			continue
		}
		if p != nil {
			position := modulePosition
			if !p.module {
				position = scriptPosition
			}
			line = strings.Replace(line, "at default ("+p.file, "at ("+p.file, 1)
			line = position.ReplaceAllStringFunc(line, func(s string) string {
				m := position.FindStringSubmatch(s)
				n, _ := strconv.Atoi(m[1])
				column, _ := strconv.Atoi(m[2])
				n, column = p.position(n, column)
				return programModule + ":" + strconv.Itoa(n) + ":" + strconv.Itoa(column)
			})
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// lineText returns line n (1-based) of the program's code.
func (p *program) lineText(n int) string {
	lines := strings.Split(p.code, "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return lines[n-1]
}

// importsEnd returns the offset in code just after the static import
// declarations at its very top, where the body of the program starts.
//
// It is a small lexer, not a parser: it knows whitespace, comments, string
// literals, braces and the few words of an import declaration. Whatever it
// does not recognise ends the imports there, and is left to the engine,
// which then reports it as a syntax error at the right line.
func importsEnd(code string) int {
	s := &lexer{src: code}
	end := 0
	for {
		s.skipSpace()
		if !s.word("import") {
			return end
		}
		s.skipSpace()
		if c := s.peek(); c == '(' || c == '.' {
			return end // import(...) or import.meta: an expression
		}
		if !s.importRest() {
			return end
		}
		end = s.pos
	}
}

type lexer struct {
	src string
	pos int
}

func (s *lexer) peek() byte {
	if s.pos < len(s.src) {
		return s.src[s.pos]
	}
	return 0
}

// skipSpace skips whitespace and comments.
func (s *lexer) skipSpace() {
	for s.pos < len(s.src) {
		switch rest := s.src[s.pos:]; {
		case rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\n' || rest[0] == '\r' || rest[0] == '\f' || rest[0] == '\v':
			s.pos++
		case strings.HasPrefix(rest, "\u00a0"), strings.HasPrefix(rest, "\ufeff"), strings.HasPrefix(rest, "\u2028"), strings.HasPrefix(rest, "\u2029"):
			_, n := utf8.DecodeRuneInString(rest)
			s.pos += n
		case strings.HasPrefix(rest, "//"):
			if i := strings.IndexByte(rest, '\n'); i >= 0 {
				s.pos += i
			} else {
				s.pos = len(s.src)
			}
		case strings.HasPrefix(rest, "/*"):
			i := strings.Index(rest[2:], "*/")
			if i < 0 {
				return // unterminated: the engine reports it
			}
			s.pos += 2 + i + 2
		default:
			return
		}
	}
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// word consumes w if it is the next whole word.
func (s *lexer) word(w string) bool {
	if !strings.HasPrefix(s.src[s.pos:], w) {
		return false
	}
	if end := s.pos + len(w); end < len(s.src) && isIdentByte(s.src[end]) {
		return false
	}
	s.pos += len(w)
	return true
}

// ident consumes an identifier and returns it, or "" when there is none.
func (s *lexer) ident() string {
	start := s.pos
	for s.pos < len(s.src) && isIdentByte(s.src[s.pos]) {
		s.pos++
	}
	return s.src[start:s.pos]
}

// str consumes a string literal.
func (s *lexer) str() bool {
	quote := s.peek()
	if quote != '"' && quote != '\'' {
		return false
	}
	for i := s.pos + 1; i < len(s.src); i++ {
		switch s.src[i] {
		case '\\':
			i++
		case '\n', '\r':
			return false
		case quote:
			s.pos = i + 1
			return true
		}
	}
	return false
}

// importRest consumes what follows "import" in a declaration: the import
// clause, if any, the module specifier, import attributes and the semicolon.
func (s *lexer) importRest() bool {
	if !s.str() && !s.importClause() {
		return false
	}
	// with { type: "json" } (or the older assert { ... })
	save := s.pos
	s.skipSpace()
	if s.word("with") || s.word("assert") {
		s.skipSpace()
		if !s.braces() {
			return false
		}
	} else {
		s.pos = save
	}
	save = s.pos
	s.skipSpace()
	if s.peek() == ';' {
		s.pos++
	} else {
		s.pos = save
	}
	return true
}

// importClause consumes `x`, `* as ns`, `{ a, b as c }` and their
// combinations, then `from "specifier"`.
func (s *lexer) importClause() bool {
	depth := 0
	for {
		s.skipSpace()
		switch c := s.peek(); {
		case c == 0:
			return false
		case c == '{':
			depth++
			s.pos++
		case c == '}':
			depth--
			s.pos++
		case c == ',' || c == '*':
			s.pos++
		case c == '"' || c == '\'':
			if depth == 0 || !s.str() { // a string name, as in { "a-b" as ab }
				return false
			}
		case isIdentByte(c):
			if s.ident() == "from" && depth == 0 {
				s.skipSpace()
				if s.str() {
					return true
				}
				// `from` was a binding name, as in `import from from "m"`.
			}
		default:
			return false
		}
		if depth < 0 {
			return false
		}
	}
}

// braces consumes a balanced { ... }, strings included.
func (s *lexer) braces() bool {
	if s.peek() != '{' {
		return false
	}
	depth := 0
	for s.pos < len(s.src) {
		s.skipSpace()
		switch s.peek() {
		case '{':
			depth++
			s.pos++
		case '}':
			depth--
			s.pos++
			if depth == 0 {
				return true
			}
		case '"', '\'':
			if !s.str() {
				return false
			}
		case 0:
			return false
		default:
			s.pos++
		}
	}
	return false
}
