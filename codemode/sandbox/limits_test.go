package sandbox

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

func TestLimitsWithDefaults(t *testing.T) {
	if got := (Limits{}).WithDefaults(); got != DefaultLimits() {
		t.Errorf("zero limits = %+v, want the defaults %+v", got, DefaultLimits())
	}
	l := Limits{Memory: 1, Timeout: -1, Stack: 1e9, HostCalls: 3}.WithDefaults()
	if l.Memory != 1 || l.Timeout != DefaultTimeout || l.Stack != MaxStack || l.HostCalls != 3 || l.Logs != DefaultLogs {
		t.Errorf("got %+v", l)
	}
}

// TestLimits runs a program that goes past each limit and checks that the
// run ends with a RunError naming it.
func TestLimits(t *testing.T) {
	small := Limits{Memory: 4 << 20, Timeout: short, HostCalls: 10, Result: 1000, Stack: 1000}
	// Filling memory or the stack takes time, more so on a loaded machine or
	// with the race detector: only the timeout tests get a short timeout.
	long := small
	long.Timeout = time.Minute
	for _, test := range []struct {
		name, code, limit, msg string
	}{
		{"memory: one huge string", `return "x".repeat(1e9).length`, LimitMemory, "the program ran out of memory (limit 4 MiB)"},
		{"memory: growing array", `const a = []; for (;;) a.push("x".repeat(1000) + a.length)`, LimitMemory, "ran out of memory"},
		{"memory: small objects", `const a = []; for (;;) a.push({i: a.length})`, LimitMemory, "ran out of memory"},
		{"memory: after an await", `await null; const a = []; for (;;) a.push(new Array(1000).fill(a.length))`, LimitMemory, "ran out of memory"},
		{"timeout: busy loop", `while (true) {}`, LimitTimeout, "the program ran longer than its time limit of 500ms"},
		{"timeout: busy loop after await", `await codemode.x({}); for (;;) {}`, LimitTimeout, "time limit"},
		{"timeout: endless jobs", `for (;;) await null`, LimitTimeout, "time limit"},
		{"timeout: loop in a finally", `try { for (;;) {} } finally { for (;;) {} }`, LimitTimeout, "time limit"},
		{"stack: recursion", `function f() { return f() + 1 } return f()`, LimitStack, "nested too deep (stack limit 1000 slots)"},
		{"stack: through built-ins", `function f() { [1].forEach(f) } f()`, LimitStack, "nested too deep"},
		{"stack: async recursion", `async function f() { await f() } await f()`, LimitStack, "nested too deep"},
		{"stack: eval of deep nesting", `return eval("[".repeat(1e5))`, LimitStack, "nested too deep"},
		{"result", `return "x".repeat(2000)`, LimitResult, "the program's result is too large: at least 2.0 KiB of JSON, over the limit of 1000 bytes"},
		{"result: non-ASCII", `return "é".repeat(600)`, LimitResult, "over the limit of 1000 bytes"},
		{"hostCalls", `for (;;) await codemode.x({})`, LimitHostCalls, "the program made more host calls (capabilities, fetch, storage and module lookups) than its limit of 10"},
		{"hostCalls: caught", `for (;;) { try { await codemode.x({}) } catch (e) {} }`, LimitHostCalls, "host calls"},
		{"hostCalls: caught with finally", `for (;;) { try { await storage.get("k") } catch (e) {} finally { continue } }`, LimitHostCalls, "host calls"},
		{"hostCalls: mixed", `for (let i = 0; ; i++) await [codemode.x, fetch, storage.get][i % 3]("k")`, LimitHostCalls, "host calls"},
	} {
		t.Run(test.name, func(t *testing.T) {
			l := long
			if test.limit == LimitTimeout {
				l = small
			}
			out := runCode(t, test.code, Program{Capabilities: []string{"x"}, Limits: l})
			wantErr(t, out, KindLimit, test.limit, test.msg)
			if test.limit == LimitHostCalls && out.HostCalls != small.HostCalls {
				t.Errorf("HostCalls = %d, want the limit %d", out.HostCalls, small.HostCalls)
			}
		})
	}
}

// TestCaughtLimitsStayBounded catches the engine's out-of-memory and stack
// overflow errors, which are catchable, and carries on: memory stays capped
// and the time limit still ends the run.
func TestCaughtLimitsStayBounded(t *testing.T) {
	for _, test := range []struct{ name, code string }{
		{"memory", `
			let hits = 0;
			for (;;) {
				let a = [];
				try { for (;;) a.push("x".repeat(1000) + a.length) } catch (e) { if (e === null || e.message === "out of memory") hits++ }
				a = null;
				if (hits > 3) console.log("still here after", hits);
			}`},
		{"stack", `
			function f() { f() }
			for (;;) { try { f() } catch (e) {} }`},
		{"caught then returned", `
			try { "x".repeat(1e9) } catch (e) { return e.message }`},
	} {
		t.Run(test.name, func(t *testing.T) {
			start := time.Now()
			out := runCode(t, test.code, Program{Limits: Limits{Memory: 2 << 20, Stack: 500, Timeout: 2 * short}})
			if test.name == "caught then returned" {
				wantResult(t, out, `"out of memory"`)
				return
			}
			wantErr(t, out, KindLimit, LimitTimeout, "time limit")
			if d := time.Since(start); d > 30*short {
				t.Errorf("the run took %v with a timeout of %v", d, short)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	out, err := Run(ctx, Program{Code: `for (;;) {}`, Host: &fakeHost{}})
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, out, KindCancelled, "", "cancelled")

	out, err = Run(ctx, Program{Code: `return 1`, Host: &fakeHost{}})
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, out, KindCancelled, "", "cancelled")
}

// TestHostCallAtDeadline has a host call still running when the time limit
// passes: its context is cancelled and the run ends with "timeout", even
// though the program would catch the error.
func TestHostCallAtDeadline(t *testing.T) {
	var callCtx context.Context
	host := &fakeHost{call: func(ctx context.Context, _ string, _ json.RawMessage) (json.RawMessage, error) {
		callCtx = ctx
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	// The deadline must pass during the call, not before it: the engine
	// under the race detector on a loaded machine takes more than 100 ms to
	// get there.
	timeout := 100 * time.Millisecond
	if raceEnabled {
		timeout = 2 * time.Second
	}
	out := runCode(t, `try { await codemode.slow({}) } catch (e) { return "caught" }`,
		Program{Capabilities: []string{"slow"}, Host: host, Limits: Limits{Timeout: timeout}})
	wantErr(t, out, KindLimit, LimitTimeout, "time limit")
	if callCtx == nil || callCtx.Err() == nil {
		t.Error("the host call's context was not cancelled")
	}
}

func TestNeverSettles(t *testing.T) {
	for _, code := range []string{
		`await new Promise(() => {})`,
		`await new Promise(resolve => { globalThis.later = resolve })`,
		`const never = new Promise(() => {}); await Promise.all([codemode.x({}), never])`,
	} {
		t.Run(code, func(t *testing.T) {
			out := runCode(t, code, Program{Capabilities: []string{"x"}, Limits: Limits{Timeout: 10 * time.Second}})
			wantErr(t, out, KindException, "", "the program's promise never settled")
			if out.Duration > 5*time.Second {
				t.Errorf("it took %v to see that the promise never settles", out.Duration)
			}
		})
	}
}

func TestLogsKeptOnFailure(t *testing.T) {
	out := runCode(t, `console.log("before"); throw new Error("after")`, Program{})
	wantErr(t, out, KindException, "", "after")
	if len(out.Logs) != 1 || out.Logs[0].Message != "before" {
		t.Errorf("logs = %+v", out.Logs)
	}
}

// TestNothingRunsAfterTheResult leaves jobs running when the program
// returns: they stop with it, rather than keep the run going.
func TestNothingRunsAfterTheResult(t *testing.T) {
	host := &fakeHost{}
	out := runCode(t, `
		(async () => { for (let i = 0; ; i++) { await null; console.log("tick " + i) } })();
		(async () => { for (let i = 0; i < 100; i++) await null; await codemode.x({}) })();
		return "done"`, Program{Capabilities: []string{"x"}, Host: host})
	wantResult(t, out, `"done"`)
	if len(out.Logs) > 10 {
		t.Fatalf("jobs went on after the program returned: %d logs", len(out.Logs))
	}
	if calls := host.recorded(); len(calls) != 0 {
		t.Fatalf("host calls after the program returned: %v", calls)
	}
}

// TestLongArrayLikes calls the engine's Array methods, which walk every
// index in one call without checking for interrupts, on lengths no array in
// the VM's memory can have: they throw at once instead of holding the run
// past its time limit.
func TestLongArrayLikes(t *testing.T) {
	for _, code := range []string{
		`return [].includes.call({length: 2 ** 53 - 1}, 1)`,
		`return new Array(2 ** 32 - 1).indexOf(1)`,
		`return new Array(1e8).join("")`,
		`return String(new Array(1e8))`,
		`return [].reverse.call({length: 1e15})`,
		`return [].copyWithin.call({length: 1e15}, 1)`,
		`return [].unshift.call({length: 2 ** 53 - 2}, 1)`,
		`return [].sort.call({length: 1e15})`,
		`return [].forEach.call({length: 1e15}, () => {})`,
		`return [].concat(new Array(1e8)).length`,
		`return [1].concat({length: 1e15, [Symbol.isConcatSpreadable]: true}).length`,
		`return Array.prototype.lastIndexOf.call({length: 1e15}, 1)`,
		`return [new Array(2 ** 32 - 1)].flat().length`,
		`return [1].flatMap(() => new Array(2 ** 32 - 1)).length`,
	} {
		t.Run(code, func(t *testing.T) {
			out := runCode(t, code, Program{Limits: Limits{Timeout: time.Minute}})
			wantErr(t, out, KindException, "", "RangeError: Array.prototype.")
			if out.Duration > 10*time.Second {
				t.Errorf("took %v", out.Duration)
			}
		})
	}
	t.Run("real arrays are untouched", func(t *testing.T) {
		out := runCode(t, `
			const a = Array.from({length: 100000}, (_, i) => i);
			const sparse = []; sparse[10] = 1;
			return [a.includes(99999), a.indexOf(5), [1, 2].concat([3], 4), [3, 1, 2].sort(), sparse.length,
				[1, [2, [3]]].flat(Infinity), [1, [2, [3]]].flat(), [1, 2].flatMap(x => [x, [x]]), [].includes.name, [].includes.length, "abc".split("").reverse().join("")]`,
			Program{Limits: Limits{Timeout: time.Minute}})
		wantResult(t, out, `[true,5,[1,2,3,4],[1,2,3],11,[1,2,3],[1,2,[3]],[1,[1],2,[2]],"includes",1,"cba"]`)
	})
}

// TestStuckEngine has the engine stuck where interrupts cannot reach it, in
// a Host call that ignores its context (or a built-in function that never
// checks for interrupts): Run returns soon after the deadline anyway, and
// the engine, counted by Stuck, goes on until it is done, holding its
// gate slot (Program.Release) until then.
func TestStuckEngine(t *testing.T) {
	defer func(g time.Duration) { stuckGrace = g }(stuckGrace)
	stuckGrace = 50 * time.Millisecond
	release := make(chan struct{})
	host := &fakeHost{call: func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
		<-release // ignores its context
		return nil, nil
	}}
	g := NewGate(1, 1, 10*time.Millisecond)
	slot, err := g.Acquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out := runCode(t, `await codemode.stubborn({}); for (;;) {}`,
		Program{Capabilities: []string{"stubborn"}, Host: host, Limits: Limits{Timeout: 300 * time.Millisecond}, Release: slot})
	wantErr(t, out, KindLimit, LimitTimeout, "in a built-in function that could not be stopped")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Run returned after %v", took)
	}
	if Stuck() != 1 {
		t.Errorf("Stuck() = %d, want 1", Stuck())
	}
	if _, err := g.Acquire(context.Background(), "k"); err == nil {
		t.Error("a gate gave the slot of the stuck engine")
	}

	close(release) // the engine returns to JS, is interrupted and closes its VM
	deadline := time.Now().Add(time.Minute)
	for Stuck() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stuck engine never finished")
		}
		time.Sleep(time.Millisecond)
	}
	if r, err := g.Acquire(context.Background(), "k"); err != nil {
		t.Errorf("the slot did not come back: %v", err)
	} else {
		r()
	}
}
