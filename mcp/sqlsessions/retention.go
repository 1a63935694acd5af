package sqlsessions

import (
	"time"

	"github.com/enclave-mcp/enclave/retention"
)

// RetentionPolicies declares how long shared sessions, their events and
// answers, and spent request states are kept.
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.Age("mcp_sessions", "last_used_at", 30*time.Minute).Because("shared MCP sessions idle longer than the session lifetime"),
		retention.Age("mcp_session_answers", "created_at", AnswerTTL).Because("client answers to elicitation or sampling not yet collected by the asking replica"),
		retention.Age("mcp_session_events", "created_at", EventTTL).Because("the resumable-stream window"),
		retention.Age("mcp_spent_states", "expires_at", time.Minute).Because("ids of used 2026-07-28 requestStates; past its expiry a state's signature refuses it anyway"),
	}
}
