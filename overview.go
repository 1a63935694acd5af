package enclave

import (
	"context"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
)

// OverviewDay is one day of the admin overview's chart.
//
// Deprecated: use accounts.OverviewDay (adminOverview lives in accounts).
type OverviewDay = accounts.OverviewDay

// OverviewOutput is the output of adminOverview.
//
// Deprecated: use accounts.OverviewOutput.
type OverviewOutput = accounts.OverviewOutput

// overviewDays is accounts.OverviewSources.Days: the metrics' daily
// rollup, read from the replica database.
func (s *Server) overviewDays(ctx context.Context, n int, now time.Time) ([]accounts.OverviewDay, error) {
	days, err := s.metrics.Daily.Read(ctx, s.store.Reader, n, now)
	if err != nil {
		return nil, err
	}
	var out []accounts.OverviewDay
	for _, d := range days {
		out = append(out, accounts.OverviewDay{Day: d.Day.Format(time.DateOnly), Calls: d.Calls, Denials: d.Denials})
	}
	return out, nil
}
