package features

import "github.com/enclave-mcp/enclave/retention"

// RetentionPolicies declares that feature flags stay until an admin
// changes them.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{retention.Kept("feature_flags", "admin settings")}
}
