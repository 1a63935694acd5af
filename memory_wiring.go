package enclave

import (
	"fmt"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/storage"
)

// assembleMemory declares the retention of the memory tables (they exist
// whether or not memories are on) and, unless Config.Memory.Disabled is
// set, builds memories: their capabilities, the memory:// resources, the
// "memories" prompt, the reindex lane (which has work only when an
// embedder is configured) and, on SQLite, the lane merging the full-text
// index.
func (s *Server) assembleMemory(owners capabilities.OwnerOf) error {
	if err := s.retention.Add(memory.RetentionPolicies()...); err != nil {
		return err
	}
	if s.cfg.Memory.Disabled {
		return nil
	}
	svc, err := memory.New(memory.Config{Options: s.cfg.Memory, Store: s.store, Registry: s.registry, Owners: owners, Logger: s.log})
	if err != nil {
		return err
	}
	if err := s.registry.Register(svc.Capabilities()...); err != nil {
		return fmt.Errorf("register memories: %w", err)
	}
	if err := s.registry.RegisterResource(svc.Resources()...); err != nil {
		return fmt.Errorf("register memory resources: %w", err)
	}
	if err := s.registry.RegisterPrompt(svc.Prompts()...); err != nil {
		return fmt.Errorf("register the memories prompt: %w", err)
	}
	if svc.Semantic() {
		if err := s.schedules.Add(svc.Schedule()); err != nil {
			return err
		}
	}
	if s.store.Dialect() == storage.SQLite {
		// SQLite's full-text index is merged by a lane of its own.
		if err := s.schedules.Add(svc.IndexSchedule()); err != nil {
			return err
		}
	}
	s.memory = svc
	return nil
}
