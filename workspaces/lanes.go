package workspaces

import (
	"context"
	"time"

	"github.com/enclave-mcp/enclave/internal/lanes"
)

// Lanes are the server's periodic lanes of workspaces: every minute,
// "workspace-jobs" moves to the outbox the jobs an op recorded in its
// workspace file but could not move itself (SQLite; a crash or a failure
// after the commit). A nil service (workspaces off) has none.
func (s *Service) Lanes() []lanes.Lane {
	if s == nil {
		return nil
	}
	return []lanes.Lane{{Name: "workspace-jobs", Every: time.Minute, Run: func(ctx context.Context) error {
		_, err := s.SweepPendingJobs(ctx, time.Minute, 200)
		return err
	}}}
}
