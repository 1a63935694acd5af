// Package workspaces is shared data for teams: a workspace belongs to its
// members, each an owner, admin or viewer, and changes only through named
// operations that run one at a time per workspace.
//
// The directory (workspaces, memberships, invitations, API keys) lives in
// the main database. The state of each workspace lives in a Store: on
// SQLite one database file per workspace under the data directory (its
// isolation and recovery unit), opened on demand with a bound on open
// files; on PostgreSQL rows of shared tables keyed by workspace_id and
// serialized by a per-workspace advisory lock. Every workspace table has a
// workspace_id column and every query filters by it, so an embedder's SQL
// is the same on both.
//
// An embedder defines its domain as Ops (Op[In, Out]) and exposes each with
// Register: a capability taking workspaceId and the op's input, guarded by
// the registry's choke point and by the caller's role in that workspace
// (fresh on every call: a removed member loses access at the next call). A
// write op increments the workspace's revision, appends an event, may
// enqueue jobs in the same transaction, honours expectedRevision and
// replays the stored result for a repeated idempotencyKey.
//
// The built-in capabilities manage workspaces and membership:
// workspaceCreate, workspaceList, workspaceGet, workspaceMemberInvite,
// workspaceInvitationAccept, workspaceMemberList, workspaceMemberRoleSet,
// workspaceMemberRemove, workspaceLeave and workspaceDelete (owners only,
// in two steps: a confirmation token, then the deletion). An unknown
// workspace and one the caller does not belong to get the same answer.
package workspaces
