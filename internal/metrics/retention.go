package metrics

import (
	"time"

	"github.com/enclave-mcp/enclave/retention"
)

// DailyRetention keeps the admin overview's daily counts.
const DailyRetention = 400 * 24 * time.Hour

// RetentionPolicies declares how long the daily rollup is kept.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{retention.Age("metric_daily", "day", DailyRetention).In(retention.Day)}
}
