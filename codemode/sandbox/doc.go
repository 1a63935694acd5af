// Package sandbox runs short JavaScript programs, the engine of code mode:
// an agent sends a program that calls the server's capabilities through
// host bindings, and gets back what it returns.
//
// The package owns the JavaScript side only. It knows nothing of
// capabilities, HTTP or storage: everything a program does outside its VM
// goes through the Host (and the Resolver, for imports) that the caller
// supplies, on the caller's goroutine and with the caller's context. That is
// where authority is checked; the sandbox adds none of its own.
//
// It guarantees, for every Run:
//
//   - A fresh VM (modernc.org/quickjs, pure Go), closed before Run returns:
//     nothing survives from one run to the next, and concurrent runs share
//     nothing.
//   - No ambient authority: the program has the ECMAScript built-ins, eval
//     and Function included, plus exactly the bindings below. No std or os
//     module, no timers, no network, no file system, no module but through
//     the Resolver.
//   - Bindings: codemode.<name>(args) for each of Program.Capabilities,
//     fetch(url, init), storage.get/set/delete/list and console.log/info/
//     warn/error/debug, all through one host function that the prelude
//     takes out of the program's reach before any program code runs.
//   - Every limit of Limits ends the run with a RunError that names it, and
//     never affects the process: memory, wall time (also while a host call
//     runs: its context is cancelled), stack depth, result size and host
//     calls. A program may catch the engine's out-of-memory and stack
//     overflow errors and go on, still within the same caps; it cannot catch
//     the end of its time or of its host calls, which interrupt the VM.
//   - Run returns by the deadline (plus a grace of 2 s) even when the engine
//     cannot be interrupted: inside a Host call that ignores its context, or
//     a built-in function that never checks for interrupts. Such an engine
//     goes on until it is done, then closes its VM; Stuck counts them and
//     every Gate gives their cores no new runs. The built-ins known to loop
//     without checking, Array.prototype's methods that walk every index of
//     a long (sparse or array-like) length, are guarded by the prelude: past
//     Limits.Memory/16 elements, more than any dense array can have, they
//     throw a RangeError instead of walking 2**53 indexes. Only a genuine
//     array reaches them as it is; an array-like, a Proxy (programs' proxies
//     are recorded when made) or a primitive reaches them through a view
//     whose length is the one checked and whose every access runs code, so
//     a length getter cannot answer the engine differently and the walk
//     stops at the time limit. A callback's third argument is then that
//     view, not the array-like itself.
//   - A panic in the engine, a Host or a Resolver ends the run with a
//     RunError of Kind "internal" and does not crash the process.
//   - Errors the program sees and reports never carry Go error text: a Host
//     shows the program what went wrong only through a *HostError. A
//     RunError's Message and Stack are at most 16 KiB each.
//
// Most of what a run costs is the engine's own: making the VM and freeing
// it. What the sandbox adds is kept small: the prelude (prelude.js, the
// bindings) is compiled to bytecode once per process and only loaded in each
// VM; the codemode object is a Proxy that makes a capability's function when
// the program first reads it, so a run pays for the capabilities it uses,
// not for every one it may call (BenchmarkRunBindings: 50 bound cost about
// 0.1 ms of CPU a run when each was made up front); a program without
// static imports is evaluated as a script, which costs less than the
// modules a program with imports needs; and the goroutines that run engines
// are kept for the next run (BenchmarkRunTrivial).
//
// Why one fresh VM per run, measured (CPU per run on the project's 2-core
// machine, BenchmarkRunTrivial and the stages of it): a trivial Run costs
// about 0.43 ms, of which the VM is 0.16-0.2 ms (its runtime alone, made
// and freed, about 0.02 ms: the realm, the context with its built-ins, is
// the cost), loading the prelude's bytecode 0.085 ms, calling the prelude
// 0.12 ms and the rest evaluating the program, settling it and freeing the
// VM. The ways to pay less were weighed against what they would cost in
// isolation:
//
//   - A fresh context on a runtime kept for the next run (of the same
//     user only): it saves the runtime, under 5% of a run, since the
//     context is what costs, and quickjs.VM has no way to make a context
//     on a runtime it did not make. A runtime also keeps state that its
//     contexts share: the atom table with Symbol.for's registry (the
//     description of a symbol a run registered), the allocator's high
//     water mark after a memory bomb, the job queue and the interrupt
//     state. Not done.
//   - A context reused and reset between runs: it would save most of a
//     run, but no reset is sound. A program can change any built-in,
//     including the ones it reaches only through instances (the iterator
//     prototypes, %TypedArray%, the async and generator function
//     prototypes), make what it added non-configurable or freeze what it
//     changed so that nothing can restore it, and keep internal state no
//     property shows. Not done: nothing may survive from one run to the
//     next, the same user's included (TestFreshVMPerRun, and the codemode
//     package's TestNoStateSurvivesARun).
//   - VMs made ahead of time, with the prelude loaded, fresh and used once:
//     as isolated as now, and about 0.25 ms less of a run's latency on a
//     machine with idle cores, but the same CPU per run (on a saturated
//     core, no throughput gained) and memory held by every idle VM. Not
//     done.
//
// So a run costs at least what making and freeing a realm does, which on
// this engine is several times a plain capability call.
//
// Gate bounds how many runs go at once, per key (a user) and in total.
package sandbox
