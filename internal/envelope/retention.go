package envelope

import "github.com/enclave-mcp/enclave/retention"

// RetentionPolicies declares that the key tables keep every row: a secret
// sealed with a retired data key must still open.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.Kept("data_keys", "wrapped data keys; a secret sealed with a retired key must still open"),
		retention.Kept("platform_keys", "sealed platform keys"),
	}
}
