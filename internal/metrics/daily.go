package metrics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/uptrace/bun"
)

// Daily counts capability calls and denials per UTC day in memory, and
// Flush adds the counts to the metric_daily table (one upsert per day and
// name, never one write per call). The admin overview reads the table plus
// what is not flushed yet. Counts survive a restart up to the last flush:
// the server flushes every minute and once more when it shuts down, so a
// crash loses at most a minute of counts. Each replica adds its own counts,
// so the table holds the sum over replicas.
type Daily struct {
	mu      sync.Mutex
	pending map[string]*[2]int64 // day -> [calls, denials] not yet flushed
}

// NewDaily returns an empty rollup.
func NewDaily() *Daily { return &Daily{pending: map[string]*[2]int64{}} }

// Names of the rows in metric_daily.
const (
	DailyCalls   = "capability_calls"
	DailyDenials = "capability_denials"
)

func day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

func (d *Daily) add(t time.Time, allowed bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.pending[day(t)]
	if c == nil {
		c = new([2]int64)
		d.pending[day(t)] = c
	}
	if allowed {
		c[0]++
	} else {
		c[1]++
	}
}

// Flush adds the pending counts to metric_daily. Counts that fail to be
// written stay pending for the next flush.
func (d *Daily) Flush(ctx context.Context, db bun.IDB) error {
	d.mu.Lock()
	pending := d.pending
	d.pending = map[string]*[2]int64{}
	d.mu.Unlock()
	var firstErr error
	for dd, c := range pending {
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			for i, name := range []string{DailyCalls, DailyDenials} {
				if c[i] == 0 {
					continue
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO metric_daily (day, name, value) VALUES (?, ?, ?)
ON CONFLICT (day, name) DO UPDATE SET value = metric_daily.value + excluded.value`, dd, name, c[i]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			d.mu.Lock()
			p := d.pending[dd]
			if p == nil {
				p = new([2]int64)
				d.pending[dd] = p
			}
			p[0] += c[0]
			p[1] += c[1]
			d.mu.Unlock()
			if firstErr == nil {
				firstErr = fmt.Errorf("metrics: flush daily counts: %w", err)
			}
		}
	}
	return firstErr
}

// DayCount is one day's calls and denials.
type DayCount struct {
	Day            time.Time
	Calls, Denials int64
}

// Read returns the last n days (oldest first, ending today, UTC), from the
// table plus the counts not flushed yet.
func (d *Daily) Read(ctx context.Context, db bun.IDB, n int, now time.Time) ([]DayCount, error) {
	today := now.UTC().Truncate(24 * time.Hour)
	first := today.AddDate(0, 0, -(n - 1))
	out := make([]DayCount, n)
	index := map[string]int{}
	for i := range out {
		out[i].Day = first.AddDate(0, 0, i)
		index[day(out[i].Day)] = i
	}
	var rows []struct {
		Day   string `bun:"day"`
		Name  string `bun:"name"`
		Value int64  `bun:"value"`
	}
	if err := db.NewSelect().Table("metric_daily").Column("day", "name", "value").Where("day >= ?", day(first)).Scan(ctx, &rows); err != nil {
		return nil, fmt.Errorf("metrics: read daily counts: %w", err)
	}
	for _, r := range rows {
		i, ok := index[r.Day]
		if !ok {
			continue
		}
		switch r.Name {
		case DailyCalls:
			out[i].Calls += r.Value
		case DailyDenials:
			out[i].Denials += r.Value
		}
	}
	d.mu.Lock()
	for dd, c := range d.pending {
		if i, ok := index[dd]; ok {
			out[i].Calls += c[0]
			out[i].Denials += c[1]
		}
	}
	d.mu.Unlock()
	return out, nil
}

// Purge removes days older than keep.
func Purge(ctx context.Context, db bun.IDB, keep time.Duration, now time.Time) error {
	_, err := db.NewDelete().Table("metric_daily").Where("day < ?", day(now.Add(-keep))).Exec(ctx)
	return err
}
