package remotemcp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
)

const (
	// Lane is the name of the lane renewing tokens and tool lists.
	Lane = "remotemcp-refresh"
	// ToolsTTL is how old a server's tool list may grow before the lane
	// reads it again (mcpServerRefresh reads it at once).
	ToolsTTL = time.Hour
	// lanePerTick bounds the servers one tick renews, and laneBudget the
	// time it takes: a remote that does not answer holds the lane (every
	// person's renewals) no longer.
	lanePerTick = 20
	laneBudget  = 30 * time.Second
)

// Schedule is the lane renewing access tokens before they expire and tool
// lists older than ToolsTTL, every minute.
func (s *Service) Schedule() schedules.Schedule {
	return schedules.Schedule{Name: Lane, Every: time.Minute, Run: func(ctx context.Context, _ schedules.Tick) error {
		_, err := s.RenewDue(ctx, lanePerTick)
		return err
	}}
}

// RenewDue renews up to limit servers whose token is due for renewal or
// whose tool list is older than ToolsTTL, and reports how many it renewed.
func (s *Service) RenewDue(ctx context.Context, limit int) (int, error) {
	type item struct {
		serverRow
		StableID string `bun:"stable_user_id"`
	}
	now := s.now().UTC()
	var due []item
	err := s.store.Reader.NewSelect().TableExpr("remote_mcp_servers AS r").
		ColumnExpr("r.*, u.stable_user_id").Join("JOIN users AS u ON u.id = r.user_id").
		Where("r.status = ?", StatusActive).
		Where("(r.refresh_at IS NOT NULL AND r.refresh_at <= ?) OR r.tools_at IS NULL OR r.tools_at <= ?", now, now.Add(-ToolsTTL)).
		OrderExpr("r.updated_at").Limit(int64(limit)).Scan(ctx, &due)
	if err != nil {
		return 0, fmt.Errorf("remotemcp: due renewals: %w", err)
	}
	bctx, cancel := context.WithTimeout(ctx, laneBudget)
	defer cancel()
	n := 0
	var errs []error
	for _, it := range due {
		if bctx.Err() != nil {
			break // the rest are still due at the next tick
		}
		o := storage.Owner{ID: it.UserID, StableID: it.StableID}
		r := it.serverRow
		if r.RefreshAt != nil && !now.Before(*r.RefreshAt) {
			_, err := s.accessToken(bctx, o, &r)
			if r.RefreshAt != nil && !now.Before(*r.RefreshAt) {
				// Not renewed (the remote refused, which is recorded on
				// the row, or did not answer, the old token still serving
				// until it expires): the server goes to the back of the
				// queue, so that one whose authorization server does not
				// answer cannot hold the lane tick after tick.
				if _, uerr := s.store.DB.NewUpdate().Model((*serverRow)(nil)).Set("updated_at = ?", s.now().UTC()).
					Where("id = ? AND user_id = ?", r.ID, o.ID).Exec(ctx); uerr != nil {
					errs = append(errs, fmt.Errorf("remotemcp: renewal failure: %w", uerr))
				}
				continue
			}
			if err != nil {
				continue
			}
		}
		if r.ToolsAt == nil || !now.Before(r.ToolsAt.Add(ToolsTTL)) {
			if _, err := s.Refresh(bctx, o, r.Name); err != nil && !errors.Is(err, ErrNotFound) {
				// The failure is on the row (lastError); the server is
				// tried again after its updated_at moves to the back.
				continue
			}
		}
		n++
	}
	return n, errors.Join(errs...)
}
