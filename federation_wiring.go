package enclave

import (
	"fmt"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/federation/fedtables"
)

// assembleFederation declares the retention of the tables of sign-in with
// external providers (they exist whether or not providers are
// configured), builds the federation service for Config.SignInProviders
// (the web shell's /auth/external routes use it) and registers
// identityList and identityUnlink.
func (s *Server) assembleFederation(owners capabilities.OwnerOf) error {
	if err := s.retention.Add(fedtables.RetentionPolicies()...); err != nil {
		return err
	}
	svc, err := federation.New(federation.Config{Store: s.store, BaseURL: s.cfg.BaseURL, Providers: s.cfg.SignInProviders})
	if err != nil {
		return err
	}
	if err := s.registry.Register(svc.Capabilities(owners)...); err != nil {
		return fmt.Errorf("register federation: %w", err)
	}
	s.federation = svc
	return nil
}

// Federation returns the service signing people in with external
// providers.
func (s *Server) Federation() *federation.Service { return s.federation }
