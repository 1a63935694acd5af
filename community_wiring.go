package enclave

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/storage"
)

// assembleCommunity declares the retention of the community's tables
// (they exist whether or not the community is on) and, unless it or code
// mode is off, builds the community: its capabilities, with every admin
// moderation action audited, and the enrichers of its community.* events.
func (s *Server) assembleCommunity(w *wiring) error {
	if err := s.retention.Add(community.RetentionPolicies()...); err != nil {
		return err
	}
	if err := s.assemblePlans(w); err != nil {
		return err
	}
	if s.cfg.Community.Disabled || s.codemode == nil {
		return nil
	}
	svc, err := community.New(community.Config{Store: s.store, Owners: w.owners, Packages: s.codemode, Events: s.events, Logger: s.log})
	if err != nil {
		return err
	}
	if err := s.registry.Register(w.admin.Community(svc.Capabilities())...); err != nil {
		return fmt.Errorf("register the community: %w", err)
	}
	s.community = svc
	return nil
}

// QuotaThreshold is the admin event of an account crossing 80 % or 100 %
// of one of its plan's limits, once per window.
const QuotaThreshold = "quota.threshold"

// assemblePlans makes the meter enforce the accounts' plans (daily and
// weekly windows; the --quota limits still apply), reports threshold
// crossings as quota.threshold admin events, and registers usageGet and
// the admins' plan capabilities (changes audited).
func (s *Server) assemblePlans(w *wiring) error {
	if err := s.retention.Add(quota.PlanRetentionPolicies()...); err != nil {
		return err
	}
	plans := quota.NewPlans(s.store)
	plans.OnAlert = func(ctx context.Context, tx bun.IDB, a quota.Alert) error {
		username, err := accounts.UsernameOf(ctx, tx, a.Owner)
		if err != nil {
			return err
		}
		_, err = s.events.Publish(ctx, tx, QuotaThreshold, map[string]any{
			"username": username, "meter": a.Meter, "window": a.Window, "period": a.Period, "threshold": a.Threshold, "limit": a.Limit,
		})
		return err
	}
	s.meter.SetPlans(plans)
	// The plan's storage bytes bound what an account stores in its
	// storage buckets (docs/community.md, "Storage"): the buckets' counter
	// enforces them, usageGet reports them.
	if s.buckets != nil {
		s.buckets.SetStorageLimit(plans.StorageLimit)
		plans.Storage = func(ctx context.Context, owner int64) (int64, int64, error) {
			u, err := s.buckets.Usage(ctx, storage.Owner{ID: owner})
			return u.Bytes, u.MaxBytes, err
		}
	}
	if err := s.registry.Register(w.admin.Community(plans.Capabilities(w.owners))...); err != nil {
		return fmt.Errorf("register plans: %w", err)
	}
	return nil
}
