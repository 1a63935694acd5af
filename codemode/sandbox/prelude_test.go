package sandbox

import (
	"encoding/json"
	"strings"
	"testing"

	"modernc.org/quickjs"
)

// guardedMethods are the Array.prototype methods the prelude replaces.
var guardedMethods = []string{
	"concat", "copyWithin", "every", "fill", "filter", "forEach", "includes",
	"indexOf", "join", "lastIndexOf", "map", "reduce", "reduceRight", "reverse", "shift", "slice",
	"some", "sort", "splice", "toLocaleString", "toReversed", "toSorted", "toSpliced", "toString",
	"unshift", "with", "flat", "flatMap",
}

// TestGuardedMethods checks that the engine has every method the prelude
// guards, and that each guard looks like the method it stands for (name,
// length, native toString) and refuses a length no array can have.
func TestGuardedMethods(t *testing.T) {
	names, _ := json.Marshal(guardedMethods)
	probe := `return ` + string(names) + `.map(name => {
		const f = Array.prototype[name];
		return typeof f === "function" ? [f.name, f.length, String(f).includes("[native code]")] : null;
	})`

	vm, err := quickjs.NewVM()
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	engine, err := vm.Eval(`JSON.stringify((() => {`+probe+`})())`, quickjs.EvalGlobal)
	if err != nil {
		t.Fatal(err)
	}
	wantResult(t, runCode(t, probe, Program{}), engine.(string))
	if strings.Contains(engine.(string), "null") {
		t.Fatalf("the engine lacks a guarded method: %s for %s", engine, names)
	}

	for _, name := range guardedMethods {
		out := runCode(t, `return Array.prototype.`+name+`.call({length: 1e15}, () => {})`, Program{})
		wantErr(t, out, KindException, "", "RangeError: Array.prototype."+name+": length 1000000000000000 is over")
	}
}

// TestProgramForms runs programs as scripts (no static imports) and as
// modules: the same code behaves the same either way.
func TestProgramForms(t *testing.T) {
	t.Run("strict", func(t *testing.T) {
		for _, code := range []string{
			"return [(function () { return this })() === undefined, (() => { try { undeclared = 1; return 'sloppy' } catch (e) { return e.name } })()]",
			"import 'util';\nreturn [(function () { return this })() === undefined, (() => { try { undeclared = 1; return 'sloppy' } catch (e) { return e.name } })()]",
		} {
			wantResult(t, runCode(t, code, Program{Resolver: newResolver()}), `[true,"ReferenceError"]`)
		}
	})
	t.Run("import.meta", func(t *testing.T) {
		wantResult(t, runCode(t, `return typeof import.meta`, Program{}), `"object"`)
	})
	t.Run("stacks", func(t *testing.T) {
		const body = "function f() { throw new Error('deep') }\nconst g = () => f();\ng()"
		script := runCode(t, "\n"+body, Program{})
		module := runCode(t, "import 'util'\n"+body, Program{Resolver: newResolver()})
		const want = "    at f (<program>:2:31)\n    at g (<program>:3:18)\n    at (<program>:4:2)\n"
		for _, out := range []Outcome{script, module} {
			wantErr(t, out, KindException, "", "deep")
			if out.Err.Stack != want {
				t.Errorf("stack = %q, want %q", out.Err.Stack, want)
			}
		}
	})
	t.Run("dynamic import from a script", func(t *testing.T) {
		res := newResolver()
		out := runCode(t, `const m = await import("util"); try { await import("<sandbox>") } catch (e) { return [m.twice(2), e.message.endsWith("module not found: <sandbox>")] }`, Program{Resolver: res})
		wantResult(t, out, `[4,true]`)
		if asked := strings.Join(res.asked, "\n"); asked != " -> util\n -> <sandbox>" {
			t.Errorf("resolver was asked %q", asked)
		}
	})
}

// TestBridgeGoneBeforeModules: in a program that is a module, the bridge's
// global, which hands run to the driver, is gone before the first module
// of the program is evaluated.
func TestBridgeGoneBeforeModules(t *testing.T) {
	res := newResolver()
	res.modules["peek"] = `export const seen = [typeof globalThis.` + bridgeName + `, Object.getOwnPropertyNames(globalThis).includes("` + bridgeName + `")]`
	for _, p := range []Program{
		{Code: `import { seen } from "peek"; return [seen, typeof globalThis.` + bridgeName + `]`, Resolver: res},
		{Module: "peekEntry", Resolver: res},
	} {
		res.modules["peekEntry"] = `import { seen } from "peek"; export default () => [seen, typeof globalThis.` + bridgeName + `]`
		p.Host = &fakeHost{}
		out, err := Run(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		wantResult(t, out, `[["undefined",false],"undefined"]`)
	}
}

// TestGuardsUseCapturedBuiltins: the guards of TestGuardedMethods do not
// depend on what a program can replace: the global Object, or the array
// iterator. The lengths are over the limit for a VM of 1 MiB, and small
// enough for an unguarded call to return at once.
func TestGuardsUseCapturedBuiltins(t *testing.T) {
	for _, code := range []string{
		`globalThis.Object = () => ({length: 0}); return [].includes.call({length: 2 ** 20}, 1)`,
		`Array.prototype[Symbol.iterator] = function* () {}; return [1].concat({length: 2 ** 20, [Symbol.isConcatSpreadable]: true}).length`,
	} {
		out := runCode(t, code, Program{Limits: Limits{Memory: 1 << 20}})
		wantErr(t, out, KindException, "", "is over the sandbox's limit of 65536")
	}
}
