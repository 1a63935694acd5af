package secrets

import "github.com/enclave-mcp/enclave/retention"

// RetentionPolicies declares how long stored secrets live: until their
// owner deletes them or the account.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{retention.UntilAccountDeleted("user_secrets")}
}
