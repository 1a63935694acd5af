package enclave

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"

	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/storage"
)

// assembleRemoteMCP declares the retention of the remote MCP tables (they
// exist whether or not the feature is on) and, unless
// Config.RemoteMCP.Disabled is set, builds remote MCP servers: their
// capabilities, the provider offering each server's tools to its owner and
// the lane renewing tokens and tool lists.
func (s *Server) assembleRemoteMCP(owners capabilities.OwnerOf) error {
	if err := s.retention.Add(remotemcp.RetentionPolicies()...); err != nil {
		return err
	}
	if s.cfg.RemoteMCP.Disabled {
		return nil
	}
	svc, err := remotemcp.New(remotemcp.Config{Options: s.cfg.RemoteMCP, Store: s.store, Ring: s.ring, Owners: owners,
		Registry: s.registry, BaseURL: s.cfg.BaseURL, Audit: s.audit, Logger: s.log, Bus: s.bus})
	if err != nil {
		return err
	}
	if err := s.registry.AddProvider(remotemcp.Prefix, svc.Provider()); err != nil {
		return err
	}
	if err := s.registry.Register(svc.Capabilities()...); err != nil {
		return fmt.Errorf("register remote MCP servers: %w", err)
	}
	if err := s.schedules.Add(svc.Schedule()); err != nil {
		return err
	}
	s.remoteMCP = svc
	return nil
}

// remoteMCPQuota puts every remote tool's capability in the quota class
// "remote", limited to remotemcp.DefaultDailyCalls a day unless the
// operator set that class's limit (--quota remote=N/day).
func remoteMCPQuota(l quota.Limits) quota.Limits {
	classes := maps.Clone(l.Classes)
	if classes == nil {
		classes = map[string]string{}
	}
	if _, set := classes[remotemcp.Prefix+"*"]; !set {
		classes[remotemcp.Prefix+"*"] = remotemcp.QuotaClass
	}
	daily := maps.Clone(l.Daily)
	if daily == nil {
		daily = map[string]int64{}
	}
	if _, set := daily[remotemcp.QuotaClass]; !set {
		daily[remotemcp.QuotaClass] = remotemcp.DefaultDailyCalls
	}
	l.Classes, l.Daily = classes, daily
	return l
}

// remoteMCPDeletionHook revokes a deleted account's remote server tokens
// (best effort, each attempt audited) before its rows go.
func (s *Server) remoteMCPDeletionHook() lifecycle.Hook {
	return lifecycle.Hook{Name: "revoke remote MCP server tokens", Run: func(ctx context.Context, o storage.Owner) error {
		if s.remoteMCP == nil {
			return nil
		}
		return s.remoteMCP.RevokeAll(ctx, o)
	}}
}

// RemoteMCP returns the remote MCP servers service, or nil when
// Config.RemoteMCP.Disabled is set.
func (s *Server) RemoteMCP() *remotemcp.Service { return s.remoteMCP }

// remoteMCPClientDocument serves the client ID metadata document enclave
// presents, as client_id, to a remote server's authorization server.
func (s *Server) remoteMCPClientDocument(w http.ResponseWriter, r *http.Request) {
	if s.remoteMCP == nil {
		http.NotFound(w, r)
		return
	}
	doc, err := s.remoteMCP.ClientDocument(r.Context(), r.PathValue("id"))
	if errors.Is(err, remotemcp.ErrNotFound) {
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
