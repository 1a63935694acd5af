// Package codemode lets agents run JavaScript on the server with the
// caller's authority, and keep what proves useful as versioned packages.
//
// An agent sends a short program to the execute capability instead of
// calling tools one by one: the program calls capabilities as
// `await codemode.<name>(args)`, loops, filters and returns only what
// matters. Programs run in a fresh sandbox per run (package sandbox: a
// pure-Go QuickJS VM with memory, time, stack, output and host-call
// limits); nothing survives between runs, and every binding a program has
// goes through Registry.Invoke as the same caller (non-interactive: a
// capability that needs a person in the loop is refused inside code with
// its normal error), so code can never do more than the agent's token
// could do with single calls. fetch is the httpRequest capability (the
// outbound gateway: approved hosts, secret placeholders, the same daily
// limit); storage is a storage bucket (package buckets) reached through
// the storage capabilities: an execute run's own bucket "exec:<runId>",
// which outlives the run as long as its run record, and for a package's
// exports and jobs the package's bucket "package:<name>", kept from run
// to run. With buckets turned off the binding answers that storage is off.
//
// A package is a set of ES modules with a manifest: its main module, the
// exports it offers (each with a description and an input schema) and its
// jobs (a cron schedule and the export it calls). Every save makes a new
// version. Each export becomes a capability of the owner alone, named
// "pkg_<package>_<export>" (a Provider of the registry): invisible to every
// other caller and answered as unknown if they name it. Modules import
// each other with relative paths, and other packages of the same owner as
// "pkg:name" or "pkg:name@version"; another user's package is never found.
// Package sources are content-addressed blobs under the owner's stable id.
//
// Every run is recorded (status, duration, error, truncated logs, the
// capabilities it called) and kept 30 days, at most 2,000 per user. A
// run's record is committed before its answer is sent, so a crash or a
// restart loses none; runs that end together share one INSERT (group
// commit: a write waits at most 2 ms for the runs still going). Runs,
// packages, versions and jobs are in the ownership inventory: exported
// with the account (sources included) and deleted with it.
package codemode
