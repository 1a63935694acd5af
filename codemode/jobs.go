package codemode

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
)

// JobLane is the name of the schedule that runs due package jobs.
const JobLane = "codemode-jobs"

// jobsPerTick bounds the jobs one tick starts, jobsPerUserPerTick those of
// one account, and tickBudget how long a tick keeps starting jobs; the
// rest wait for the next minute.
const (
	jobsPerTick        = 50
	jobsPerUserPerTick = 2
	tickBudget         = 45 * time.Second
)

// staleRun is how long a job may look running before another tick may
// take it again (its replica died): past any run's wall-time limit.
const staleRun = 10 * time.Minute

type jobKey struct{}

// Schedule returns the schedule that runs due package jobs once a minute
// (on one replica at a time). Each job runs its export through
// Registry.Invoke as the package's owner, a non-interactive caller, and is
// recorded as a run of kind "job"; a job is never run twice at once.
func (s *Service) Schedule() schedules.Schedule {
	return schedules.Schedule{Name: JobLane, Every: time.Minute, Run: func(ctx context.Context, t schedules.Tick) error {
		_, err := s.RunDueJobs(ctx, t.At)
		return err
	}}
}

// RunDueJobs starts the jobs due at now, each claimed first so that no
// other tick runs it meanwhile, and returns how many it ran.
func (s *Service) RunDueJobs(ctx context.Context, now time.Time) (int, error) {
	now = now.UTC()
	var due []struct {
		ID        int64     `bun:"id"`
		Name      string    `bun:"name"`
		Export    string    `bun:"export_name"`
		Schedule  string    `bun:"schedule"`
		NextRunAt time.Time `bun:"next_run_at"`
		Package   string    `bun:"package"`
		StableID  string    `bun:"stable_user_id"`
		Scopes    string    `bun:"scopes"`
		Confined  *string   `bun:"confined"`
	}
	err := s.store.DB.NewSelect().TableExpr("code_package_jobs AS j").
		Join("JOIN code_packages AS p ON p.id = j.package_id AND p.user_id = j.user_id").
		Join("JOIN users AS u ON u.id = j.user_id").
		ColumnExpr("j.id, j.name, j.export_name, j.schedule, j.next_run_at, j.scopes, j.confined, p.name AS package, u.stable_user_id").
		Where("j.next_run_at <= ?", now).
		Where("(j.running_since IS NULL OR j.running_since < ?)", now.Add(-staleRun)).
		Where("u.deleting_at IS NULL AND u.suspended_at IS NULL").
		OrderExpr("j.next_run_at").Limit(jobsPerTick).Scan(ctx, &due)
	if err != nil {
		return 0, fmt.Errorf("codemode: due jobs: %w", err)
	}
	ran := 0
	perUser := map[string]int{}
	started := time.Now()
	for _, j := range due {
		// Fairness: a few accounts with slow jobs cannot hold the lane.
		// What is left waits for the next tick, its claim untouched.
		if perUser[j.StableID] >= jobsPerUserPerTick || time.Since(started) > tickBudget {
			continue
		}
		perUser[j.StableID]++
		sched, err := ParseSchedule(j.Schedule)
		if err != nil {
			continue
		}
		next := sched.Next(now)
		if next.IsZero() {
			next = now.AddDate(5, 0, 0)
		}
		// Claim: only the tick that moves next_run_at from the value it
		// read, while no run holds the job, runs it.
		res, err := s.store.DB.NewUpdate().Table("code_package_jobs").
			Set("running_since = ?", now).Set("next_run_at = ?", next).
			Where("id = ? AND next_run_at = ?", j.ID, j.NextRunAt).
			Where("(running_since IS NULL OR running_since < ?)", now.Add(-staleRun)).Exec(ctx)
		if err != nil {
			return ran, fmt.Errorf("codemode: claim job: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			continue
		}
		status, runID := s.runJob(ctx, authority{scopes: j.Scopes, confined: j.Confined}, j.StableID, j.Package, j.Name, j.Export)
		if _, err := s.store.DB.NewUpdate().Table("code_package_jobs").
			Set("running_since = NULL").Set("last_status = ?", status).Set("last_run_id = ?", runID).
			Where("id = ?", j.ID).Exec(context.WithoutCancel(ctx)); err != nil {
			s.log.WarnContext(ctx, "codemode: releasing a job failed", "job", j.ID, "err", err)
		}
		ran++
	}
	return ran, nil
}

// runJob runs one job through the registry and says how it ended: as the
// package's owner, loaded fresh, non-interactive, and with no more
// authority than the credential that saved the job.
func (s *Service) runJob(ctx context.Context, a authority, userID, pkg, job, export string) (status, runID string) {
	if s.cfg.Loader == nil {
		return StatusFailed, ""
	}
	caller, err := s.cfg.Loader.LoadCaller(ctx, userID)
	if err != nil {
		s.log.InfoContext(ctx, "codemode: a package job's owner could not be loaded", "package", pkg, "job", job, "err", err)
		return StatusFailed, ""
	}
	caller.Interactive, caller.Session = false, false
	caller = a.apply(caller)
	var args map[string]any
	if _, v, err := s.lookup(ctx, s.store.Reader, storage.Owner{ID: caller.OwnerID, StableID: userID}, pkg, 0); err == nil && caller.OwnerID != 0 {
		if m, _, err := v.decode(); err == nil {
			args = m.Jobs[job].Args
		}
	}
	raw, _ := json.Marshal(RunInput{Name: pkg, Export: export, Args: args})
	res, err := s.reg.Invoke(context.WithValue(ctx, jobKey{}, true), caller, "packageRun", raw)
	if err != nil {
		s.log.InfoContext(ctx, "codemode: a package job was refused", "package", pkg, "job", job, "err", err)
		return StatusFailed, ""
	}
	if out, ok := res.Structured.(Output); ok {
		if out.Failed() {
			return StatusFailed, out.RunID
		}
		return StatusSucceeded, out.RunID
	}
	return StatusFailed, ""
}

// JobState is a package job as the account page shows it.
type JobState struct {
	Package    string    `json:"package"`
	Name       string    `json:"name"`
	Export     string    `json:"export"`
	Schedule   string    `json:"schedule"`
	NextRunAt  time.Time `json:"nextRunAt"`
	Running    bool      `json:"running"`
	LastStatus string    `json:"lastStatus,omitempty"`
	LastRunID  string    `json:"lastRunId,omitempty"`
}

// ListJobs returns the owner's package jobs, by package and name.
func (s *Service) ListJobs(ctx context.Context, o storage.Owner) ([]JobState, error) {
	var rows []struct {
		Package      string     `bun:"package"`
		Name         string     `bun:"name"`
		ExportName   string     `bun:"export_name"`
		Schedule     string     `bun:"schedule"`
		NextRunAt    time.Time  `bun:"next_run_at"`
		RunningSince *time.Time `bun:"running_since"`
		LastRunID    string     `bun:"last_run_id"`
		LastStatus   string     `bun:"last_status"`
	}
	err := s.store.Reader.NewSelect().TableExpr("code_package_jobs AS j").
		Join("JOIN code_packages AS p ON p.id = j.package_id AND p.user_id = j.user_id").
		ColumnExpr("p.name AS package, j.name, j.export_name, j.schedule, j.next_run_at, j.running_since, j.last_run_id, j.last_status").
		Where("j.user_id = ?", o.ID).OrderExpr("p.name, j.name").Limit(1000).Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("codemode: jobs: %w", err)
	}
	out := make([]JobState, 0, len(rows))
	for _, r := range rows {
		out = append(out, JobState{Package: r.Package, Name: r.Name, Export: r.ExportName, Schedule: r.Schedule,
			NextRunAt: r.NextRunAt, Running: r.RunningSince != nil, LastStatus: r.LastStatus, LastRunID: r.LastRunID})
	}
	return out, nil
}
