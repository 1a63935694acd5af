package idempotency

import (
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/retention"
)

// RetentionPolicies declares how long keyed results are replayed:
// capabilities.IdempotencyWindow.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.Age(Table.Name, "created_at", capabilities.IdempotencyWindow).Because("results of calls made with an idempotency key; never exported"),
	}
}
