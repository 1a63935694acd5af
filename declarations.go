package enclave

import (
	"errors"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/capabilities/idempotency"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/features"
	"github.com/enclave-mcp/enclave/federation/fedtables"
	"github.com/enclave-mcp/enclave/feedback"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/internal/callercache"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/internal/lanes"
	"github.com/enclave-mcp/enclave/internal/metrics"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/internal/ratelimit"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mcp/sqlsessions"
	"github.com/enclave-mcp/enclave/mcp/sqltasks"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/workspaces"
)

// registerInventory collects where enclave's own user-owned data lives:
// each package that owns a table registers it. A test applies every
// migration and fails when an owned table is missing.
func registerInventory(inv *storage.Inventory) error {
	return errors.Join(
		lifecycle.RegisterInventory(inv), // users (first: deleted last), user_roles
		accounts.RegisterInventory(inv),
		secrets.RegisterInventory(inv),
		inv.AddTables(oauth.InventoryTables()...),
		outbox.RegisterInventory(inv),
		quota.RegisterInventory(inv),
		inv.AddTables(sqltasks.Table),
		// Replayable results of keyed calls: deleted with the account,
		// never exported (they repeat what the account's data says).
		inv.AddTables(idempotency.Table),
		inv.AddTables(events.WebhookTable, feedback.Table),
		inv.AddTables(sqlsessions.Tables...),
		workspaces.RegisterInventory(inv),
		codemode.RegisterInventory(inv),
		buckets.RegisterInventory(inv),
		memory.RegisterInventory(inv),
		integrations.RegisterInventory(inv),
		remotemcp.RegisterInventory(inv),
		community.RegisterInventory(inv),
		quota.RegisterPlanInventory(inv),
		mail.RegisterInventory(inv),
		fedtables.RegisterInventory(inv),
	)
}

// declareRetention collects the retention declarations of the core's
// tables after the users' (lifecycle.Wire): each package that owns a
// table declares its policy (one line: Age, UntilAccountDeleted, Kept or
// Custom), and the root only gathers them. Optional domains add theirs
// when they are assembled. A table without a policy fails
// TestRetentionCoversTheSchema; docs/data.md is generated from the set.
// The order is the purge order of a run: OAuth grants after their tokens
// and clients after their grants.
func declareRetention(set *retention.Set, cfg Config, store *storage.Store) error {
	for _, ps := range [][]retention.Policy{
		accounts.RetentionPolicies(),
		secrets.RetentionPolicies(),
		quota.RetentionPolicies(),
		idempotency.RetentionPolicies(),
		sqltasks.RetentionPolicies(),
		sqlsessions.RetentionPolicies(),
		callercache.RetentionPolicies(),
		outbox.RetentionPolicies(cfg.JobRetention),
		events.RetentionPolicies(),
		feedback.RetentionPolicies(),
		oauth.RetentionPolicies(cfg.OAuth.ClientIdleTTL),
		oauth.EnterpriseRetentionPolicies(),
		audit.RetentionPolicies(),
		metrics.RetentionPolicies(),
		ratelimit.RetentionPolicies(),
		envelope.RetentionPolicies(),
		lanes.RetentionPolicies(),
		features.RetentionPolicies(),
		migrations.RetentionPolicies(),
		workspaces.RetentionPolicies(),
		// Code mode's tables exist whether or not it is on.
		codemode.RetentionPolicies(store.Bucket, cfg.CodeMode.Retention()),
	} {
		if err := set.Add(ps...); err != nil {
			return err
		}
	}
	return nil
}
