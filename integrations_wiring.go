package enclave

import (
	"context"
	"fmt"

	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/storage"
)

// assembleIntegrations declares the retention of the integration tables
// (they exist whether or not integrations are on) and, unless
// Config.Integrations.Disabled is set, builds connected accounts: their
// capabilities and the lane renewing tokens before they expire.
func (s *Server) assembleIntegrations(owners capabilities.OwnerOf) error {
	if err := s.retention.Add(integrations.RetentionPolicies()...); err != nil {
		return err
	}
	if s.cfg.Integrations.Disabled {
		return nil
	}
	svc, err := integrations.New(integrations.Config{Options: s.cfg.Integrations, Store: s.store, Ring: s.ring, Owners: owners,
		BaseURL: s.cfg.BaseURL, Audit: s.audit, Logger: s.log})
	if err != nil {
		return err
	}
	if err := s.registry.Register(svc.Capabilities()...); err != nil {
		return fmt.Errorf("register integrations: %w", err)
	}
	if err := s.schedules.Add(svc.Schedule()); err != nil {
		return err
	}
	s.integrations = svc
	return nil
}

// integrationsDeletionHook revokes a deleted account's connections at
// their providers (best effort, each attempt audited) before its rows go.
// The lifecycle service is built before integrations, so the hook reads
// the service when it runs.
func (s *Server) integrationsDeletionHook() lifecycle.Hook {
	return lifecycle.Hook{Name: "revoke connected accounts", Run: func(ctx context.Context, o storage.Owner) error {
		if s.integrations == nil {
			return nil
		}
		return s.integrations.RevokeAll(ctx, o)
	}}
}

// Integrations returns the connected-accounts service, or nil when
// Config.Integrations.Disabled is set.
func (s *Server) Integrations() *integrations.Service { return s.integrations }

// serverConnections gives the outbound gateway, built before integrations,
// the connections of the server's integrations service (none when
// Config.Integrations.Disabled is set).
type serverConnections struct{ s *Server }

func (c serverConnections) Use(ctx context.Context, o storage.Owner, name string) (integrations.Usable, error) {
	if c.s.integrations == nil {
		return integrations.Usable{}, integrations.ErrNotFound
	}
	return c.s.integrations.Use(ctx, o, name)
}
