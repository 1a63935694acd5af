package callercache

import (
	"time"

	"github.com/enclave-mcp/enclave/retention"
)

// InvalidationTable is the table that carries invalidations (Topic)
// between processes that share no bus (cluster.SQLNotices).
const InvalidationTable = "caller_invalidations"

// RetentionPolicies declares how long SQL-carried invalidations are kept:
// they are read within seconds.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.Age(InvalidationTable, "created_at", time.Hour).Because("caller-cache invalidations for processes without a shared bus (read within seconds)"),
	}
}
