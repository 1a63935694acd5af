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
// The schemas are written for the models that read them. A field's json tag
// names it (camelCase, by convention of every built-in capability), its
// jsonschema tag describes it, and its schema tag ([SchemaTag]) declares its
// constraints, which Invoke enforces before the handler runs:
//
//	Status string `json:"status,omitempty" jsonschema:"only these" schema:"enum=open|closed,default=open"`
//	Limit  int    `json:"limit,omitempty" jsonschema:"page size" schema:"minimum=1,maximum=1000,default=50"`
//
// A closed set of values is an enum rather than prose; slices are plain
// arrays (a nil slice is sent as []), never a union with null; a field an
// agent may not set is left out of the input type altogether.
//
// Handlers talk back to the client that called them (progress, log messages,
// elicitation, sampling) through [Call]; a transport supplies the wire side by
// implementing [Client]. Nothing in this package knows about HTTP or MCP wire
// types.
//
// Permissions are "action:entity:access" strings from a typed vocabulary
// (see Permission and Vocabulary).
//
// A caller that arrived with an access token holds its scopes
// (Caller.Scopes). A missing scope refuses a call with CodeInsufficientScope
// (step-up) but leaves the capability listed, except the admin scope
// ([ScopeAdmin]): everything kept to the admin role needs it, and a token
// without it lists what a user's would.
//
// The server's operator, the person at its command line, is a caller of its
// own: [OperatorCaller], which only in-process code can hold (no token,
// session or decoded value carries its mark). It runs exactly the
// capabilities marked [Requirement].Operator (the command line's account
// actions), which every other caller, admins included, is answered as if
// they did not exist; each operator call the checks let through is
// recorded with [Options].OperatorAudit, one refused for its arguments
// included, naming the account its handler acted on ([Call.SetSubject]).
package capabilities
