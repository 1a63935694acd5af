package enclave

import (
	"errors"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities/idempotency"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/federation/fedtables"
	"github.com/enclave-mcp/enclave/feedback"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mcp/sqlsessions"
	"github.com/enclave-mcp/enclave/mcp/sqltasks"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/quota"
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
