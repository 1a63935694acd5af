package sqltasks

import "github.com/enclave-mcp/enclave/retention"

// RetentionPolicies declares that a task row goes when it expires.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{retention.Age(Table.Name, "expires_at", 0)}
}
