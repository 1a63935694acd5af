// Package remotemcp lets a user add remote MCP servers whose tools become
// that user's own capabilities.
//
// A person (or their agent) adds a server by URL with mcpServerAdd. enclave
// connects to it as an MCP client (mark3labs/mcp-go's streamable HTTP
// client: it adds two packages to the server binary, the official go-sdk
// client twenty-three). A server that answers without authorization is
// ready at once; one that asks for a token (401 with RFC 9728 protected
// resource metadata) gets an OAuth consent the person finishes on the
// account's MCP servers page: enclave is an OAuth client with PKCE (S256),
// identified by a client ID metadata document it serves itself when the
// remote authorization server supports those, else by dynamic client
// registration (RFC 7591). Tokens are sealed with the key ring, bound to the
// owner and the server, refreshed before they expire, revoked (RFC 7009)
// when the server is removed or the account deleted.
//
// The server's tools are offered, through the registry's Provider
// mechanism, as capabilities of that user alone, named
// mcp_<server name>__<tool name>: the prefix "mcp_" belongs to this
// provider, so a remote tool can never take a built-in capability's name,
// and server names have no "_", so two servers' tools never collide. Each
// call passes Registry.Invoke like any capability (account state,
// permission, quota class "remote", idempotency, audit) before it is
// forwarded with the user's token for that server. Every exchange is
// bounded in time and size, goes through the SSRF-safe egress client, and
// a circuit breaker per server answers at once while the server keeps
// failing.
package remotemcp
