package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	lib "modernc.org/libquickjs"
	"modernc.org/quickjs"
)

// bridgeName is the global the host function has until the prelude, the
// first code to run, takes it into its own scope and deletes it. For a
// program run through the driver, it then holds the prelude's run until the
// module "<sandbox>" takes that, before any module of the program runs.
const bridgeName = "__sandbox_bridge"

// watchInterval is how often the watcher interrupts a VM once the run's
// context is done. One Interrupt is not enough: each call from Go into the
// engine clears the flag as it starts, so one that lands just before such a
// call would be lost.
const watchInterval = 10 * time.Millisecond

var null = json.RawMessage("null")

// run is the state of one Run. Everything but the watcher goroutine, which
// only calls VM.Interrupt, runs on the run's goroutine (see start).
type run struct {
	parent context.Context
	ctx    context.Context // parent, bounded by Limits.Timeout: what the Host and Resolver get
	p      Program
	limits Limits
	prog   *program // nil for an Entry
	caps   map[string]bool
	vm     *quickjs.VM

	hostCalls     int
	resolved      map[[2]string]resolved // see resolve
	logs          []Log
	logBytes      int
	logsTruncated bool

	// How the run ended. stop is set when Go ended it by interrupting the
	// VM for good (hostCalls, internal); settled once the program's result
	// or failure is known. Nothing is recorded after the first of them, or
	// after ctx is done.
	stop        *RunError
	settled     bool
	result      json.RawMessage
	failure     *RunError
	interrupted bool  // the engine reported an interrupt nothing here asked for
	jobErr      error // the first error a job threw past its promise
}

func newRun(p Program) *run {
	r := &run{
		p:      p,
		limits: p.Limits.WithDefaults(),
		caps:   make(map[string]bool, len(p.Capabilities)),
	}
	for _, name := range p.Capabilities {
		r.caps[name] = true
	}
	if p.Code != "" {
		prog := newProgram(p.Code)
		r.prog = &prog
	}
	return r
}

// stuckGrace is how long Run waits, once the run's time is up, for the
// engine to stop, before it returns without it. The watcher interrupts the
// VM at once, but a built-in function the engine is in may not check for
// interrupts until it is done.
var stuckGrace = 2 * time.Second

var stuck atomic.Int64

// Stuck returns how many engines are still running after their Run
// returned: programs caught in a built-in function that does not check for
// interrupts, each burning a core until it is done. It is for metrics and
// alerts; the sandbox already guards the built-ins known to do it.
func Stuck() int { return int(stuck.Load()) }

// start runs the program on a goroutine of its own (see goEngine), so that
// Run returns at the deadline, or little after, even when the engine does
// not stop.
func (r *run) start(parent context.Context) Outcome {
	ctx, cancel := context.WithTimeout(parent, r.limits.Timeout)
	defer cancel()
	r.parent, r.ctx = parent, ctx

	done := make(chan Outcome, 1)
	goEngine(func() {
		defer func() {
			if p := recover(); p != nil {
				done <- Outcome{Result: null, Err: internalError(fmt.Errorf("sandbox: panic: %v\n%s", p, debug.Stack()))}
			}
		}()
		done <- r.run()
	})
	release := r.p.Release
	if release == nil {
		release = func() {}
	}
	select {
	case out := <-done:
		release()
		return out
	case <-ctx.Done():
	}
	grace := time.NewTimer(stuckGrace)
	defer grace.Stop()
	select {
	case out := <-done:
		release()
		return out
	case <-grace.C:
	}

	// The engine goes on, and closes its VM, once the built-in returns.
	// Until then r belongs to it: the outcome here uses none of its state,
	// and the run's slot stays taken.
	stuck.Add(1)
	go func() {
		<-done
		stuck.Add(-1)
		release()
	}()
	out := Outcome{Result: null, Err: limitError(LimitTimeout, fmt.Sprintf(
		"the program ran longer than its time limit of %s, in a built-in function that could not be stopped", r.limits.Timeout))}
	if parent.Err() != nil {
		out.Err = &RunError{Kind: KindCancelled, Message: "the run was cancelled before the program finished"}
	}
	return out
}

// idleEngines holds the goroutines that ran an engine and wait for the
// next, each as the channel it takes its work from. An engine runs deep in
// the goroutine's stack: a new goroutine grows its stack, copying it, again
// and again in each run, which a goroutine that ran one before has done
// already (until the garbage collector shrinks it back, while it is idle).
var idleEngines = make(chan chan func(), 16)

// goEngine runs f, which must not panic, on a goroutine other than the
// caller's: an idle one of idleEngines, or a new one.
func goEngine(f func()) {
	select {
	case work := <-idleEngines:
		work <- f
	default:
		work := make(chan func(), 1)
		work <- f
		go engine(work)
	}
}

// engine runs the functions it gets from work, one after the other, and
// waits in idleEngines between them, unless idleEngines is full. One that
// never returns (a stuck engine, see start) keeps its goroutine.
func engine(work chan func()) {
	for f := range work {
		f()
		select {
		case idleEngines <- work:
		default:
			return
		}
	}
}

// run evaluates the program in a new VM and closes it.
func (r *run) run() Outcome {
	vm, err := quickjs.NewVM()
	if err != nil {
		r.halt(internalError(fmt.Errorf("sandbox: new VM: %w", err)))
		return r.outcome()
	}
	r.vm = vm
	stopWatching := r.watch()
	r.evaluate()
	stopWatching()
	r.close()
	return r.outcome()
}

// watch interrupts the VM from another goroutine once the run's context is
// done, the only way to stop JS that never calls the host, until the
// returned function is called. That goroutine starts only if the context
// ends while the VM runs.
func (r *run) watch() (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	vm := r.vm
	stopAfter := context.AfterFunc(r.ctx, func() {
		defer close(exited)
		tick := time.NewTicker(watchInterval)
		defer tick.Stop()
		for {
			vm.Interrupt()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() {
		if !stopAfter() { // the watcher started
			close(done)
			<-exited
		}
	}
}

// evaluate sets up the VM, runs the prelude and then the program, and runs
// the jobs its promises queue until the program settles.
//
// The prelude is evaluated from bytecode (see preludeBytecode) and called
// with the run's configuration; it returns its function run. A program
// without static imports is then evaluated as a script, which makes its
// body into a function, and run calls that. Any other program, and an
// Entry, is evaluated through a driver module, which imports run (from the
// module "<sandbox>", see handOffSource) and the program, and calls run with
// the program's namespace.
func (r *run) evaluate() {
	defer r.recoverPanic()
	vm := r.vm
	vm.SetMemoryLimit(uintptr(r.limits.Memory))
	vm.SetMaxStackSize(uintptr(r.limits.Stack))
	vm.SetCanBlock(false) // Atomics.wait would block the goroutine, past any interrupt
	if err := vm.RegisterHostFunc(bridgeName, r.bridge); err != nil {
		r.halt(internalError(fmt.Errorf("sandbox: register bridge: %w", err)))
		return
	}
	vm.SetModuleLoader(r.load, r.normalize)
	bytecode, err := preludeBytecode()
	if err != nil {
		r.halt(internalError(err))
		return
	}
	if r.ended() {
		return
	}

	// Values are freed before Close (deferred calls run first): the engine
	// must find none alive when it frees the runtime.
	prelude, err := vm.EvalBytecodeValue(bytecode)
	if err != nil {
		r.evalFailed(err)
		return
	}
	defer prelude.Free()
	runJS, err := prelude.CallValue(quickjs.UndefinedValue, r.preludeConfig())
	if err != nil {
		r.evalFailed(err)
		return
	}
	defer runJS.Free()
	if r.ended() {
		return
	}

	var promise quickjs.Value
	if !r.driven() {
		f, err := vm.EvalValue(r.prog.source, quickjs.EvalGlobal|lib.MJS_EVAL_FLAG_STRICT)
		if err != nil {
			r.evalFailed(err)
			return
		}
		defer f.Free()
		if r.ended() {
			return
		}
		promise, err = runJS.CallValue(quickjs.UndefinedValue, f)
		if err != nil {
			r.evalFailed(err)
			return
		}
	} else {
		promise, err = vm.EvalValue(r.driver(), quickjs.EvalModule)
		if err != nil {
			r.evalFailed(err)
			return
		}
	}
	defer promise.Free()
	if r.ended() {
		return
	}
	// The promise rejects when the prelude itself fails, or, for a module,
	// when a module throws as it is evaluated, before the program runs.
	next, err := promise.Then(nil, r.rejected)
	if err != nil {
		r.evalFailed(err)
		return
	}
	defer next.Free()
	r.drain()
}

// driven reports whether the run goes through the driver: an Entry, or a
// program that is a module.
func (r *run) driven() bool {
	return r.prog == nil || r.prog.module
}

// driver is the module that runs a program that is a module, or an Entry.
func (r *run) driver() string {
	main := entryModule
	if r.prog != nil {
		main = programModule
	}
	return `import run from "` + preludeModule + `"; import * as main from "` + main + `"; await run(main);`
}

// handOffSource is the module "<sandbox>", which only the driver imports,
// first: it takes run from the global the prelude left it in, before any
// module of the program is evaluated (see prelude.js).
const handOffSource = `const run = globalThis["` + bridgeName + `"]; delete globalThis["` + bridgeName + `"]; export default run;`

// drain runs pending jobs until the run ends. Host calls are synchronous and
// there are no timers, so once the queue is empty and the program has not
// settled, it never will.
func (r *run) drain() {
	for !r.ended() {
		n, err := r.vm.ExecutePendingJobs()
		var e *quickjs.Error
		switch {
		case err == nil:
		case !errors.As(err, &e):
			// The engine's bound on one drain, for a self-feeding queue:
			// the timeout ends that one.
		case isInterrupt(e):
			r.interrupted = true
			return
		case r.jobErr == nil:
			r.jobErr = e
		}
		if n == 0 {
			return
		}
	}
}

// close closes the VM. A panic there leaks the engine's memory, no more.
func (r *run) close() {
	defer r.recoverPanic()
	r.vm.Close()
}

func (r *run) recoverPanic() {
	if p := recover(); p != nil {
		r.halt(internalError(fmt.Errorf("sandbox: panic: %v\n%s", p, debug.Stack())))
	}
}

// ended reports whether the run is over: Go stopped it, the program settled
// or the deadline passed (or the caller gave up).
func (r *run) ended() bool {
	return r.stop != nil || r.settled || r.ctx.Err() != nil
}

// halt ends the run with e and interrupts the VM, which throws an exception
// no JS can catch and makes the engine stop running jobs.
func (r *run) halt(e *RunError) {
	if r.stop == nil {
		r.stop = e
	}
	if r.vm != nil {
		r.vm.Interrupt()
	}
}

// settle records how the program ended and interrupts the VM, so that no
// other job runs after it.
func (r *run) settle(result json.RawMessage, failure *RunError) {
	r.settled, r.result, r.failure = true, result, failure
	r.vm.Interrupt()
}

func (r *run) outcome() Outcome {
	out := Outcome{
		Result:        null,
		Logs:          r.logs,
		LogsTruncated: r.logsTruncated,
		HostCalls:     r.hostCalls,
	}
	switch {
	case r.stop != nil:
		out.Err = r.stop
	case r.settled && r.failure == nil:
		out.Result = r.result
	case r.settled:
		out.Err = r.failure
	case r.parent.Err() != nil:
		out.Err = &RunError{Kind: KindCancelled, Message: "the run was cancelled before the program finished"}
	case r.ctx.Err() != nil:
		out.Err = limitError(LimitTimeout, fmt.Sprintf("the program ran longer than its time limit of %s", r.limits.Timeout))
	case r.interrupted:
		out.Err = internalError(errors.New("sandbox: the engine was interrupted for no known reason"))
	case r.jobErr != nil:
		var e *quickjs.Error
		errors.As(r.jobErr, &e)
		out.Err = r.thrown(e.Name, e.Message, e.Stack, false)
	default:
		out.Err = &RunError{Kind: KindException, Message: "the program's promise never settled: it awaited something that can never complete"}
	}
	return out
}

func isInterrupt(e *quickjs.Error) bool {
	return e.Name == "InternalError" && e.Message == "interrupted"
}

// evalFailed handles an error of evaluating the prelude or the program (or
// its driver): a syntax error, an import that failed, or an interrupt.
func (r *run) evalFailed(err error) {
	if r.ended() {
		return
	}
	var e *quickjs.Error
	switch {
	case !errors.As(err, &e):
		r.halt(internalError(fmt.Errorf("sandbox: evaluate: %w", err)))
	case isInterrupt(e):
		r.interrupted = true
	case e.Name == "SyntaxError" && e.LineNumber > 0 && e.Message != "stack overflow":
		r.settle(nil, r.syntaxError(e))
	default:
		name, message := moduleMessage(e.Name, e.Message)
		r.settle(nil, r.thrown(name, message, e.Stack, false))
	}
}

// rejected is called when the promise of the program's run (or of its
// driver) rejects.
func (r *run) rejected(v quickjs.Value) {
	defer r.recoverPanic()
	if r.ended() {
		return
	}
	e := quickjs.ErrorFromValue(v)
	message, isNull := e.Message, false
	if e.Name == "" {
		message = e.Error() // not an Error: its string form
		if message == "null" {
			a, err := v.Any() // nil for null, "null" for the string
			isNull = err == nil && a == nil
		}
	}
	name, message := moduleMessage(e.Name, message)
	r.settle(nil, r.thrown(name, message, e.Stack, isNull))
}

// moduleMessage drops the TypeError and the prefixes the engine puts on the
// messages of normalize and load, which say what went wrong themselves
// (see Resolver).
func moduleMessage(name, message string) (string, string) {
	for _, prefix := range []string{"module normalization failed: ", "module load failed: "} {
		if m, ok := strings.CutPrefix(message, prefix); ok {
			return "", m
		}
	}
	return name, message
}

// thrown makes the RunError of something the program threw and did not
// catch. The engine's own out-of-memory and stack-overflow errors are
// catchable; uncaught, they are the limits that they are.
//
// When the engine runs out of memory while it makes its "out of memory"
// error, it throws null instead. A program's own `throw null` looks the
// same, and is taken for running out of memory too: it is far the rarer.
func (r *run) thrown(name, message, stack string, isNull bool) *RunError {
	switch {
	case name == "InternalError" && message == "out of memory", isNull:
		return limitError(LimitMemory, fmt.Sprintf("the program ran out of memory (limit %s)", byteSize(r.limits.Memory)))
	case (name == "InternalError" || name == "SyntaxError" || name == "RangeError") && message == "stack overflow":
		return limitError(LimitStack, fmt.Sprintf("the program's calls nested too deep (stack limit %d slots): look for unbounded recursion", r.limits.Stack))
	}
	switch {
	case message == "" && name != "":
		message = "uncaught " + name + " with no message"
	case message == "":
		message = "the program threw an exception with no message"
	case name != "" && name != "Error":
		message = name + ": " + message
	}
	return &RunError{Kind: KindException, Message: truncate(message, maxMessage), Stack: truncate(r.prog.fixStack(stack), maxMessage)}
}

// maxMessage bounds the Message and the Stack of a RunError, in bytes: what
// a program throws is no way around Limits.Result.
const maxMessage = 16 << 10

func (r *run) syntaxError(e *quickjs.Error) *RunError {
	if r.prog == nil || e.FileName != r.prog.file {
		return &RunError{
			Kind:    KindSyntax,
			Message: truncate(fmt.Sprintf("syntax error in module %s at line %d, column %d: %s", e.FileName, e.LineNumber, e.ColumnNumber, e.Message), maxMessage),
		}
	}
	line, column := r.prog.position(e.LineNumber, e.ColumnNumber)
	if lines := strings.Count(r.prog.code, "\n") + 1; line > lines {
		// The engine reached the closing brace of the wrapper.
		return &RunError{Kind: KindSyntax, Message: "syntax error at the end of the program: " + e.Message, Line: lines}
	}
	message := fmt.Sprintf("syntax error at line %d, column %d: %s", line, column, truncate(e.Message, maxMessage))
	if strings.HasPrefix(strings.TrimSpace(r.prog.lineText(line)), "import ") {
		message += " (static imports must come first, before any other statement)"
	}
	return &RunError{Kind: KindSyntax, Message: message, Line: line, Column: column}
}
