package integrations

import (
	"errors"
	"time"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// Tables are the user-owned tables of integrations: the connections,
// exported as metadata with their sealed tokens redacted, and the pending
// connect flows, never exported (nothing but a single-use state and a
// sealed PKCE verifier); people's own OAuth apps, exported as metadata
// (name, endpoints, client id, scopes, hosts) with their sealed client
// secret redacted. All are deleted with the account, after
// RevokeAll asked the providers to revoke the tokens.
var Tables = []storage.Table{
	{Name: "integration_connections", Redact: []string{"token_ciphertext", "key_id"}},
	{Name: "integration_states", KeyColumn: "state_hash", SkipExport: true},
	{Name: "integration_apps", Redact: []string{"client_secret_ciphertext", "key_id"}},
}

// RegisterInventory records the tables of integrations. They exist whether
// or not integrations are on, so this is always called.
func RegisterInventory(inv *storage.Inventory) error {
	var errs []error
	for _, t := range Tables {
		errs = append(errs, inv.AddTable(t))
	}
	return errors.Join(errs...)
}

// RetentionPolicies declares how long integration rows live.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.UntilAccountDeleted("integration_connections").Because("or until the user disconnects the account (its tokens are revoked at the provider first)"),
		retention.Age("integration_states", "expires_at", time.Hour).Because("an unfinished connect flow; it stops working after 10 minutes"),
		retention.UntilAccountDeleted("integration_apps").Because("or until the user removes the app (its connections are disconnected and revoked first)"),
	}
}
