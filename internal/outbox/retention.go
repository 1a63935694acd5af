package outbox

import (
	"time"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// RetentionPolicies declares how long jobs that gave up (dead letters)
// are kept: deadJobs (Config.JobRetention). Delivered jobs are removed
// when delivered.
func RetentionPolicies(deadJobs time.Duration) []retention.Policy {
	return []retention.Policy{
		retention.Age("outbox", "dead_at", deadJobs).Because("jobs that gave up (Config.JobRetention); delivered jobs are removed when delivered"),
	}
}

// RegisterInventory records the outbox as user-owned: jobs that concern a
// user carry their owner (mail rows have none); the payload is redacted
// from exports.
func RegisterInventory(inv *storage.Inventory) error {
	return inv.AddTable(storage.Table{Name: "outbox", Redact: []string{"payload"}})
}
