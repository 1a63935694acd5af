package feedback

import (
	"time"

	"github.com/enclave-mcp/enclave/retention"
)

// RetentionPolicies declares how long feedback lives: a year after it is
// resolved or dismissed; open items stay until reviewed or the
// submitter's account is deleted.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.Age("platform_feedback", "updated_at", 365*24*time.Hour).If("status IN ('resolved', 'dismissed')").
			Because("resolved and dismissed feedback; open and triaged items stay until reviewed or the submitter's account is deleted"),
		retention.Kept("feedback_mails", "markers that a decision mail was queued; deleted with their feedback row (ON DELETE CASCADE)"),
	}
}
