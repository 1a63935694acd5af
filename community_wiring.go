package enclave

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/community"
)

// assembleCommunity declares the retention of the community's tables
// (they exist whether or not the community is on) and, unless it or code
// mode is off, builds the community: its capabilities, with every admin
// moderation action audited, and the enrichers of its community.* events.
func (s *Server) assembleCommunity(owners capabilities.OwnerOf) error {
	if err := s.retention.Add(community.RetentionPolicies()...); err != nil {
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
}

// auditedCommunity records every call of c that reaches its handler (the
// registry let it through) with the acting admin's hash and the listing
// or report it named.
func (s *Server) auditedCommunity(c capabilities.Capability, action string) capabilities.Capability {
	next := c.Handler
	c.Handler = func(ctx context.Context, call *capabilities.Call, args json.RawMessage) (capabilities.Result, error) {
		res, err := next(ctx, call, args)
		var in struct {
			Listing string `json:"listing"`
			Report  string `json:"report"`
		}
		_ = json.Unmarshal(args, &in)
		result := audit.ResultSuccess
		if err != nil || res.IsError {
			result = audit.ResultFailure
		}
		e := audit.Event{Category: audit.CategoryAccount, Action: action, Result: result, IPHash: s.audit.HashIP(clientIP(ctx))}
		switch {
		case in.Listing != "" && len(in.Listing) <= 64:
			e.Reason = "listing " + auditName(in.Listing)
		case in.Report != "" && len(in.Report) <= 64:
			e.Reason = "report " + auditName(in.Report)
		}
		if call != nil && call.Caller.UserID != "" {
			e.UserHash = s.audit.HashUser(call.Caller.UserID)
		}
		_ = s.audit.Record(ctx, e)
		return res, err
	}
	return c
}
