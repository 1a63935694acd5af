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
//   - A panic in the engine, a Host or a Resolver ends the run with a
//     RunError of Kind "internal" and does not crash the process.
//   - Errors the program sees and reports never carry Go error text: a Host
//     shows the program what went wrong only through a *HostError.
//
// Gate bounds how many runs go at once, per key (a user) and in total.
package sandbox
