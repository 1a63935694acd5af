package remotemcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
)

// Wire plugs remote MCP servers into a server: it declares the retention
// of their tables in policies (they exist whether or not the feature is
// on) and, unless cfg.Disabled is set, builds the service and registers
// on cfg.Registry its capabilities and the provider offering each
// server's tools to its owner, and in lanes the lane renewing tokens and
// tool lists. With cfg.Deletions, every account's deletion revokes the
// tokens of its servers (nothing when the feature is off). The service is
// nil when turned off.
func Wire(cfg Config, lanes *schedules.Set, policies *retention.Set) (*Service, error) {
	if err := policies.Add(RetentionPolicies()...); err != nil {
		return nil, err
	}
	var svc *Service // nil when turned off: it revokes nothing
	if !cfg.Disabled {
		var err error
		if svc, err = New(cfg); err != nil {
			return nil, err
		}
		if err := cfg.Registry.AddProvider(Prefix, svc.Provider()); err != nil {
			return nil, err
		}
		if err := cfg.Registry.Register(svc.Capabilities()...); err != nil {
			return nil, fmt.Errorf("register remote MCP servers: %w", err)
		}
		if err := lanes.Add(svc.Schedule()); err != nil {
			return nil, err
		}
	}
	if cfg.Deletions != nil {
		cfg.Deletions.AddHooks(lifecycle.Hook{Name: "revoke remote MCP server tokens", Run: svc.RevokeAll})
	}
	return svc, nil
}

// QuotaLimits puts every remote tool's capability in the quota class
// QuotaClass ("remote"), limited to DefaultDailyCalls a day unless l
// already sets that class's limit (--quota remote=N/day).
func QuotaLimits(l quota.Limits) quota.Limits {
	return l.WithDefaultClass(QuotaClass, DefaultDailyCalls, Prefix+"*")
}

// ServeClientDocument serves GET ClientMetadataPath/{id}: the client ID
// metadata document enclave presents, as client_id, to a remote server's
// authorization server. A nil service (the feature off) answers 404.
func (s *Service) ServeClientDocument(w http.ResponseWriter, r *http.Request) {
	if s == nil {
		http.NotFound(w, r)
		return
	}
	doc, err := s.ClientDocument(r.Context(), r.PathValue("id"))
	if errors.Is(err, ErrNotFound) {
		http.NotFound(w, r)
		return
	}
	if err != nil {
		s.log.ErrorContext(r.Context(), "remote MCP client document", "err", err)
		http.Error(w, "The document is not available now.", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_ = json.NewEncoder(w).Encode(doc)
}
