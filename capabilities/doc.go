// Package capabilities defines what agents and people can do through enclave
// and the single place where every such action is authorized.
//
// A capability, in this package, is one named operation a caller may invoke
// (MCP exposes capabilities as tools). This is not MCP's own use of the word,
// where "capabilities" are the optional protocol features a client and server
// negotiate at initialization.
//
// Permissions are "action:entity:access" strings from a typed vocabulary
// (see Permission and Vocabulary).
package capabilities
