package audit

import "github.com/enclave-mcp/enclave/retention"

// RetentionPolicies declares how long audit events are kept:
// DefaultRetention.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.Age("audit_events", "at", DefaultRetention).Because("hashed identifiers only; not user-owned, so kept after an account is deleted"),
	}
}
