package outbox

import (
	"time"

	"github.com/enclave-mcp/enclave/retention"
)

// RetentionPolicies declares how long jobs that gave up (dead letters)
// are kept: deadJobs (Config.JobRetention). Delivered jobs are removed
// when delivered.
func RetentionPolicies(deadJobs time.Duration) []retention.Policy {
	return []retention.Policy{
		retention.Age("outbox", "dead_at", deadJobs).Because("jobs that gave up (Config.JobRetention); delivered jobs are removed when delivered"),
	}
}
