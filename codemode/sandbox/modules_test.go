package sandbox

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// recordingResolver is a mapResolver that records what it was asked.
type recordingResolver struct {
	mu      sync.Mutex
	modules map[string]string
	asked   []string // "referrer -> specifier"
}

func (r *recordingResolver) Resolve(_ context.Context, referrer, specifier string) (string, error) {
	r.mu.Lock()
	r.asked = append(r.asked, referrer+" -> "+specifier)
	r.mu.Unlock()
	switch specifier {
	case "forbidden":
		return "", &HostError{Code: "forbidden", Message: "package forbidden is not yours"}
	case "sneaky":
		return preludeModule, nil
	}
	name := strings.TrimPrefix(specifier, "./")
	if _, ok := r.modules[name]; !ok {
		return "", context.DeadlineExceeded // any Go error: never shown
	}
	return name, nil
}

func (r *recordingResolver) Load(_ context.Context, name string) (string, error) {
	return r.modules[name], nil
}

func newResolver() *recordingResolver {
	return &recordingResolver{modules: map[string]string{
		"math":   `import { twice } from "./util"; export const square = x => x * x; export const quad = x => twice(twice(x));`,
		"util":   `export function twice(x) { return 2 * x }`,
		"greet":  `export default async function (args) { return "hello " + args.name + " " + (await codemode.whoami({})).id }`,
		"tools":  `export const notAFunction = 1; export function sum(args) { return args === undefined ? "no args" : args.a + args.b }`,
		"broken": `export const x = ;`,
		"throws": `throw new TypeError("at import")`,
		"logger": `console.log("module body ran"); export default 1`,
	}}
}

func TestImports(t *testing.T) {
	for _, test := range []struct {
		name, code, want, asked string
	}{
		{
			"static imports",
			"import { square, quad } from \"math\";\nimport * as u from './util';\nreturn [square(3), quad(1), u.twice(5)]",
			`[9,4,10]`,
			" -> math\nmath -> ./util\n -> ./util",
		},
		{"dynamic import", `const m = await import("util"); return m.twice(4)`, `8`, " -> util"},
		{"a module's top level can log", `import x from "logger"; return x`, `1`, " -> logger"},
	} {
		t.Run(test.name, func(t *testing.T) {
			res := newResolver()
			out := runCode(t, test.code, Program{Resolver: res})
			wantResult(t, out, test.want)
			if asked := strings.Join(res.asked, "\n"); asked != test.asked {
				t.Errorf("resolver was asked %q, want %q", asked, test.asked)
			}
			if test.name == "a module's top level can log" && (len(out.Logs) != 1 || out.Logs[0].Message != "module body ran") {
				t.Errorf("logs = %+v", out.Logs)
			}
		})
	}
}

func TestImportErrors(t *testing.T) {
	for _, test := range []struct {
		name, code, kind, msg string
	}{
		{"not found", `import x from "nope"; return x`, KindException, "module not found: nope"},
		{"host error message", `import x from "forbidden"; return x`, KindException, "package forbidden is not yours"},
		{"the sandbox's own names", `import run from "sneaky"; return typeof run`, KindException, "module not found: sneaky"},
		{"the prelude by name", `import run from "<sandbox>"; return typeof run`, KindException, "module not found: <sandbox>"},
		{"dynamic, caught", `try { await import("nope") } catch (e) { throw new Error("caught: " + e.message) }`, KindException, "module not found: nope"},
		{"syntax error in a module", `import { x } from "broken"; return x`, KindSyntax, "syntax error in module broken at line 1, column 18"},
		{"module throws", `import "throws"; return 1`, KindException, "TypeError: at import"},
		{"missing export", `import { nothing } from "util"; return nothing`, KindSyntax, ""},
	} {
		t.Run(test.name, func(t *testing.T) {
			out := runCode(t, test.code, Program{Resolver: newResolver()})
			if test.name == "missing export" {
				// The engine reports it as a SyntaxError, with or without a
				// position: either way, a failed run that names the export.
				if out.Err == nil || !strings.Contains(out.Err.Message, "nothing") {
					t.Fatalf("got %s %+v", out.Result, out.Err)
				}
				return
			}
			wantErr(t, out, test.kind, "", test.msg)
			if strings.Contains(out.Err.Message, "DeadlineExceeded") || strings.Contains(out.Err.Message, "deadline") {
				t.Errorf("the Go error leaked: %q", out.Err.Message)
			}
		})
	}
}

func TestEntry(t *testing.T) {
	host := &fakeHost{call: func(_ context.Context, name string, _ json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"id":"u1"}`), nil
	}}
	for _, test := range []struct {
		name           string
		module, export string
		args           string
		want, msg      string
	}{
		{"default export", "greet", "", `{"name":"ada"}`, `"hello ada u1"`, ""},
		{"named export", "tools", "sum", `{"a":1,"b":2}`, `3`, ""},
		{"no args", "tools", "sum", ``, `"no args"`, ""},
		{"__proto__ in args stays data", "tools", "sum", `{"__proto__":{"a":1},"a":2,"b":3}`, `5`, ""},
		{"not a function", "tools", "notAFunction", ``, ``, "TypeError: module tools has no exported function notAFunction"},
		{"missing export", "tools", "nope", ``, ``, "has no exported function nope"},
		{"missing module", "nope", "", ``, ``, "module not found: nope"},
	} {
		t.Run(test.name, func(t *testing.T) {
			p := Program{Module: test.module, Export: test.export, Resolver: newResolver(), Host: host, Capabilities: []string{"whoami"}}
			if test.args != "" {
				p.Args = json.RawMessage(test.args)
			}
			out, err := Run(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if test.msg != "" {
				wantErr(t, out, KindException, "", test.msg)
				return
			}
			wantResult(t, out, test.want)
		})
	}
}

func TestImportsEnd(t *testing.T) {
	for _, test := range []struct {
		code string
		body string // what importsEnd leaves as the body
	}{
		{`return 1`, `return 1`},
		{`import x from "m"; return x`, ` return x`},
		{"import x from 'm'\nreturn x", "\nreturn x"},
		{`import "side-effect";import "other"`, ``},
		{`import * as ns from "m"; ns`, ` ns`},
		{`import d, { a, b as c } from "m"; a`, ` a`},
		{`import d, * as ns from "m"; d`, ` d`},
		{`import { "a-b" as ab } from "m"; ab`, ` ab`},
		{`import from from "m"; from`, ` from`},
		{`import { from } from "m"; from`, ` from`},
		{"// leading comment\n/* block */ import x from \"m\" // trailing\nx", " // trailing\nx"},
		{`import data from "./d.json" with { type: "json" }; data`, ` data`},
		{`import data from "./d.json" assert { type: "json" }; data`, ` data`},
		{"import {\n  a, // the a\n  b,\n} from \"m\";\na", "\na"},
		{`import x from "m\"q"; x`, ` x`},
		{`import("m")`, `import("m")`},
		{`import.meta.url`, `import.meta.url`},
		{`imported = 1`, `imported = 1`},
		{`const x = 1; import y from "m"`, `const x = 1; import y from "m"`},
		{`import x from "m"; import("n")`, ` import("n")`},
		{`import { a from "m"; a`, `import { a from "m"; a`},
		{`import x from "unterminated`, `import x from "unterminated`},
		{`import x from`, `import x from`},
		{`/* unterminated`, `/* unterminated`},
	} {
		t.Run(test.code, func(t *testing.T) {
			if body := test.code[importsEnd(test.code):]; body != test.body {
				t.Errorf("body = %q, want %q", body, test.body)
			}
		})
	}
}

func TestProgramPositions(t *testing.T) {
	p := newProgram("import a from 'a';  x")
	if p.line != 1 || p.column != 19 {
		t.Fatalf("opener at %d:%d, want 1:19", p.line, p.column)
	}
	n := len(programOpener)
	for _, test := range []struct{ line, column, wantLine, wantColumn int }{
		{1, 5, 1, 5},
		{1, 19 + n, 1, 19},
		{1, 21 + n, 1, 21},
		{1, 20, 1, 19},
		{2, 40, 2, 40},
	} {
		if l, c := p.position(test.line, test.column); l != test.wantLine || c != test.wantColumn {
			t.Errorf("position(%d, %d) = %d, %d, want %d, %d", test.line, test.column, l, c, test.wantLine, test.wantColumn)
		}
	}
}

// TestImportsCountAsHostCalls: each module lookup counts against
// Limits.HostCalls, once per specifier: repeating an import is free.
func TestImportsCountAsHostCalls(t *testing.T) {
	out := runCode(t, `for (let i = 0; ; i++) { try { await import("nope" + i) } catch (e) {} }`,
		Program{Resolver: newResolver(), Limits: Limits{HostCalls: 50}})
	wantErr(t, out, KindLimit, LimitHostCalls, "module lookups")
	if out.HostCalls != 50 {
		t.Errorf("HostCalls = %d, want 50", out.HostCalls)
	}

	res := newResolver()
	out = runCode(t, `for (let i = 0; i < 500; i++) { await import("util"); try { await import("nope") } catch (e) {} } return 1`,
		Program{Resolver: res, Limits: Limits{HostCalls: 50}})
	wantResult(t, out, `1`)
	if out.HostCalls != 3 || len(res.asked) != 2 { // resolve util, load util, resolve nope
		t.Errorf("HostCalls = %d, resolver asked %v", out.HostCalls, res.asked)
	}
}
