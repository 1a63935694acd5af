package workspaces

import (
	"time"

	"github.com/enclave-mcp/enclave/retention"
)

// RetentionPolicies declares the retention of the workspace directory's
// tables in the main database (they exist whether or not workspaces are
// configured).
func RetentionPolicies() []retention.Policy {
	day := 24 * time.Hour
	return []retention.Policy{
		retention.Kept("workspaces", "the workspace directory: a workspace goes when its owner deletes it, or with its last owner's account when no admin is left"),
		retention.UntilAccountDeleted("workspace_members").Because("or until the member leaves or is removed"),
		retention.Age("workspace_invitations", "expires_at", 30*day).Because("invitation records (the link is single-use and expires)"),
		retention.Age("workspace_api_keys", "revoked_at", 90*day).Because("revoked keys; live keys stay until revoked or their maker's account is deleted"),
	}
}

// StateRetentionPolicies declares the retention of the workspace tables
// that live in the main database on PostgreSQL (on SQLite they live in
// each workspace's own file and go with it). idempotencyTTL is
// Config.IdempotencyTTL (0: DefaultIdempotencyTTL).
func StateRetentionPolicies(idempotencyTTL time.Duration) []retention.Policy {
	if idempotencyTTL <= 0 {
		idempotencyTTL = DefaultIdempotencyTTL
	}
	return []retention.Policy{
		retention.Kept("workspace_state", "a workspace's revision; deleted with the workspace"),
		retention.Kept("workspace_events", "a workspace's event log; deleted with the workspace"),
		retention.Age("workspace_idempotency", "created_at", idempotencyTTL).Because("results replayed for idempotency keys of workspace ops"),
		retention.Kept("workspace_pending_jobs", "used on SQLite only, where jobs wait in the workspace file for the outbox"),
		retention.Kept("workspace_files", "file versions and tombstones; deleted with the workspace"),
	}
}
