package oauth

import "github.com/enclave-mcp/enclave/retention"

// EnterpriseRetentionPolicies declares the retention of the tables of
// enterprise-managed authorization (ID-JAG; Options.Enterprise). They
// exist whether or not it is configured; the identities table is in
// InventoryTables, so export and deletion cover it.
func EnterpriseRetentionPolicies() []retention.Policy {
	return []retention.Policy{
		retention.UntilAccountDeleted("oauth_enterprise_identities").
			Because("the enterprise IdP subjects linked to an account, so their ID-JAGs redeem as it"),
	}
}
