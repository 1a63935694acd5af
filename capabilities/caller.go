package capabilities

import (
	"context"
	"slices"
)

// AccountState is the lifecycle state of the account behind a caller.
type AccountState int

// The account states. The zero value, AccountUnknown, is what a caller has
// when its account could not be loaded: it is treated like a deleting
// account (read-only capabilities only), so a failing lookup never widens
// access.
const (
	AccountUnknown AccountState = iota
	AccountActive
	AccountSuspended
	AccountDeleting
)

func (s AccountState) String() string {
	switch s {
	case AccountActive:
		return "active"
	case AccountSuspended:
		return "suspended"
	case AccountDeleting:
		return "deleting"
	}
	return "unknown"
}

// Caller is who is asking, as loaded fresh for each request: roles and
// permissions never ride in tokens or cookies.
type Caller struct {
	// UserID is the stable user id. Empty means unauthenticated.
	UserID string
	// OwnerID is the account's internal id, the owner key of its rows,
	// when the loader knows it (accounts.CallerFor sets it with UserID
	// from the same row); 0 otherwise, and then OwnerOf looks it up.
	OwnerID  int64
	Username string
	// Roles and Permissions are what the account holds right now.
	Roles       []string
	Permissions []Permission
	// Scopes are the OAuth scopes of the access token that made the call.
	// A caller that did not arrive with a token (a web page, the CLI, a
	// test) sets AllScopes instead.
	Scopes    []string
	AllScopes bool
	// State is the account's lifecycle state.
	State AccountState
	// Interactive is true when a person is directly in the loop (an agent
	// session driven by its user, a web page), as opposed to a background
	// job or package runtime acting on the user's behalf.
	Interactive bool
	// Session is true only for a person acting through the web shell with
	// a session cookie (never for an access token): it opens capabilities
	// marked Requirement.SessionOnly.
	Session bool
	// Only, when non-nil, confines the caller to the capabilities it names:
	// every other capability, and every resource and prompt, is hidden and
	// uncallable. A credential narrower than an account (a workspace API
	// key) sets it.
	Only []string
	// Credential names the credential narrower than an account that
	// authenticated the call ("" for access tokens, sessions, jobs, the
	// CLI), for the domain that issued it to look up afresh (a workspace
	// API key is "wk:<id>").
	Credential string

	// operator marks the caller of OperatorCaller: the person running the
	// server's command line. Unexported, so that no token, session, MCP
	// request or decoded value can ever set it: only in-process code that
	// calls OperatorCaller holds such a caller.
	operator bool
}

// OperatorCaller returns the caller of the server's operator: the person
// at the command line of the machine the server runs on (the enclave
// CLI's account commands). It is no user (UserID is empty) and holds no
// role, permission or scope; it may see and run exactly the capabilities
// marked Requirement.Operator, and nothing else: every other capability,
// resource and prompt answers it as unknown. Every capability it runs is
// recorded with Options.OperatorAudit (actor: the operator).
//
// Only in-process code can obtain this caller: transports build callers
// from tokens, sessions and cookies (CallerLoader), which can never mark
// one as the operator's, so an operator capability answers every other
// caller, admins included, like a name that does not exist.
func OperatorCaller() Caller {
	return Caller{operator: true, State: AccountActive, AllScopes: true, Interactive: true}
}

// Operator reports whether c is the operator's caller (OperatorCaller).
func (c Caller) Operator() bool { return c.operator }

// Anonymous returns the caller of a visitor who is not signed in: the zero
// Caller (no user, no account, no token). It may run only capabilities
// marked Requirement.Public; every other capability answers it as unknown,
// exactly like before it was asked. Any Caller with an empty UserID is
// treated the same way.
func Anonymous() Caller { return Caller{} }

// Authenticated reports whether the caller is a signed-in user.
func (c Caller) Authenticated() bool { return c.UserID != "" }

// HasRole reports whether the caller holds role.
func (c Caller) HasRole(role string) bool { return slices.Contains(c.Roles, role) }

// HasPermission reports whether the caller holds p.
func (c Caller) HasPermission(p Permission) bool { return slices.Contains(c.Permissions, p) }

// HasScope reports whether the caller's token carries scope.
func (c Caller) HasScope(scope string) bool { return c.AllScopes || slices.Contains(c.Scopes, scope) }

// CallerLoader turns an authenticated subject (a token's user id) into a
// Caller with fresh roles, permissions and account state. Implementations
// return ErrUnknownUser when the user does not exist; any other error makes
// the transport fall back to a caller with no roles and AccountUnknown (fail
// closed).
type CallerLoader interface {
	LoadCaller(ctx context.Context, userID string) (Caller, error)
}

// CallerLoaderFunc adapts a function to CallerLoader.
type CallerLoaderFunc func(ctx context.Context, userID string) (Caller, error)

// LoadCaller calls f.
func (f CallerLoaderFunc) LoadCaller(ctx context.Context, userID string) (Caller, error) {
	return f(ctx, userID)
}

// FailClosed is the caller a transport uses when loading failed: the
// subject is known to be authenticated, but it holds no roles, no
// permissions, and its account state is unknown.
func FailClosed(userID string, scopes []string) Caller {
	return Caller{UserID: userID, Scopes: scopes, State: AccountUnknown}
}
