package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/uptrace/bun"
)

// Defaults of a Runner.
const (
	DefaultBatch  = 500
	DefaultBudget = 20 * time.Second
)

// Runner purges the tables of a Set.
type Runner struct {
	// DB is the primary database.
	DB bun.IDB
	// Set holds the policies.
	Set *Set
	// Batch is the most rows one batch removes. Default DefaultBatch.
	Batch int
	// Budget is how long a run may go on starting batches after its first
	// pass. Default DefaultBudget.
	Budget time.Duration
	// Logger receives the one-line summary of each run. Default
	// slog.Default().
	Logger *slog.Logger
	// OnPurge, when set, is told the rows each table lost in a run
	// (metrics).
	OnPurge func(table string, rows int64)
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Report says what one run did.
type Report struct {
	// Rows counts removed rows per table (tables that lost none are left
	// out).
	Rows map[string]int64
	// Batches counts batches per table.
	Batches map[string]int
	// BudgetSpent is true when the run stopped with tables still pending.
	BudgetSpent bool
	// Pending names the tables not drained when the budget ran out.
	Pending []string
}

// Run purges in round-robin passes: every pending table gets one batch
// before any table gets a second; a table whose batch came back short is
// drained. The first pass always completes; after it, a new pass starts
// only while the budget lasts. A table that fails is dropped from this run
// (the others go on) and its error is returned with the others'.
func (r *Runner) Run(ctx context.Context) (Report, error) {
	batch, budget := r.Batch, r.Budget
	if batch <= 0 {
		batch = DefaultBatch
	}
	if budget <= 0 {
		budget = DefaultBudget
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	rep := Report{Rows: map[string]int64{}, Batches: map[string]int{}}
	var pending []Policy
	for _, p := range r.Set.Policies() {
		if p.Purges() {
			pending = append(pending, p)
		}
	}
	start := time.Now()
	at := now()
	var errs []error
	for pass := 0; len(pending) > 0; pass++ {
		if pass > 0 && (time.Since(start) >= budget || ctx.Err() != nil) {
			rep.BudgetSpent = true
			break
		}
		next := pending[:0:0]
		for _, p := range pending {
			if ctx.Err() != nil {
				errs = append(errs, ctx.Err())
				next = append(next, p)
				continue
			}
			var n int64
			var err error
			if p.Kind == KindAge {
				n, err = PurgeAge(ctx, r.DB, p, at, batch)
			} else {
				n, err = p.Purge(ctx, r.DB, at, batch)
			}
			rep.Batches[p.Table]++
			if n > 0 {
				rep.Rows[p.Table] += n
			}
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("retention: %s: %w", p.Table, err))
			case n >= int64(batch):
				next = append(next, p)
			}
		}
		pending = next
		if ctx.Err() != nil {
			break
		}
	}
	for _, p := range pending {
		rep.Pending = append(rep.Pending, p.Table)
	}
	if len(rep.Pending) > 0 {
		rep.BudgetSpent = true
	}
	for table, n := range rep.Rows {
		if r.OnPurge != nil {
			r.OnPurge(table, n)
		}
	}
	attrs := []any{"budget_spent", rep.BudgetSpent, "elapsed", time.Since(start).Round(time.Millisecond)}
	for _, p := range r.Set.Policies() {
		if n := rep.Rows[p.Table]; n > 0 {
			attrs = append(attrs, slog.Group(p.Table, "rows", n, "batches", rep.Batches[p.Table]))
		}
	}
	if len(rep.Pending) > 0 {
		attrs = append(attrs, "pending", rep.Pending)
	}
	err := errors.Join(errs...)
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	log.InfoContext(ctx, "retention: purge run", attrs...)
	return rep, err
}
