package capabilities

import (
	"context"
	"slices"
)

// ScopeAdmin is the OAuth scope an access token needs, besides the admin
// role, for a capability kept to that role (Requirement.Role RoleAdmin,
// or one that lists ScopeAdmin in Requirement.Scopes). A person grants it
// on the consent page by ticking it; only an account holding the admin
// role can. Without it an admin's agent works as a user's would: admin
// capabilities are left out of every listing (Visible, VisiblePrompts,
// VisibleResources), and a call to one is answered CodeInsufficientScope
// naming ScopeAdmin (step-up authorization), never run.
//
// Callers that did not arrive with a token (Caller.AllScopes: the web
// shell, the CLI, jobs) are not affected.
const ScopeAdmin = "admin"

// TokenScopes returns the scopes an access token must carry for q: its
// Scopes, plus ScopeAdmin when q requires the admin role.
func (q Requirement) TokenScopes() []string {
	if q.Role != RoleAdmin || slices.Contains(q.Scopes, ScopeAdmin) {
		return q.Scopes
	}
	return append(slices.Clone(q.Scopes), ScopeAdmin)
}

// scopeHides reports whether a missing scope hides q from caller's
// listings. Unlike other scopes, which a client is expected to obtain
// when told (so what needs them stays listed), the admin scope is one a
// person chose not to grant: what needs it is left out, so that an admin's
// agent sees the tools of a user. A call still answers insufficient_scope.
func scopeHides(caller Caller, q Requirement) bool {
	return (q.Role == RoleAdmin || slices.Contains(q.Scopes, ScopeAdmin)) && !caller.HasScope(ScopeAdmin)
}

// listed is the decision of every listing (Visible, IsVisible,
// VisibleOwn, VisiblePrompts, VisibleResources): the account state and
// requirement checks that Invoke makes, and the admin scope (scopeHides).
// tool is the capability's name, or "" for a resource or prompt.
func (r *Registry) listed(ctx context.Context, caller Caller, tool string, readOnly bool, q Requirement) bool {
	return r.stateDenial(caller, readOnly, tool != "" && q.Public) == "" && r.hiddenBy(ctx, caller, tool, q) == "" && !scopeHides(caller, q)
}
