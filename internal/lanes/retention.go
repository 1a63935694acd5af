package lanes

import "github.com/enclave-mcp/enclave/retention"

// RetentionPolicies declares that the lease table keeps its rows: one per
// periodic lane.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{retention.Kept("lane_leases", "one row per periodic lane")}
}
