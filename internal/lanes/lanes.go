// Package lanes runs named periodic jobs (retention sweeps, cleanup) on
// every replica, with an SQL lease so that each lane runs on one replica per
// period. A replica that dies holding a lease loses it when the lease
// expires; another takes the next period.
package lanes

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/uptrace/bun"
)

// Lane is one periodic job.
type Lane struct {
	// Name identifies the lane across replicas.
	Name string
	// Every is the period; the lane runs at most once per period across
	// all replicas.
	Every time.Duration
	// Run does the work. Its context ends when the scheduler stops or
	// after Every, whichever is first.
	Run func(ctx context.Context) error
}

// Scheduler runs lanes.
type Scheduler struct {
	db     *bun.DB
	holder string
	log    *slog.Logger
	lanes  []Lane
	now    func() time.Time
	// OnRun, when set, is told each run of a lane on this replica and its
	// error (nil on success). Metrics hang off it.
	OnRun func(lane string, err error)
}

// New returns a scheduler for lanes on db. Each process should have one.
func New(db *bun.DB, log *slog.Logger, lanes ...Lane) *Scheduler {
	if log == nil {
		log = slog.Default()
	}
	return &Scheduler{db: db, holder: crand.Text(), log: log, lanes: lanes, now: func() time.Time { return time.Now().UTC() }}
}

// Run runs every lane until ctx ends: a first attempt shortly after start
// (after a random delay of up to a tenth of the period, so replicas
// started together spread out), then once per period.
func (s *Scheduler) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, l := range s.lanes {
		wg.Go(func() {
			delay := time.Duration(rand.Int64N(int64(l.Every/10) + 1))
			t := time.NewTimer(delay)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if _, err := s.Tick(ctx, l); err != nil && ctx.Err() == nil {
					s.log.WarnContext(ctx, "lanes: run failed", "lane", l.Name, "err", err)
				}
				t.Reset(l.Every)
			}
		})
	}
	wg.Wait()
}

// Tick runs lane l once if this replica wins its lease for the current
// period, and reports whether it ran.
func (s *Scheduler) Tick(ctx context.Context, l Lane) (bool, error) {
	won, err := s.acquire(ctx, l)
	if err != nil || !won {
		return false, err
	}
	rctx, cancel := context.WithTimeout(ctx, l.Every)
	defer cancel()
	runErr := l.Run(rctx)
	if s.OnRun != nil {
		s.OnRun(l.Name, runErr)
	}
	msg := ""
	if runErr != nil {
		msg = runErr.Error()
		if len(msg) > 500 {
			msg = msg[:500]
		}
	}
	if _, err := s.db.NewUpdate().Table("lane_leases").Set("last_run_at = ?, last_error = ?", s.now(), msg).
		Where("name = ? AND holder = ?", l.Name, s.holder).Exec(ctx); err != nil && runErr == nil {
		return true, fmt.Errorf("lanes: %s: record run: %w", l.Name, err)
	}
	if runErr != nil {
		return true, fmt.Errorf("lanes: %s: %w", l.Name, runErr)
	}
	return true, nil
}

// acquire takes the lane's lease for one period when it is free or expired.
func (s *Scheduler) acquire(ctx context.Context, l Lane) (bool, error) {
	now := s.now()
	until := now.Add(l.Every)
	res, err := s.db.NewRaw(`INSERT INTO lane_leases (name, holder, expires_at, last_error) VALUES (?, ?, ?, '')
		ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
		WHERE lane_leases.expires_at <= ?`, l.Name, s.holder, until, now).Exec(ctx)
	if err != nil {
		return false, fmt.Errorf("lanes: %s: lease: %w", l.Name, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}
