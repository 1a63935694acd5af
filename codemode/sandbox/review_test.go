package sandbox

// Security review tests (code mode). Each one fails while the weakness it
// names is present.

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestReviewOneUserFillsTheDefaultGate: with the default bounds on a
// 2-CPU host (total 2×GOMAXPROCS = 4, per user 4), one user's four runs
// take every slot of the process, and every other user's run waits and is
// refused as busy: the per-user bound protects no one. Combined with the
// engines TestReviewNativeLoopOutlivesTimeout leaves running, those slots
// are not given back.
func TestReviewOneUserFillsTheDefaultGate(t *testing.T) {
	prev := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(prev)
	g := NewGate(0, 0, 100*time.Millisecond) // the defaults codemode.New uses, with a short wait
	for i := 0; i < 4; i++ {
		release, err := g.Acquire(context.Background(), "mallory")
		if err != nil {
			t.Logf("mallory's run %d: %v (the per-user bound holds)", i, err)
			return
		}
		defer release()
	}
	release, err := g.Acquire(context.Background(), "alice")
	if err != nil {
		var busy *BusyError
		if errors.As(err, &busy) {
			t.Fatalf("alice is refused (%v) because mallory alone holds every slot of the process", err)
		}
		t.Fatal(err)
	}
	release()
}

// countingResolver counts Resolve calls and finds nothing, like a resolver
// asked for packages that do not exist (codemode's does one or two SQL
// queries for each).
type countingResolver struct{ n atomic.Int64 }

func (c *countingResolver) Resolve(context.Context, string, string) (string, error) {
	c.n.Add(1)
	return "", &HostError{Code: "not_found", Message: "module not found"}
}

func (c *countingResolver) Load(context.Context, string) (string, error) {
	return "", errors.New("unreachable")
}

// TestReviewDynamicImportsEscapeTheHostCallLimit: execute code may call
// import() (only saved packages are checked for it), and every import goes
// to the Resolver - in codemode an SQL lookup per specifier, uncached when
// it fails - without counting against Limits.HostCalls. A run limited to
// 100 host calls makes thousands of lookups.
func TestReviewDynamicImportsEscapeTheHostCallLimit(t *testing.T) {
	res := &countingResolver{}
	out := runCode(t, `let failed = 0;
		for (let i = 0; i < 3000; i++) { try { await import("pkg:nope" + i) } catch (e) { failed++ } }
		return failed`, Program{Resolver: res, Limits: Limits{HostCalls: 100, Timeout: 20 * time.Second}})
	if n := res.n.Load(); n > 100 {
		t.Fatalf("a run limited to 100 host calls made %d resolver lookups (outcome %s %+v)", n, out.Result, out.Err)
	}
}

// TestReviewThrownMessageBypassesResultLimit: the result is bounded
// (Limits.Result, 1 MiB), but the message of an uncaught error is passed
// to Go and returned whole: a program returns megabytes through it. See
// codemode's TestReviewErrorMessageIsUnbounded for what that costs the
// server.
func TestReviewThrownMessageBypassesResultLimit(t *testing.T) {
	out := runCode(t, `throw new Error("x".repeat(4 << 20))`, Program{Limits: Limits{Result: 1 << 20, Timeout: 30 * time.Second}})
	if out.Err == nil {
		t.Fatalf("the program succeeded: %s", out.Result)
	}
	if out.Err.Kind != KindException {
		t.Fatalf("the run did not end with the exception it threw: %+v", out.Err)
	}
	if n := len(out.Err.Message) + len(out.Err.Stack); n > 1<<20 {
		t.Fatalf("a failed run carries %d bytes of error message, past the 1 MiB result limit", n)
	}
}

// TestReviewStuckEnginesPoisonTheGate: an engine that cannot be stopped
// (see TestReviewNativeLoopOutlivesTimeout) keeps a core busy after Run
// returns. If the gate keeps such engines' cores from new runs (as the
// fix in progress does with Stuck) while it gives the user their slot
// back, one user, run after run, takes every slot of the process for
// everyone: the per-user bound no longer applies to them. Here one user
// with a per-user bound of 1 runs two such programs, one after the other,
// and then nobody can run anything.
func TestReviewStuckEnginesPoisonTheGate(t *testing.T) {
	g := NewGate(1, 2, 200*time.Millisecond)
	code := `try { Array.prototype.includes.call({length: 2 ** 25}, 1) } catch (e) {}
		let reads = 0;
		const o = { get length() { return reads++ === 0 ? 0 : 2 ** 27 } };
		return Array.prototype.includes.call(o, 1)`
	for i := 0; i < 2; i++ {
		release, err := g.Acquire(context.Background(), "mallory")
		if err != nil {
			t.Logf("mallory's run %d is refused: %v", i, err)
			break
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = Run(context.Background(), Program{Code: code, Host: &fakeHost{}, Limits: Limits{Timeout: 200 * time.Millisecond}, Release: release})
		}()
		select {
		case <-done:
		case <-time.After(4 * time.Second):
			t.Logf("mallory's run %d still holds its slot", i)
		}
	}
	release, err := g.Acquire(context.Background(), "alice")
	if err != nil {
		t.Fatalf("after one user's two runs (per-user bound 1) ended, alice cannot run: %v", err)
	}
	release()
}

// TestReviewNativeLoopOutlivesTimeout: the wall-time limit is enforced by
// VM.Interrupt, which the engine only polls when it runs code. A single
// built-in call that loops natively (Array.prototype.includes/indexOf/
// join/reverse/concat... over a huge sparse or array-like length) never
// polls it, so the engine - a goroutine burning a core, holding its user's
// gate slot - would go on far past the limit, cancelled context or not.
// The prelude's guards read .length once and refuse long ones; each case
// below tries to make the engine see another length than the guard did:
// a getter that answers differently the second time, a Proxy (of an
// array too) whose get trap does, a typed array or a primitive's
// prototype with a length getter, a concat argument, flatMap's receiver.
//
// The test fails when a Run has not returned within 3 s of a 300 ms limit,
// or when, after they all returned, the process still burns a core.
func TestReviewNativeLoopOutlivesTimeout(t *testing.T) {
	liar := `let reads = 0; const liar = () => reads++ === 0 ? 0 : 2 ** 28;`
	cases := map[string]string{
		"getter":         liar + `const o = { get length() { return liar() } }; return Array.prototype.includes.call(o, 1)`,
		"proxy":          liar + `const o = new Proxy({}, { get: (t, k) => k === "length" ? liar() : undefined }); return [].indexOf.call(o, 1)`,
		"proxy of array": liar + `const o = new Proxy([], { get: (t, k) => k === "length" ? liar() : t[k] }); return [].lastIndexOf.call(o, 1)`,
		"revocable":      liar + `const o = Proxy.revocable([], { get: (t, k) => k === "length" ? liar() : t[k] }).proxy; return [].includes.call(o, 1)`,
		"typed array":    liar + `const o = new Uint8Array(1); Object.defineProperty(o, "length", { get: liar }); return [].join.call(o, "")`,
		"primitive":      liar + `Object.defineProperty(Number.prototype, "length", { get: liar }); return [].includes.call(5, 1)`,
		"concat":         liar + `const o = { [Symbol.isConcatSpreadable]: true, get length() { return liar() } }; return [].concat(o).length`,
		// The longest length the guard lets through, on an array-like
		// whose indices are all holes: the walk itself must be stopped.
		"longest allowed": `for (let n = 2 ** 30; ; n /= 2) {
			try { return [].lastIndexOf.call({ length: n }, 1) } catch (e) { if (!(e instanceof RangeError)) throw e }
		}`,
		"flatMap": liar + `const o = { get length() { return liar() } }; return [].flatMap.call(o, x => x).length`,
	}
	for name, code := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan Outcome, 1)
			start := time.Now()
			go func() {
				out, _ := Run(ctx, Program{Code: code, Host: &fakeHost{}, Limits: Limits{Timeout: 300 * time.Millisecond}})
				done <- out
			}()
			time.AfterFunc(time.Second, cancel) // the caller gives up, too
			select {
			case out := <-done:
				t.Logf("Run returned after %s: %s %+v", time.Since(start), out.Result, out.Err)
			case <-time.After(3 * time.Second):
				t.Fatalf("a run with a 300ms time limit (and a cancelled context) is still running after 3s: one native built-in call is never interrupted")
			}
		})
	}
	// Every Run returned: nothing of them should be running any more.
	before := cpuTime()
	time.Sleep(time.Second)
	used := cpuTime() - before
	t.Logf("CPU in the second after: %s", used)
	if used > 200*time.Millisecond {
		t.Fatalf("every Run returned, but an engine still runs: the process used %s of CPU in the idle second after", used)
	}
}

// TestGuardsKeepArrayLikeSemantics: the views the guards pass to native
// methods are invisible to what a program sees of the result: methods
// that return their receiver return the object they were called on, and
// writes reach it.
func TestGuardsKeepArrayLikeSemantics(t *testing.T) {
	out := runCode(t, `const o = { length: 3, 0: "c", 1: "a", 2: "b" };
		const sorted = Array.prototype.sort.call(o);
		const filled = [].fill.call({ length: 2 }, 7);
		const p = new Proxy([1, 2, 3], {});
		return [sorted === o, o[0] + o[1] + o[2], filled[0] + filled[1], [].map.call(p, x => x * 2).join(","),
			[].concat({ [Symbol.isConcatSpreadable]: true, length: 2, 0: "x", 1: "y" }).join(""),
			p instanceof Array, typeof Proxy, Proxy.name, [].includes.call("abc", "b")]`, Program{})
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	if want := `[true,"abc",14,"2,4,6","xy",true,"function","Proxy",true]`; string(out.Result) != want {
		t.Fatalf("got %s, want %s", out.Result, want)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
