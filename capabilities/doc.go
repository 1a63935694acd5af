// Package capabilities defines what agents and people can do through enclave
// and the single place where every such action is authorized.
//
// A capability, in this package, is one named operation a caller may invoke
// (MCP exposes capabilities as tools). This is not MCP's own use of the word,
// where "capabilities" are the optional protocol features a client and server
// negotiate at initialization.
//
// Capabilities are declared with [Define], which derives the input and output
// JSON schemas from Go types, and collected in a [Registry]. The registry is
// the one choke point: [Registry.Invoke] is the only way a capability runs,
// and [Registry.Visible] answers discovery with the same decision, so a
// capability a caller cannot see is also one it cannot call, and the answer
// for it is the same as for a name that does not exist. Resources, resource
// templates and prompts are served through the same registry and guard.
//
// Handlers talk back to the client that called them (progress, log messages,
// elicitation, sampling) through [Call]; a transport supplies the wire side by
// implementing [Client]. Nothing in this package knows about HTTP or MCP wire
// types.
//
// Permissions are "action:entity:access" strings from a typed vocabulary
// (see Permission and Vocabulary).
package capabilities
