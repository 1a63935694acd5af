package ratelimit

import (
	"time"

	"github.com/enclave-mcp/enclave/retention"
)

// RetentionPolicies declares how long hits are kept: a day, as no
// rate-limit window is longer.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.Age("rate_limit_hits", "at_ms", 24*time.Hour).In(retention.UnixMillis).Because("no rate-limit window is longer"),
	}
}
