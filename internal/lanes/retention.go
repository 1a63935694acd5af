package lanes

import (
	"context"
	"time"

	"github.com/enclave-mcp/enclave/retention"
)

// RetentionPolicies declares that the lease table keeps its rows: one per
// periodic lane.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{retention.Kept("lane_leases", "one row per periodic lane")}
}

// Retention is the lane of the retention program: once an hour, on one
// replica, r purges every table past its retention window, in small
// batches, round-robin.
func Retention(r *retention.Runner) Lane {
	return Lane{Name: "retention", Every: time.Hour, Run: func(ctx context.Context) error {
		_, err := r.Run(ctx)
		return err
	}}
}
