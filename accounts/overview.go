package accounts

import (
	"context"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

// OverviewDay is one day of the admin overview's chart.
type OverviewDay struct {
	Day     string `json:"day" jsonschema:"UTC date, YYYY-MM-DD" schema:"format=date"`
	Calls   int64  `json:"calls" jsonschema:"capability calls let through"`
	Denials int64  `json:"denials" jsonschema:"capability calls refused"`
}

// OverviewOutput is the output of adminOverview.
type OverviewOutput struct {
	Users        UserCounts    `json:"users"`
	ActiveGrants int           `json:"activeGrants" jsonschema:"OAuth authorizations holding an unexpired token"`
	Days         []OverviewDay `json:"days" jsonschema:"the last 30 days, oldest first"`
}

// OverviewSources are the numbers of the admin overview that live outside
// the accounts service.
type OverviewSources struct {
	// ActiveGrants counts the OAuth authorizations holding an unexpired
	// token.
	ActiveGrants func(ctx context.Context) (int, error)
	// Days returns the capability calls and denials of the last n UTC
	// days up to now, oldest first.
	Days func(ctx context.Context, n int, now time.Time) ([]OverviewDay, error)
}

// OverviewCapability returns adminOverview: the numbers of the admin
// overview page, for admins only. The daily counts come from src.Days
// (the metrics' in-memory rollup, flushed to SQL every minute), never
// from a write per call.
func (s *Service) OverviewCapability(src OverviewSources) capabilities.Capability {
	return capabilities.Define(capabilities.Spec[struct{}, OverviewOutput]{
		Name: "adminOverview", Domain: "admin", Title: "Server overview",
		Description: "Account totals (all, new in 30 days, unverified, suspended), active OAuth authorizations, and capability calls and denials per day for the last 30 days. Admins only.",
		Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
		Requires:    capabilities.Requirement{Role: capabilities.RoleAdmin},
		Handler: func(ctx context.Context, _ *capabilities.Call, _ struct{}) (OverviewOutput, error) {
			now := time.Now().UTC()
			var out OverviewOutput
			var err error
			if out.Users, err = s.Roles.CountUsers(ctx, now.AddDate(0, 0, -30)); err != nil {
				return out, err
			}
			if out.ActiveGrants, err = src.ActiveGrants(ctx); err != nil {
				return out, err
			}
			out.Days, err = src.Days(ctx, 30, now)
			return out, err
		},
	})
}
