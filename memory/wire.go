package memory

import (
	"fmt"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
)

// Wire plugs memories into a server: it declares the retention of their
// tables in policies (they exist whether or not memories are on) and,
// unless cfg.Disabled is set, builds the service and registers on
// cfg.Registry its capabilities, the memory:// resources and the
// "memories" prompt, and in lanes the reindex lane (when an embeddings
// API is configured) and, on SQLite, the lane merging the full-text
// index. The service is nil when turned off.
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
		return nil, fmt.Errorf("register memories: %w", err)
	}
	if err := cfg.Registry.RegisterResource(svc.Resources()...); err != nil {
		return nil, fmt.Errorf("register memory resources: %w", err)
	}
	if err := cfg.Registry.RegisterPrompt(svc.Prompts()...); err != nil {
		return nil, fmt.Errorf("register the memories prompt: %w", err)
	}
	if svc.Semantic() {
		if err := lanes.Add(svc.Schedule()); err != nil {
			return nil, err
		}
	}
	if cfg.Store.Dialect() == storage.SQLite {
		// SQLite's full-text index is merged by a lane of its own.
		if err := lanes.Add(svc.IndexSchedule()); err != nil {
			return nil, err
		}
	}
	return svc, nil
}
