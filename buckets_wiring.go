package enclave

import (
	"fmt"

	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities"
)

// assembleBuckets declares the retention of the bucket tables (they exist
// whether or not buckets are on) and, unless Config.Buckets.Disabled is
// set, builds storage buckets: their capabilities, which code mode's
// storage binding calls (so it is assembled first), and the lane that
// reconciles the per-user counters.
func (s *Server) assembleBuckets(owners capabilities.OwnerOf) error {
	// A run's record is written when it ends: its bucket is kept for at
	// least twice the longest a run can last.
	runTimeout := s.cfg.CodeMode.Limits.WithDefaults().Timeout
	if err := s.retention.Add(buckets.RetentionPolicies(buckets.RetentionOptions{RunTimeout: runTimeout})...); err != nil {
		return err
	}
	if s.cfg.Buckets.Disabled {
		return nil
	}
	svc, err := buckets.New(buckets.Config{Options: s.cfg.Buckets, Store: s.store, Registry: s.registry, Owners: owners, Logger: s.log})
	if err != nil {
		return err
	}
	if err := s.registry.Register(svc.Capabilities()...); err != nil {
		return fmt.Errorf("register storage buckets: %w", err)
	}
	if err := s.schedules.Add(svc.Schedule()); err != nil {
		return err
	}
	s.buckets = svc
	return nil
}
