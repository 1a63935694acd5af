package enclave

import (
	"github.com/enclave-mcp/enclave/retention"
)

// assembleEnterpriseAuth declares the retention of the tables of
// enterprise-managed authorization (ID-JAG; Config.OAuth.Enterprise). The
// grant itself is part of the OAuth server; its identities table is in
// oauth.InventoryTables, so export and deletion cover it.
func (s *Server) assembleEnterpriseAuth() error {
	return s.retention.Add(
		retention.UntilAccountDeleted("oauth_enterprise_identities").
			Because("the enterprise IdP subjects linked to an account, so their ID-JAGs redeem as it"),
	)
}
