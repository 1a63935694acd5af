package enclave

import (
	"github.com/enclave-mcp/enclave/federation/fedtables"
)

// assembleFederation declares the retention of the tables of sign-in with
// external providers (package federation). They exist whether or not
// providers are configured.
func (s *Server) assembleFederation() error {
	return s.retention.Add(fedtables.RetentionPolicies()...)
}
