// Package architecture holds the project's architecture rules as tests,
// read from the module's own import graph (go list) and sources: the
// direction data flows in (transports → domains → storage), what the web
// shell may import, that only capabilities maps its error codes to HTTP
// statuses, and that every package says what it owns. It has no
// production code.
package architecture
