package enclave

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/mcp/sqlsessions"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/workspaces"
)

// Retention windows of enclave's own tables that have no home elsewhere.
const (
	// metricsRetention keeps the admin overview's daily counts.
	metricsRetention = 400 * 24 * time.Hour
	// unusedClientWindow: a registered client that holds no grant and has
	// not been used (no authorization or token request) for this long is
	// removed; clients that hold grants go after Options.ClientIdleTTL.
	unusedClientWindow = 7 * 24 * time.Hour
	// idempotencyWindow is how long a keyed capability result is replayed.
	idempotencyWindow = 24 * time.Hour
	// unverifiedPerRun bounds the account deletions of one retention run.
	unverifiedPerRun = 50
)

// retentionPolicies declares the retention of every table enclave's
// migrations create; TestRetentionCoversTheSchema fails for a table
// without one. Add a table's policy here, one line (Age, UntilAccountDeleted,
// Kept or Custom); docs/data.md is generated from this list.
func (s *Server) retentionPolicies() []retention.Policy {
	day := 24 * time.Hour
	clientIdle := s.cfg.OAuth.ClientIdleTTL
	if clientIdle <= 0 {
		clientIdle = oauth.DefaultClientIdleTTL
	}
	users := retention.Custom("users", "an account opened on the sign-up page that never verified an address is deleted 7 days after sign-up, through account deletion (its email and username become free); every other account is kept until it is deleted", s.purgeUnverified)
	if s.cfg.OAuth.AllowUnverifiedEmail {
		// Unverified accounts may work (hold tokens, own data): they are
		// accounts in use, never purged as abandoned sign-ups.
		users = retention.Kept("users", "every account stays until it is deleted, verified or not: Config.OAuth.AllowUnverifiedEmail lets unverified accounts work")
	}
	return []retention.Policy{
		// Accounts and what they own.
		users,
		retention.UntilAccountDeleted("user_roles"),
		retention.Age("account_write_leases", "expires_at", time.Hour).Because("a running call's write lease; a call that ended without releasing it (a crash) leaves one that has expired"),
		retention.UntilAccountDeleted("email_claims").Because("a former address stays claimed until its owner releases it (a link mailed to it)"),
		retention.Age("username_holds", "held_until", 0).Because("a username given up is held for its former holder until then"),
		retention.Age("password_setup_tokens", "expires_at", day).Because("expired setup links"),
		retention.Age("mail_tokens", "expires_at", day).Because("expired verification, reset and email-change links"),
		retention.UntilAccountDeleted("user_secrets"),
		retention.UntilAccountDeleted("user_totp").Because("or until the authenticator app is turned off"),
		retention.UntilAccountDeleted("user_recovery_codes").Because("replaced when new codes are made"),
		retention.UntilAccountDeleted("user_passkeys").Because("or until the passkey is removed"),
		retention.Age("login_challenges", "expires_at", 0).Because("pending sign-ins and passkey challenges (5 minutes)"),
		retention.Age("quota_usage", "day", (quota.KeepDays-1)*day).In(retention.Day),
		retention.Age("idempotency_keys", "created_at", idempotencyWindow).Because("results of calls made with an idempotency key; never exported"),
		retention.Age("mcp_tasks", "expires_at", 0),
		retention.Age("mcp_sessions", "last_used_at", 30*time.Minute).Because("shared MCP sessions idle longer than the session lifetime"),
		retention.Age("mcp_session_answers", "created_at", sqlsessions.AnswerTTL).Because("client answers to elicitation or sampling not yet collected by the asking replica"),
		retention.Age("mcp_session_events", "created_at", sqlsessions.EventTTL).Because("the resumable-stream window"),
		retention.Age("caller_invalidations", "created_at", time.Hour).Because("caller-cache invalidations for processes without a shared bus (read within seconds)"),
		retention.Age("mcp_spent_states", "expires_at", time.Minute).Because("ids of used 2026-07-28 requestStates; past its expiry a state's signature refuses it anyway"),
		retention.Age("outbox", "dead_at", s.cfg.JobRetention).Because("jobs that gave up (Config.JobRetention); delivered jobs are removed when delivered"),

		retention.UntilAccountDeleted("webhook_subscriptions").Because("an admin's webhook subscriptions"),
		retention.Age("platform_feedback", "updated_at", 365*day).If("status IN ('resolved', 'dismissed')").
			Because("resolved and dismissed feedback; open and triaged items stay until reviewed or the submitter's account is deleted"),
		retention.Kept("feedback_mails", "markers that a decision mail was queued; deleted with their feedback row (ON DELETE CASCADE)"),

		// OAuth.
		retention.Age("oauth_tokens", "expires_at", 0).Because("expired codes, PKCE sessions, access and refresh tokens"),
		retention.Age("oauth_grants", "last_used_at", time.Hour).
			If("NOT EXISTS (SELECT 1 FROM oauth_tokens AS t WHERE t.request_id = oauth_grants.id)").
			Because("a grant whose tokens are all gone (expired or revoked) is over; the others go with the account"),
		retention.Custom("oauth_clients", fmt.Sprintf("a client holding no grant and unused for %d days is removed; any client unused for %d days (Options.ClientIdleTTL) is removed with everything issued to it",
			int(unusedClientWindow/day), int(clientIdle/day)), purgeClients(clientIdle)),
		retention.UntilAccountDeleted("oauth_consents").Because("or until the client is removed"),
		retention.Kept("oauth_keys", "signing keys of the authorization server"),
		retention.Kept("oauth_client_blocks", "admins' blocks of client metadata URLs and hosts, until lifted"),
		retention.Age("oauth_client_assertions", "expires_at", 0).Because("ids of used private_key_jwt client assertions, kept until the assertion expires (at most an hour)"),

		// Platform.
		retention.Age("audit_events", "at", audit.DefaultRetention).Because("hashed identifiers only; not user-owned, so kept after an account is deleted"),
		retention.Age("metric_daily", "day", metricsRetention).In(retention.Day),
		retention.Age("rate_limit_hits", "at_ms", day).In(retention.UnixMillis).Because("no rate-limit window is longer"),
		retention.Kept("roles", "reference data"),
		retention.Kept("permissions", "the permission vocabulary"),
		retention.Kept("role_permissions", "reference data"),
		retention.Kept("reserved_usernames", "operator reservations"),
		retention.Kept("session_keys", "browser session keys, rotated by enclave keys rotate"),
		retention.Kept("data_keys", "wrapped data keys; a secret sealed with a retired key must still open"),
		retention.Kept("platform_keys", "sealed platform keys"),
		retention.Kept("lane_leases", "one row per periodic lane"),
		retention.Kept("retired_user_ids", "identities are never reused"),
		retention.Kept("invite_codes", "admins create and revoke them"),
		retention.Kept("feature_flags", "admin settings"),
		retention.Kept("schema_migrations", "the migration ledger"),
		// Workspaces (package workspaces).
		retention.Kept("workspaces", "the workspace directory: a workspace goes when its owner deletes it, or with its last owner's account when no admin is left"),
		retention.UntilAccountDeleted("workspace_members").Because("or until the member leaves or is removed"),
		retention.Age("workspace_invitations", "expires_at", 30*day).Because("invitation records (the link is single-use and expires)"),
		retention.Age("workspace_api_keys", "revoked_at", 90*day).Because("revoked keys; live keys stay until revoked or their maker's account is deleted"),
	}
}

// workspaceRetention declares the retention of the workspace tables that
// live in the main database on PostgreSQL (on SQLite they live in each
// workspace's own file and go with it).
func (s *Server) workspaceRetention() []retention.Policy {
	ttl := s.cfg.Workspaces.IdempotencyTTL
	if ttl <= 0 {
		ttl = workspaces.DefaultIdempotencyTTL
	}
	return []retention.Policy{
		retention.Kept("workspace_state", "a workspace's revision; deleted with the workspace"),
		retention.Kept("workspace_events", "a workspace's event log; deleted with the workspace"),
		retention.Age("workspace_idempotency", "created_at", ttl).Because("results replayed for idempotency keys of workspace ops"),
		retention.Kept("workspace_pending_jobs", "used on SQLite only, where jobs wait in the workspace file for the outbox"),
		retention.Kept("workspace_files", "file versions and tombstones; deleted with the workspace"),
	}
}

// newRetention builds the server's retention set.
func (s *Server) newRetention() (*retention.Set, error) {
	set := retention.NewSet()
	if err := set.Add(s.retentionPolicies()...); err != nil {
		return nil, err
	}
	// Code mode's tables exist whether or not it is on.
	if err := set.Add(codemode.RetentionPolicies(s.store.Bucket, s.cfg.CodeMode.Retention())...); err != nil {
		return nil, err
	}
	return set, nil
}

// purgeClients removes clients that hold no grant and went unused for
// unusedClientWindow, then clients idle for longer than idle.
func purgeClients(idle time.Duration) retention.PurgeFunc {
	unused := retention.Age("oauth_clients", "last_used_at", unusedClientWindow).
		If("NOT EXISTS (SELECT 1 FROM oauth_grants AS g WHERE g.client_id = oauth_clients.id)")
	stale := retention.Age("oauth_clients", "last_used_at", idle)
	return func(ctx context.Context, db bun.IDB, now time.Time, limit int) (int64, error) {
		n, err := retention.PurgeAge(ctx, db, unused, now, limit)
		if err != nil || n >= int64(limit) {
			return n, err
		}
		m, err := retention.PurgeAge(ctx, db, stale, now, limit-int(n))
		return n + m, err
	}
}

// purgeUnverified deletes accounts that never verified an address within
// accounts.UnverifiedWindow of signing up: one pass of
// lifecycle.Service.PurgeUnverified (never-attempted accounts first,
// earlier failures waiting for their retry time), each outcome audited.
// It returns how many accounts it deleted.
func (s *Server) purgeUnverified(ctx context.Context, _ bun.IDB, now time.Time, limit int) (int64, error) {
	rep, err := s.lifecycle.PurgeUnverified(ctx, lifecycle.PurgeRequest{Now: now, Limit: min(limit, unverifiedPerRun), Record: s.recordUnverifiedPurge})
	if err != nil {
		return 0, err
	}
	return int64(rep.Purged), rep.Errs
}

// recordUnverifiedPurge audits one account's outcome in a purge pass
// (the lane's or adminUnverifiedAccountPurgeRun's): purged, or failed
// with the failure's class and what happens next.
func (s *Server) recordUnverifiedPurge(ctx context.Context, o storage.Owner, out lifecycle.PurgeOutcome) {
	ev := audit.Event{Category: audit.CategoryAccount, Action: "unverified_account_purged", Result: audit.ResultSuccess, UserHash: s.audit.HashUser(o.StableID)}
	switch out.Outcome {
	case lifecycle.PurgePurged:
	case lifecycle.PurgeReleased:
		ev.Action, ev.Result, ev.Reason = "unverified_account_purge_failed", audit.ResultFailure, out.Failure+"; retried after "+out.RetryAt.UTC().Format(time.RFC3339)
	case lifecycle.PurgeFailed:
		ev.Action, ev.Result, ev.Reason = "unverified_account_purge_failed", audit.ResultFailure, out.Failure+"; retried by deletion-resume"
		if strings.HasPrefix(out.Failure, "claim ") {
			ev.Reason = out.Failure + "; retried by the next pass"
		}
	default:
		return
	}
	_ = s.audit.Record(ctx, ev)
}
