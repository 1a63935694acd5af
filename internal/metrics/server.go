package metrics

import (
	"context"
	"database/sql"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
)

// ServerSources are the parts of a server its metrics read.
type ServerSources struct {
	// Primary and Reader are the database's pools; Reader is reported
	// only when it is a pool of its own.
	Primary, Reader *sql.DB
	// Queue counts the outbox's queued and dead rows.
	Queue func(ctx context.Context) (queued, dead int, err error)
	// Version is the running version (enclave_build_info).
	Version string
}

// NewServer returns the metrics of a server: New's, the statistics of
// its database pools, its outbox's queue and enclave_build_info.
func NewServer(src ServerSources) *Metrics {
	m := New()
	m.DBStats(src.Primary, "primary")
	if src.Reader != nil && src.Reader != src.Primary {
		m.DBStats(src.Reader, "reader")
	}
	m.Queue(src.Queue)
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "enclave_build_info", Help: "The running version.", ConstLabels: prometheus.Labels{"version": src.Version}})
	info.Set(1)
	m.Registry().MustRegister(info)
	return m
}

// Overview returns accounts.OverviewSources.Days: the daily rollup, read
// from db (the replica database).
func (d *Daily) Overview(db bun.IDB) func(ctx context.Context, n int, now time.Time) ([]accounts.OverviewDay, error) {
	return func(ctx context.Context, n int, now time.Time) ([]accounts.OverviewDay, error) {
		days, err := d.Read(ctx, db, n, now)
		if err != nil {
			return nil, err
		}
		var out []accounts.OverviewDay
		for _, c := range days {
			out = append(out, accounts.OverviewDay{Day: c.Day.Format(time.DateOnly), Calls: c.Calls, Denials: c.Denials})
		}
		return out, nil
	}
}
