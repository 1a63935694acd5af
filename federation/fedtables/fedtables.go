// Package fedtables declares the tables of package federation for the
// ownership inventory and retention, without federation's dependencies
// (the root assembles them whether or not providers are configured).
package fedtables

import (
	"errors"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// Tables are the user-owned tables of federation: linked identities,
// exported (provider, issuer and subject; the table holds nothing else
// about the identity), and sign-ins in progress, never exported (single-use
// states and PKCE verifiers). Both are deleted with the account.
var Tables = []storage.Table{
	{Name: "linked_identities"},
	{Name: "federation_states", KeyColumn: "state_hash", SkipExport: true},
}

// RegisterInventory records the tables of federation.
func RegisterInventory(inv *storage.Inventory) error {
	var errs []error
	for _, t := range Tables {
		errs = append(errs, inv.AddTable(t))
	}
	return errors.Join(errs...)
}

// RetentionPolicies: linked identities live until they are unlinked or
// the account is deleted; sign-ins in progress until they expire.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.UntilAccountDeleted("linked_identities").Because("or until the person unlinks the identity"),
		retention.Age("federation_states", "expires_at", 0).Because("sign-ins at external providers in progress, single-use, kept until they expire (10 minutes)"),
	}
}
