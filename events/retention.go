package events

import "github.com/enclave-mcp/enclave/retention"

// RetentionPolicies declares how long webhook subscriptions live: until
// deleted or their admin's account is (BurstRetention declares the
// denial-burst table).
func RetentionPolicies() []retention.Policy {
	return []retention.Policy{retention.UntilAccountDeleted("webhook_subscriptions").Because("an admin's webhook subscriptions")}
}
