package buckets

import (
	"fmt"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
)

// Wire plugs storage buckets into a server: it declares the retention of
// their tables in policies, as ro sets them (they exist whether or not
// buckets are on) and, unless cfg.Disabled is set, builds the service and
// registers on cfg.Registry its capabilities (code mode's storage binding
// calls them, so buckets are wired first) and in lanes the lane that
// reconciles the per-user counters. The service is nil when turned off.
func Wire(cfg Config, lanes *schedules.Set, policies *retention.Set, ro RetentionOptions) (*Service, error) {
	if err := policies.Add(RetentionPolicies(ro)...); err != nil {
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
		return nil, fmt.Errorf("register storage buckets: %w", err)
	}
	if err := lanes.Add(svc.Schedule()); err != nil {
		return nil, err
	}
	return svc, nil
}
