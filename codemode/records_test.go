package codemode_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
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

// TestRunRecordReadsBackAsWritten checks that every field of a run record
// reads back as the run produced it, for records written alone and in
// shared batches (on SQLite these go through prepared statements, not bun):
// the start time is stored in the very form bun writes, so ordering and
// retention by started_at hold for every record alike.
func TestRunRecordReadsBackAsWritten(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		c := s.CreateUser(t, "recorded").MCP(t)
		before := time.Now().UTC().Add(-time.Second)
		var wg sync.WaitGroup
		ids := make([]string, 6)
		for i := range ids {
			wg.Go(func() {
				code := fmt.Sprintf(`console.log("run", %d); await codemode.whoami({}); throw new Error("failed %d")`, i, i)
				if i%2 == 0 {
					code = fmt.Sprintf(`console.warn("run", %d); await codemode.whoami({}); await codemode.whoami({}); return %d`, i, i)
				}
				ids[i] = execute(t, c, code).RunID
			})
		}
		wg.Wait()
		after := time.Now().UTC().Add(time.Second)
		for i, id := range ids {
			res, err := c.Call("runGet", map[string]any{"runId": id})
			if err != nil || res.IsError {
				t.Fatalf("runGet %s: %v %s", id, err, res.Text)
			}
			var r codemode.Run
			if err := res.Decode(&r); err != nil {
				t.Fatal(err)
			}
			if r.ID != id || r.Kind != codemode.KindExecute || r.StartedAt.Before(before) || r.StartedAt.After(after) || len(r.Logs) != 1 {
				t.Fatalf("run %d: %s", i, res.Text)
			}
			if i%2 == 0 {
				if r.Status != codemode.StatusSucceeded || r.Error != nil || r.Calls["whoami"] != 2 || r.HostCalls != 2 ||
					r.Logs[0].Level != "warn" || r.Logs[0].Message != fmt.Sprintf("run %d", i) {
					t.Fatalf("run %d: %s", i, res.Text)
				}
			} else if r.Status != codemode.StatusFailed || r.Error == nil || r.Error.Kind != "exception" ||
				!strings.Contains(r.Error.Message, fmt.Sprintf("failed %d", i)) || r.Calls["whoami"] != 1 || r.Logs[0].Level != "log" {
				t.Fatalf("run %d: %s", i, res.Text)
			}
			if s.Store().Dialect() != storage.SQLite {
				continue
			}
			// The stored text is what bun itself writes for that time.
			var raw string
			if err := s.Store().DB.QueryRowContext(ctx, "SELECT CAST(started_at AS TEXT) || '' FROM code_runs WHERE id = ?", id).Scan(&raw); err != nil {
				t.Fatal(err)
			}
			if want := string(s.Store().DB.Dialect().AppendTime(nil, r.StartedAt)); "'"+raw+"'" != want {
				t.Fatalf("run %d: started_at stored as %q, bun writes %s", i, raw, want)
			}
		}
	})
}
