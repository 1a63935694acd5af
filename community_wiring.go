package enclave

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/internal/clientnet"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/storage"
)

// assembleCommunity declares the retention of the community's tables
// (they exist whether or not the community is on) and, unless it or code
// mode is off, builds the community: its capabilities, with every admin
// moderation action audited, and the enrichers of its community.* events.
func (s *Server) assembleCommunity(owners capabilities.OwnerOf) error {
	if err := s.retention.Add(community.RetentionPolicies()...); err != nil {
		return err
	}
	if err := s.assemblePlans(owners); err != nil {
		return err
	}
	if s.cfg.Community.Disabled || s.codemode == nil {
		return nil
	}
	svc, err := community.New(community.Config{Store: s.store, Owners: owners, Packages: s.codemode, Events: s.events, Logger: s.log})
	if err != nil {
		return err
	}
	caps := svc.Capabilities()
	for i := range caps {
		if action, ok := communityAuditActions[caps[i].Name]; ok {
			caps[i] = s.auditedCommunity(caps[i], action)
		}
	}
	if err := s.registry.Register(caps...); err != nil {
		return fmt.Errorf("register the community: %w", err)
	}
	s.community = svc
	return nil
}

// communityAuditActions names the audit action of each admin moderation
// capability: who acted, from which address, on which listing or report.
var communityAuditActions = map[string]string{
	"adminCommunityFeature":       "admin_community_feature",
	"adminCommunityDelist":        "admin_community_delist",
	"adminCommunityDelete":        "admin_community_delete",
	"adminCommunityReportResolve": "admin_community_report_resolve",
	"adminUserPlanSet":            "admin_user_plan_set",
	"adminPlanSave":               "admin_plan_save",
}

// auditedCommunity records every call of c that reaches its handler (the
// registry let it through) with the acting admin's hash and the listing
// or report it named.
func (s *Server) auditedCommunity(c capabilities.Capability, action string) capabilities.Capability {
	next := c.Handler
	c.Handler = func(ctx context.Context, call *capabilities.Call, args json.RawMessage) (capabilities.Result, error) {
		res, err := next(ctx, call, args)
		var in struct {
			Listing  string `json:"listing"`
			Report   string `json:"report"`
			Username string `json:"username"`
			Plan     string `json:"plan"`
			Name     string `json:"name"`
		}
		_ = json.Unmarshal(args, &in)
		result := audit.ResultSuccess
		if err != nil || res.IsError {
			result = audit.ResultFailure
		}
		e := audit.Event{Category: audit.CategoryAccount, Action: action, Result: result, IPHash: s.audit.HashIP(clientnet.Addr(ctx))}
		switch {
		case in.Listing != "" && len(in.Listing) <= 64:
			e.Reason = "listing " + auditName(in.Listing)
		case in.Report != "" && len(in.Report) <= 64:
			e.Reason = "report " + auditName(in.Report)
		case in.Username != "" && len(in.Username) <= 64 && len(in.Plan) <= 64:
			// The account as a keyed hash (as every identifier in the log),
			// never its username: the row outlives the account.
			stable, _ := accounts.StableIDByUsername(ctx, s.store.Reader, in.Username)
			e.Reason = "user " + cmp.Or(s.audit.HashUser(stable), "(none)") + " plan " + auditName(in.Plan)
		case in.Name != "" && len(in.Name) <= 64:
			e.Reason = "plan " + auditName(in.Name)
		}
		if call != nil && call.Caller.UserID != "" {
			e.UserHash = s.audit.HashUser(call.Caller.UserID)
		}
		_ = s.audit.Record(ctx, e)
		return res, err
	}
	return c
}

// QuotaThreshold is the admin event of an account crossing 80 % or 100 %
// of one of its plan's limits, once per window.
const QuotaThreshold = "quota.threshold"

// assemblePlans makes the meter enforce the accounts' plans (daily and
// weekly windows; the --quota limits still apply), reports threshold
// crossings as quota.threshold admin events, and registers usageGet and
// the admins' plan capabilities (changes audited).
func (s *Server) assemblePlans(owners capabilities.OwnerOf) error {
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
	caps := plans.Capabilities(owners)
	for i := range caps {
		if action, ok := communityAuditActions[caps[i].Name]; ok {
			caps[i] = s.auditedCommunity(caps[i], action)
		}
	}
	if err := s.registry.Register(caps...); err != nil {
		return fmt.Errorf("register plans: %w", err)
	}
	return nil
}
