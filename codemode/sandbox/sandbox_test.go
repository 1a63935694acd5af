package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMisuse(t *testing.T) {
	host := &fakeHost{}
	for _, test := range []struct {
		name string
		p    Program
	}{
		{"nil host", Program{Code: "return 1"}},
		{"both", Program{Code: "return 1", Module: "m", Resolver: mapResolver{}, Host: host}},
		{"neither", Program{Host: host}},
		{"export with code", Program{Code: "return 1", Export: "f", Host: host}},
		{"module without resolver", Program{Module: "m", Host: host}},
		{"invalid args", Program{Module: "m", Args: json.RawMessage("{"), Resolver: mapResolver{}, Host: host}},
		{"empty capability", Program{Code: "return 1", Capabilities: []string{""}, Host: host}},
	} {
		t.Run(test.name, func(t *testing.T) {
			if _, err := Run(context.Background(), test.p); err == nil {
				t.Fatal("no error for a misused Run")
			}
		})
	}
}

func TestResult(t *testing.T) {
	for _, test := range []struct{ code, want string }{
		{`return 1 + 1`, `2`},
		{`return "é\u2028"`, `"é\u2028"`},
		{`return {a: [1, null, true], b: {c: "d"}}`, `{"a":[1,null,true],"b":{"c":"d"}}`},
		{`// only a comment`, `null`},
		{`return`, `null`},
		{`return undefined`, `null`},
		{`return () => 1`, `null`},
		{`return [undefined, () => 1]`, `[null,null]`},
		{`return Promise.resolve(7)`, `7`},
		{`return await (async () => { await null; return "later" })()`, `"later"`},
		{`return {toJSON() { return "custom" }}`, `"custom"`},
		{`return NaN`, `null`},
		{`JSON.stringify = () => "tampered"; return {a: 1}`, `{"a":1}`},
	} {
		t.Run(test.code, func(t *testing.T) {
			wantResult(t, runCode(t, test.code, Program{}), test.want)
		})
	}
}

func TestResultNotJSON(t *testing.T) {
	for _, test := range []struct{ code, msg string }{
		{`return 10n`, "the program's result cannot be encoded as JSON: TypeError: Do not know how to serialize a BigInt"},
		{`const o = {}; o.self = o; return o`, "the program's result cannot be encoded as JSON: TypeError: circular reference"},
		{`return {toJSON() { throw new Error("no") }}`, "the program's result cannot be encoded as JSON: no"},
	} {
		t.Run(test.code, func(t *testing.T) {
			wantErr(t, runCode(t, test.code, Program{}), KindException, "", test.msg)
		})
	}
}

func TestFreshVMPerRun(t *testing.T) {
	wantResult(t, runCode(t, `globalThis.leftover = 42; Object.prototype.polluted = 1; return 1`, Program{}), `1`)
	wantResult(t, runCode(t, `return [typeof leftover, typeof ({}).polluted]`, Program{}), `["undefined","undefined"]`)
}

func TestConcurrentRunsAreIsolated(t *testing.T) {
	const runs = 4
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			// Each run sets its own global, calls the host in between (so
			// that the runs interleave) and checks that the global is still
			// its own and that no other run's is there.
			code := fmt.Sprintf(`
				globalThis.mine = %d;
				for (let i = 0; i < 20; i++) await codemode.tick({});
				const others = Object.getOwnPropertyNames(globalThis).filter(n => n.startsWith("run"));
				globalThis["run%d"] = true;
				return [mine, others];`, i, i)
			out, err := Run(context.Background(), Program{Code: code, Capabilities: []string{"tick"}, Host: &fakeHost{}})
			if err != nil {
				t.Error(err)
				return
			}
			if out.Err != nil || !jsonEqual(out.Result, fmt.Sprintf(`[%d,[]]`, i)) {
				t.Errorf("run %d: %s %+v", i, out.Result, out.Err)
			}
		})
	}
	wg.Wait()
}

func TestNoAmbientAuthority(t *testing.T) {
	for _, name := range []string{
		"std", "os", "setTimeout", "setInterval", "setImmediate", "queueMicrotask", "require", "process",
		"print", "scriptArgs", "Deno", "Bun", "XMLHttpRequest", "WebSocket", "module", "exports", bridgeName,
	} {
		t.Run(name, func(t *testing.T) {
			wantResult(t, runCode(t, "return typeof globalThis."+name+" + typeof "+name, Program{}), `"undefinedundefined"`)
		})
	}
	t.Run("eval stays in the VM", func(t *testing.T) {
		wantResult(t, runCode(t, `return [eval("1 + 1"), new Function("return typeof std")()]`, Program{}), `[2,"undefined"]`)
	})
	t.Run("Atomics.wait cannot block", func(t *testing.T) {
		out := runCode(t, `Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0)`, Program{Limits: Limits{Timeout: short}})
		wantErr(t, out, KindException, "", "cannot block")
	})
	for _, code := range []string{
		`import x from "anything"; return x`,
		`import "./local.js"`,
		`return await import("anything")`,
		`return await eval('import("anything")')`,
	} {
		t.Run(code, func(t *testing.T) {
			wantErr(t, runCode(t, code, Program{}), KindException, "", "imports are not available")
		})
	}
}

func TestCodemode(t *testing.T) {
	host := &fakeHost{call: func(_ context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
		switch name {
		case "denied":
			return nil, &HostError{Code: "forbidden", Message: "not for you"}
		case "broken":
			return nil, errors.New("database password is hunter2")
		case "garbage":
			return json.RawMessage("{not json"), nil
		case "empty":
			return nil, nil
		}
		return json.RawMessage(`{"echo":` + string(args) + `}`), nil
	}}
	caps := []string{"echo", "denied", "broken", "garbage", "empty", "users.list"}
	for _, test := range []struct{ code, want, call string }{
		{`return await codemode.echo({a: 1})`, `{"echo":{"a":1}}`, `call echo {"a":1}`},
		{`return await codemode.echo()`, `{"echo":{}}`, `call echo {}`},
		{`return await codemode.echo([1, "two"])`, `{"echo":[1,"two"]}`, `call echo [1,"two"]`},
		{`return await codemode["users.list"]({})`, `{"echo":{}}`, `call users.list {}`},
		{`return await codemode.empty({})`, `null`, `call empty {}`},
		{`return [typeof codemode.other, typeof codemode.toString, Object.keys(codemode).length]`, `["undefined","undefined",6]`, ``},
		{`try { await codemode.denied({}) } catch (e) { return [e instanceof Error, e.code, e.message] }`, `[true,"forbidden","not for you"]`, `call denied {}`},
		{`try { await codemode.broken({}) } catch (e) { return [e.code, e.message] }`, `["internal","internal error"]`, `call broken {}`},
		{`try { await codemode.garbage({}) } catch (e) { return [e.code, e.message] }`, `["internal","internal error"]`, `call garbage {}`},
		{`try { await codemode.echo({n: 1n}) } catch (e) { return e.name }`, `"TypeError"`, ``},
		{`try { await codemode.echo(() => 1) } catch (e) { return e.message }`, `"the arguments of codemode.echo cannot be encoded as JSON"`, ``},
		{`try { codemode.extra = 1 } catch (e) { return e.name }`, `"TypeError"`, ``},
		// codemode is made lazily (a Proxy), and behaves as a read-only
		// object with exactly these names.
		{`return [Object.keys(codemode).join(), Object.getPrototypeOf(codemode), "echo" in codemode, "toString" in codemode, codemode.echo === codemode.echo, codemode.echo.name]`,
			`["echo,denied,broken,garbage,empty,users.list",null,true,false,true,"echo"]`, ``},
		{`const d = Object.getOwnPropertyDescriptor(codemode, "empty"); return [typeof d.value, d.writable, d.enumerable, d.value === codemode.empty, Object.getOwnPropertyDescriptor(codemode, "nope")]`, `["function",false,true,true,null]`, ``},
		{`const {echo} = codemode; return await echo({x: 1})`, `{"echo":{"x":1}}`, `call echo {"x":1}`},
		{`for (const k in codemode) if (k === "empty") return await codemode[k]({})`, `null`, `call empty {}`},
		{`try { codemode.echo = () => 1 } catch (e) { return [e.name, typeof codemode.echo({})] }`, `["TypeError","object"]`, `call echo {}`},
		{`try { delete codemode.echo } catch (e) { return [e.name, "echo" in codemode] }`, `["TypeError",true]`, ``},
		{`try { Object.defineProperty(codemode, "other", {value: 1}) } catch (e) { return [e.name, codemode.other] }`, `["TypeError",null]`, ``},
		{`try { Object.setPrototypeOf(codemode, {toString() { return "x" }}) } catch (e) { return [e.name, typeof codemode.toString] }`, `["TypeError","undefined"]`, ``},
		{`try { Object.preventExtensions(codemode) } catch (e) { return [e.name, Object.keys(codemode).length] }`, `["TypeError",6]`, ``},
	} {
		t.Run(test.code, func(t *testing.T) {
			host.calls = nil
			out := runCode(t, test.code, Program{Capabilities: caps, Host: host})
			wantResult(t, out, test.want)
			calls := strings.Join(host.recorded(), "\n")
			if calls != test.call {
				t.Fatalf("host calls = %q, want %q", calls, test.call)
			}
		})
	}
	t.Run("uncaught host error", func(t *testing.T) {
		out := runCode(t, `await codemode.denied({})`, Program{Capabilities: caps, Host: host})
		wantErr(t, out, KindException, "", "not for you")
	})
}

func TestFetch(t *testing.T) {
	host := &fakeHost{fetch: func(_ context.Context, req json.RawMessage) (json.RawMessage, error) {
		var r struct{ URL string }
		json.Unmarshal(req, &r)
		switch r.URL {
		case "https://bin.example/":
			return json.RawMessage(`{"status":201,"url":"https://bin.example/","headers":{"set-cookie":["a=1","b=2"]},"body":"aGVsbG8g/w==","bodyEncoding":"base64"}`), nil
		case "https://fail.example/":
			return nil, &HostError{Code: "blocked", Message: "host not allowed"}
		case "https://404.example/":
			return json.RawMessage(`{"status":404,"url":"https://404.example/","body":"nope"}`), nil
		}
		return json.RawMessage(`{"status":200,"url":"` + r.URL + `","headers":{"content-type":"application/json"},"body":"{\"ok\":true}"}`), nil
	}}
	for _, test := range []struct{ code, want, request string }{
		{
			`const r = await fetch("https://api.example/x"); return [r.status, r.ok, r.url, r.headers, await r.json(), await r.text()]`,
			`[200,true,"https://api.example/x",{"content-type":"application/json"},{"ok":true},"{\"ok\":true}"]`,
			`fetch {"url":"https://api.example/x"}`,
		},
		{
			`const r = await fetch("https://api.example/y", {method: "post", headers: {"X-A": 1}, body: JSON.stringify({a: 1})}); return r.status`,
			`200`,
			`fetch {"url":"https://api.example/y","method":"POST","headers":{"X-A":"1"},"body":"{\"a\":1}"}`,
		},
		{
			`await fetch("https://api.example/z", {headers: [["a", "b"]]}); return null`,
			`null`,
			`fetch {"url":"https://api.example/z","headers":{"a":"b"}}`,
		},
		{
			`const r = await fetch("https://bin.example/"); return [r.status, r.headers, await r.text()]`,
			`[201,{"set-cookie":["a=1","b=2"]},"hello \ufffd"]`,
			`fetch {"url":"https://bin.example/"}`,
		},
		{
			`const r = await fetch("https://404.example/"); return [r.ok, r.headers, await r.text()]`,
			`[false,{},"nope"]`,
			`fetch {"url":"https://404.example/"}`,
		},
		{
			`try { await fetch("https://fail.example/") } catch (e) { return [e.code, e.message] }`,
			`["blocked","host not allowed"]`,
			`fetch {"url":"https://fail.example/"}`,
		},
		{
			`try { await fetch("https://api.example/", {method: "POST", body: {a: 1}}) } catch (e) { return e.name }`,
			`"TypeError"`,
			``,
		},
	} {
		t.Run(test.code, func(t *testing.T) {
			host.calls = nil
			wantResult(t, runCode(t, test.code, Program{Host: host}), test.want)
			if calls := strings.Join(host.recorded(), "\n"); calls != test.request {
				t.Fatalf("host calls = %q, want %q", calls, test.request)
			}
		})
	}
}

func TestStorage(t *testing.T) {
	host := &fakeHost{storage: func(_ context.Context, op string, args json.RawMessage) (json.RawMessage, error) {
		if op == "get" && strings.Contains(string(args), "missing") {
			return nil, &HostError{Code: "not_found", Message: "no such key"}
		}
		return json.RawMessage(`{"op":"` + op + `"}`), nil
	}}
	for _, test := range []struct{ code, want, call string }{
		{`return await storage.get("k")`, `{"op":"get"}`, `storage get {"key":"k"}`},
		{`return await storage.set("k", {v: [1]})`, `{"op":"set"}`, `storage set {"key":"k","value":{"v":[1]}}`},
		{`return await storage.delete("k")`, `{"op":"delete"}`, `storage delete {"key":"k"}`},
		{`return await storage.list({prefix: "a/", cursor: "c", limit: 10})`, `{"op":"list"}`, `storage list {"prefix":"a/","cursor":"c","limit":10}`},
		{`return await storage.list()`, `{"op":"list"}`, `storage list {}`},
		{`try { await storage.get("missing") } catch (e) { return e.code }`, `"not_found"`, `storage get {"key":"missing"}`},
		{`try { await storage.get(1) } catch (e) { return e.message }`, `"storage.get: key must be a string"`, ``},
		{`try { await storage.set("k") } catch (e) { return e.message }`, `"the value of storage.set cannot be encoded as JSON"`, ``},
	} {
		t.Run(test.code, func(t *testing.T) {
			host.calls = nil
			wantResult(t, runCode(t, test.code, Program{Host: host}), test.want)
			if calls := strings.Join(host.recorded(), "\n"); calls != test.call {
				t.Fatalf("host calls = %q, want %q", calls, test.call)
			}
		})
	}
}

func TestConsole(t *testing.T) {
	out := runCode(t, `
		console.log("plain", 1, true, null, undefined, {a: [1]}, [2], 3n);
		console.info("info");
		console.warn("warn");
		console.error(new TypeError("bad"));
		console.debug(() => 1, function named() {}, Symbol("s"));
		const cyclic = {}; cyclic.self = cyclic;
		console.log(cyclic);
		return 1`, Program{})
	wantResult(t, out, `1`)
	want := []Log{
		{Level: "log", Message: `plain 1 true null undefined {"a":[1]} [2] 3n`},
		{Level: "info", Message: "info"},
		{Level: "warn", Message: "warn"},
		{Level: "error", Message: "TypeError: bad\n    at (<program>:5:30)\n"},
		{Level: "debug", Message: "[Function] [Function: named] Symbol(s)"},
		{Level: "log", Message: "[object Object]"},
	}
	if len(out.Logs) != len(want) {
		t.Fatalf("logs = %+v, want %+v", out.Logs, want)
	}
	for i, l := range out.Logs {
		if l.Level != want[i].Level || l.Message != want[i].Message || l.At.IsZero() {
			t.Errorf("log %d = %+v, want %+v", i, l, want[i])
		}
	}
	if out.HostCalls != 0 || out.LogsTruncated {
		t.Errorf("host calls %d, truncated %v: console is neither", out.HostCalls, out.LogsTruncated)
	}
}

func TestLogsLimit(t *testing.T) {
	const limit = 100
	for _, test := range []struct {
		name, code string
		kept       int // bytes of messages kept
		truncated  bool
	}{
		{"within", `console.log("x".repeat(98))`, 98, false},
		{"exactly", `console.log("x".repeat(49)); console.log("x".repeat(49))`, 98, false},
		{"one huge entry", `console.log("é".repeat(1e6))`, 98, true},
		{"many entries", `for (let i = 0; i < 1e4; i++) console.log("entry " + i)`, 0, true},
		{"many empty entries", `for (let i = 0; i < 1e4; i++) console.log()`, 0, true},
		{"full, then more", `console.log("x".repeat(99)); console.log("y")`, 99, true},
	} {
		t.Run(test.name, func(t *testing.T) {
			out := runCode(t, test.code+"; return 1", Program{Limits: Limits{Logs: limit}})
			wantResult(t, out, `1`)
			n := 0
			for _, l := range out.Logs {
				n += len(l.Message) + 1
			}
			if n > limit {
				t.Fatalf("kept %d bytes of logs, over the limit of %d", n, limit)
			}
			if test.kept > 0 && n-len(out.Logs) != test.kept {
				t.Errorf("kept %d bytes of messages, want %d", n-len(out.Logs), test.kept)
			}
			if out.LogsTruncated != test.truncated {
				t.Errorf("LogsTruncated = %v, want %v", out.LogsTruncated, test.truncated)
			}
		})
	}
}

func TestExceptions(t *testing.T) {
	for _, test := range []struct {
		code, msg, stack string
	}{
		{"throw new Error(\"x\")", "x", "    at (<program>:1:16)\n"},
		{"\n\n  throw new TypeError(\"bad type\")", "TypeError: bad type", "<program>:3:"},
		{"function f() { throw new Error('deep') }\nfunction g() { f() }\ng()", "deep", "    at f (<program>:1:31)\n    at g (<program>:2:17)\n    at (<program>:3:2)\n"},
		{"await null; throw new RangeError('later')", "RangeError: later", "<program>:1:"},
		{"throw 'a string'", "a string", ""},
		{"throw {code: 1}", `{"code":1}`, ""},
		{"throw 'null'", "null", ""},
		{"throw undefined", "undefined", ""},
		{"throw new Error()", "uncaught Error with no message", ""},
		{"throw ''", "the program threw an exception with no message", ""},
		{"class MyError extends Error { constructor(m) { super(m); this.name = 'MyError' } }\nthrow new MyError('mine')", "MyError: mine", "<program>:2:"},
		{"null.x", "TypeError: cannot read property 'x' of null", "<program>:1:"},
		{"undefinedThing()", "ReferenceError: 'undefinedThing' is not defined", "<program>:1:"},
	} {
		t.Run(test.code, func(t *testing.T) {
			out := runCode(t, test.code, Program{})
			wantErr(t, out, KindException, "", test.msg)
			if out.Err.Message != test.msg {
				t.Errorf("message = %q, want %q", out.Err.Message, test.msg)
			}
			if !strings.Contains(out.Err.Stack, test.stack) || strings.Contains(out.Err.Stack, preludeModule) || strings.Contains(out.Err.Stack, driverModule) {
				t.Errorf("stack = %q, want it to contain %q and nothing of the sandbox", out.Err.Stack, test.stack)
			}
		})
	}
}

// TestThrowNull pins a quirk: the engine throws null when it runs out of
// memory while making its "out of memory" error, so an uncaught null is
// reported as the memory limit, also when the program threw it itself.
func TestThrowNull(t *testing.T) {
	wantErr(t, runCode(t, "throw null", Program{}), KindLimit, LimitMemory, "ran out of memory")
	wantErr(t, runCode(t, "await null; throw null", Program{}), KindLimit, LimitMemory, "ran out of memory")
}

func TestSyntaxErrors(t *testing.T) {
	for _, test := range []struct {
		code         string
		line, column int
		msg          string
	}{
		{"let x = ;", 1, 9, "syntax error at line 1, column 9: unexpected token in expression: ';'"},
		{"const a = 1;\nconst b = 2;\nb c", 3, 3, "syntax error at line 3, column 3"},
		{"return 1;\nimport x from 'y'", 2, 8, "(static imports must come first, before any other statement)"},
		{"import a from 'a'; let é = ;", 1, 28, "syntax error at line 1, column 28"},
		{"import a from 'a'\nlet z = ;", 2, 9, "syntax error at line 2, column 9"},
		{"if (true) {", 1, 0, "syntax error at the end of the program"},
	} {
		t.Run(test.code, func(t *testing.T) {
			out := runCode(t, test.code, Program{Resolver: mapResolver{"a": "export default 1"}})
			wantErr(t, out, KindSyntax, "", test.msg)
			if out.Err.Line != test.line || out.Err.Column != test.column {
				t.Errorf("at %d:%d, want %d:%d", out.Err.Line, out.Err.Column, test.line, test.column)
			}
		})
	}
}

func TestPanics(t *testing.T) {
	host := &fakeHost{call: func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
		panic("host bug")
	}}
	t.Run("host", func(t *testing.T) {
		out := runCode(t, `try { await codemode.x({}) } catch (e) { return "caught" } finally { return "finally" }`, Program{Capabilities: []string{"x"}, Host: host})
		wantErr(t, out, KindInternal, "", "internal error")
		if out.Err.Unwrap() == nil || !strings.Contains(out.Err.Unwrap().Error(), "host bug") {
			t.Errorf("cause = %v, want the panic", out.Err.Unwrap())
		}
	})
	t.Run("resolver", func(t *testing.T) {
		out := runCode(t, `import x from "m"; return x`, Program{Resolver: panicResolver{}})
		wantErr(t, out, KindInternal, "", "internal error")
	})
	t.Run("the process goes on", func(t *testing.T) {
		wantResult(t, runCode(t, `return 1`, Program{}), `1`)
	})
}

type panicResolver struct{}

func (panicResolver) Resolve(context.Context, string, string) (string, error) { panic("resolver bug") }
func (panicResolver) Load(context.Context, string) (string, error)            { panic("resolver bug") }

// TestErrorsAreBounded: what a program throws is cut, so that an error is no
// way around Limits.Result.
func TestErrorsAreBounded(t *testing.T) {
	for _, code := range []string{
		`throw new Error("x".repeat(4 << 20))`,
		`throw "é".repeat(4 << 20)`,
		`const e = new Error("x"); e.stack = "y".repeat(4 << 20); throw e`,
		`import x from "` + strings.Repeat("m", 100000) + `"`,
	} {
		out := runCode(t, code, Program{Resolver: newResolver(), Limits: Limits{Timeout: time.Minute}})
		if out.Err == nil || len(out.Err.Message) > maxMessage || len(out.Err.Stack) > maxMessage {
			t.Errorf("%.40s: %d bytes of message, %d of stack", code, len(out.Err.Message), len(out.Err.Stack))
		}
	}
}

// TestCapabilityNamesOnce checks that a name given twice is bound once.
func TestCapabilityNamesOnce(t *testing.T) {
	out := runCode(t, `return Object.keys(codemode)`, Program{Capabilities: []string{"b", "a", "b"}, Host: &fakeHost{}})
	wantResult(t, out, `["a","b"]`)
}
