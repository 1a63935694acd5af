package remotemcp

import (
	"errors"
	"time"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// Tables are the user-owned tables of remote MCP servers: the servers,
// exported as metadata with their sealed tokens redacted, and the pending
// consents, never exported (a single-use state and a sealed PKCE
// verifier). Both are deleted with the account, after RevokeAll asked the
// remote authorization servers to revoke the tokens.
var Tables = []storage.Table{
	{Name: "remote_mcp_servers", Redact: []string{"token_ciphertext", "key_id"}},
	{Name: "remote_mcp_states", KeyColumn: "state_hash", SkipExport: true},
}

// RegisterInventory records the tables. They exist whether or not remote
// MCP servers are on, so this is always called.
func RegisterInventory(inv *storage.Inventory) error {
	var errs []error
	for _, t := range Tables {
		errs = append(errs, inv.AddTable(t))
	}
	return errors.Join(errs...)
}

// RetentionPolicies declares how long the rows live.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.UntilAccountDeleted("remote_mcp_servers").Because("or until the user removes the server (its tokens are revoked at the remote first)"),
		retention.Age("remote_mcp_states", "expires_at", time.Hour).Because("an unfinished consent; it stops working after 10 minutes"),
	}
}
