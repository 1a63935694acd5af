package buckets

import (
	"context"
	"fmt"

	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
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

// FollowPlans makes the plans' storage bytes bound what an account
// stores in its buckets (docs/community.md, "Storage"): the buckets'
// counter enforces them, and plans' usageGet reports them. A nil service
// (buckets off) leaves plans without storage.
func (s *Service) FollowPlans(plans *quota.Plans) {
	if s == nil || plans == nil {
		return
	}
	s.SetStorageLimit(plans.StorageLimit)
	plans.Storage = func(ctx context.Context, owner int64) (int64, int64, error) {
		u, err := s.Usage(ctx, storage.Owner{ID: owner})
		return u.Bytes, u.MaxBytes, err
	}
}
