package quota

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// ThresholdEvent is the admin event of an account crossing 80 % or 100 %
// of one of its plan's limits, once per window.
const ThresholdEvent = "quota.threshold"

// PlansConfig is what WirePlans needs.
type PlansConfig struct {
	Store    *storage.Store
	Registry *capabilities.Registry
	Owners   capabilities.OwnerOf
	// Meter enforces the plans.
	Meter *Meter
	// Audited wraps the admins' plan capabilities so that every change is
	// audited.
	Audited func([]capabilities.Capability) []capabilities.Capability
	// Username names an account in a ThresholdEvent.
	Username func(ctx context.Context, db bun.IDB, owner int64) (string, error)
	// Record records an admin event inside tx (events.Bus.Record).
	Record func(ctx context.Context, tx bun.IDB, typ string, data any) error
}

// WirePlans plugs plans into a server: it declares the retention of
// their tables in policies, makes cfg.Meter enforce the accounts' plans
// (daily and weekly windows; the meter's own limits still apply),
// reports threshold crossings as ThresholdEvent admin events, and
// registers usageGet and the admins' plan capabilities (changes audited).
func WirePlans(cfg PlansConfig, policies *retention.Set) (*Plans, error) {
	if err := policies.Add(PlanRetentionPolicies()...); err != nil {
		return nil, err
	}
	plans := NewPlans(cfg.Store)
	plans.OnAlert = func(ctx context.Context, tx bun.IDB, a Alert) error {
		username, err := cfg.Username(ctx, tx, a.Owner)
		if err != nil {
			return err
		}
		return cfg.Record(ctx, tx, ThresholdEvent, map[string]any{
			"username": username, "meter": a.Meter, "window": a.Window, "period": a.Period, "threshold": a.Threshold, "limit": a.Limit,
		})
	}
	cfg.Meter.SetPlans(plans)
	if err := cfg.Registry.Register(cfg.Audited(plans.Capabilities(cfg.Owners))...); err != nil {
		return nil, fmt.Errorf("register plans: %w", err)
	}
	return plans, nil
}
