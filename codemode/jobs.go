package codemode

import (
	"context"
	"fmt"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
)

// JobLane is the name of the schedule that runs due package jobs.
const JobLane = "codemode-jobs"

// jobsPerTick bounds the jobs one tick starts; the rest wait a minute.
const jobsPerTick = 50

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
		_, err := s.RunDueJobs(ctx, t.At, t.Invoke)
		return err
	}}
}

// InvokeAs runs a capability as a user (by stable id), non-interactive.
type InvokeAs func(ctx context.Context, userID, capability string, args any) (capabilities.Result, error)

// RunDueJobs starts the jobs due at now, each claimed first so that no
// other tick runs it meanwhile, and returns how many it ran.
func (s *Service) RunDueJobs(ctx context.Context, now time.Time, invoke InvokeAs) (int, error) {
	now = now.UTC()
	var due []struct {
		ID        int64     `bun:"id"`
		Name      string    `bun:"name"`
		Export    string    `bun:"export_name"`
		Schedule  string    `bun:"schedule"`
		NextRunAt time.Time `bun:"next_run_at"`
		Package   string    `bun:"package"`
		StableID  string    `bun:"stable_user_id"`
	}
	err := s.store.DB.NewSelect().TableExpr("code_package_jobs AS j").
		Join("JOIN code_packages AS p ON p.id = j.package_id AND p.user_id = j.user_id").
		Join("JOIN users AS u ON u.id = j.user_id").
		ColumnExpr("j.id, j.name, j.export_name, j.schedule, j.next_run_at, p.name AS package, u.stable_user_id").
		Where("j.next_run_at <= ?", now).
		Where("(j.running_since IS NULL OR j.running_since < ?)", now.Add(-staleRun)).
		Where("u.deleting_at IS NULL AND u.suspended_at IS NULL").
		OrderExpr("j.next_run_at").Limit(jobsPerTick).Scan(ctx, &due)
	if err != nil {
		return 0, fmt.Errorf("codemode: due jobs: %w", err)
	}
	ran := 0
	for _, j := range due {
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
		status, runID := s.runJob(ctx, invoke, j.StableID, j.Package, j.Name, j.Export)
		if _, err := s.store.DB.NewUpdate().Table("code_package_jobs").
			Set("running_since = NULL").Set("last_status = ?", status).Set("last_run_id = ?", runID).
			Where("id = ?", j.ID).Exec(context.WithoutCancel(ctx)); err != nil {
			s.log.WarnContext(ctx, "codemode: releasing a job failed", "job", j.ID, "err", err)
		}
		ran++
	}
	return ran, nil
}

// runJob runs one job through the registry and says how it ended.
func (s *Service) runJob(ctx context.Context, invoke InvokeAs, userID, pkg, job, export string) (status, runID string) {
	var args map[string]any
	if o, err := s.ownerByStableID(ctx, userID); err == nil {
		if _, v, err := s.lookup(ctx, s.store.Reader, o, pkg, 0); err == nil {
			if m, _, err := v.decode(); err == nil {
				args = m.Jobs[job].Args
			}
		}
	}
	res, err := invoke(context.WithValue(ctx, jobKey{}, true), userID, "packageRun",
		RunInput{Name: pkg, Export: export, Args: args})
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

func (s *Service) ownerByStableID(ctx context.Context, stableID string) (storage.Owner, error) {
	o := storage.Owner{StableID: stableID}
	err := s.store.Reader.NewSelect().Table("users").Column("id").Where("stable_user_id = ?", stableID).Scan(ctx, &o.ID)
	return o, err
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
