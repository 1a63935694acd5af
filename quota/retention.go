package quota

import (
	"time"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// RetentionPolicies declares how long the daily usage counters live:
// KeepDays days, today included.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{retention.Age("quota_usage", "day", (KeepDays-1)*24*time.Hour).In(retention.Day)}
}

// RegisterInventory records the daily usage counters as user-owned.
func RegisterInventory(inv *storage.Inventory) error {
	return inv.AddTable(storage.Table{Name: "quota_usage"})
}
