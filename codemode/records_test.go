package codemode_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/enclave-mcp/enclave/enclavetest"
)

// TestRunRecordCommittedBeforeTheAnswer checks that a run's record is in
// SQL when its answer arrives, with no Flush, for runs that end together
// (and share a write) as for one alone: a crash right after the answer
// loses no record.
func TestRunRecordCommittedBeforeTheAnswer(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		const users, runs = 4, 6
		var wg sync.WaitGroup
		for u := range users {
			c := s.CreateUser(t, fmt.Sprintf("user%d", u)).MCP(t)
			wg.Go(func() {
				for i := range runs {
					o := execute(t, c, fmt.Sprintf("return %d", i))
					if o.Error != nil || o.RunID == "" {
						t.Errorf("run %d of user %d: %+v %q", i, u, o.Error, o.RunID)
						return
					}
					n, err := s.Store().DB.NewSelect().Table("code_runs").Where("id = ?", o.RunID).Count(ctx)
					if err != nil || n != 1 {
						t.Errorf("run %s answered before its record was written: %d rows (%v)", o.RunID, n, err)
					}
				}
			})
		}
		wg.Wait()
	})
}
