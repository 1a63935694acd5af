package migrations

import "github.com/enclave-mcp/enclave/retention"

// RetentionPolicies declares that the migration ledger is kept.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{retention.Kept("schema_migrations", "the migration ledger")}
}
