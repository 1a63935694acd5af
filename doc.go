// Package enclave assembles a multi-user MCP server: storage, migrations and
// the HTTP surface (health, and as they land the MCP endpoint, the OAuth
// authorization server and the account web shell).
//
// The smallest program:
//
//	srv, err := enclave.New(ctx, enclave.Config{})
//	if err != nil { … }
//	defer srv.Close()
//	err = srv.Run(ctx) // serves on 127.0.0.1:8080 until ctx ends
//
// Every zero Config field is an embedded default: an SQLite file, a blob
// directory and a keeper key under ./enclave-data, in-process KV and queue.
// Handler returns the whole surface as an http.Handler for embedders who
// run their own http.Server or mount it in their own mux.
package enclave
