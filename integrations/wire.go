package integrations

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
)

// Wire plugs connected accounts into a server: it declares the retention
// of their tables in policies (they exist whether or not integrations are
// on) and, unless cfg.Disabled is set, builds the service and registers
// on cfg.Registry its capabilities and in lanes the lane renewing tokens
// before they expire. The service is nil when turned off.
func Wire(cfg Config, lanes *schedules.Set, policies *retention.Set) (*Service, error) {
	if err := policies.Add(RetentionPolicies()...); err != nil {
		return nil, err
	}
	if cfg.Disabled {
		return nil, nil
	}
	svc, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := cfg.Registry.Register(svc.Capabilities()...); err != nil {
		return nil, fmt.Errorf("register integrations: %w", err)
	}
	if err := lanes.Add(svc.Schedule()); err != nil {
		return nil, err
	}
	return svc, nil
}

// Deferred stands for a service wired after those that use it (the
// outbound gateway's {{connection:NAME}} and the account deletion's
// revocations are built first): until Set names the service, and for good
// when integrations are off, Use finds no connection and RevokeAll
// revokes nothing.
type Deferred struct{ svc atomic.Pointer[Service] }

// Set names the service (nil: integrations are off).
func (d *Deferred) Set(s *Service) { d.svc.Store(s) }

// Use forwards Service.Use (outbound.Connections).
func (d *Deferred) Use(ctx context.Context, o storage.Owner, name string) (Usable, error) {
	s := d.svc.Load()
	if s == nil {
		return Usable{}, ErrNotFound
	}
	return s.Use(ctx, o, name)
}

// RevokeAll forwards Service.RevokeAll.
func (d *Deferred) RevokeAll(ctx context.Context, o storage.Owner) error {
	return d.svc.Load().RevokeAll(ctx, o)
}
