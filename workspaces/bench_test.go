package workspaces_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/workspaces"
)

// bump is the benchmarks' op: one read and one write of a counter.
func bump(ctx context.Context, tx *workspaces.Tx, in addIn) (addOut, error) {
	var v int64
	_ = tx.NewSelect().Table("counters").Column("value").Where("workspace_id = ?", tx.WorkspaceID).Where("name = ?", in.Counter).Scan(ctx, &v)
	v += in.By
	_, err := tx.NewRaw(`INSERT INTO counters (workspace_id, name, value) VALUES (?, ?, ?)
		ON CONFLICT (workspace_id, name) DO UPDATE SET value = excluded.value`, tx.WorkspaceID, in.Counter, v).Exec(ctx)
	return addOut{Value: v}, err
}

// touchCount is how many workspaces BenchmarkWorkspaceOps/*/touch-in-turn
// cycles through (WS_BENCH_TOUCH overrides 10,000).
func touchCount() int {
	if n, err := strconv.Atoi(os.Getenv("WS_BENCH_TOUCH")); err == nil && n > 0 {
		return n
	}
	return 10000
}

// BenchmarkWorkspaceOps reports ops/s of a write op through the registry,
// per dialect: on one workspace (serialized), on 100 workspaces in
// parallel, and touching many workspaces in turn (each first touch creates
// the workspace's state; with more workspaces than open files, later
// rounds reopen evicted files). Run it with
//
//	go test ./workspaces -run '^$' -bench WorkspaceOps -benchtime 2000x
//
// (-benchtime 10000x makes touch-in-turn one full pass over 10,000).
func BenchmarkWorkspaceOps(b *testing.B) {
	for _, d := range storagetest.Dialects() {
		b.Run(string(d), func(b *testing.B) {
			setup := func(b *testing.B) (*env, capabilities.Caller) {
				e := newEnv(b, storagetest.Open(b, d), 0)
				if err := workspaces.Register(e.svc, workspaces.Op[addIn, addOut]{Name: "benchBump", Description: "bench", Handler: bump}); err != nil {
					b.Fatal(err)
				}
				return e, e.user("bench")
			}
			invoke := func(b *testing.B, e *env, c capabilities.Caller, ws string) {
				raw, _ := json.Marshal(map[string]any{"workspaceId": ws, "counter": "n", "by": 1})
				if _, err := e.reg.Invoke(context.Background(), c, "benchBump", raw); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("one-workspace", func(b *testing.B) {
				e, c := setup(b)
				ws := e.create(c, "one")
				invoke(b, e, c, ws)
				b.ResetTimer()
				for b.Loop() {
					invoke(b, e, c, ws)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			})
			b.Run("100-workspaces-parallel", func(b *testing.B) {
				e, c := setup(b)
				ids := make([]string, 100)
				for i := range ids {
					ids[i] = e.create(c, fmt.Sprint("p", i))
					invoke(b, e, c, ids[i])
				}
				var next atomic.Int64
				b.ResetTimer()
				var wg sync.WaitGroup
				per := (b.N + len(ids) - 1) / len(ids)
				for _, ws := range ids {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range per {
							if next.Add(1) > int64(b.N) {
								return
							}
							invoke(b, e, c, ws)
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			})
			b.Run("touch-in-turn", func(b *testing.B) {
				e, c := setup(b)
				n := touchCount()
				var ids []string
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if len(ids) < n && i >= len(ids) {
						b.StopTimer()
						ids = append(ids, e.create(c, fmt.Sprint("t", i)))
						b.StartTimer()
					}
					invoke(b, e, c, ids[i%len(ids)])
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
				b.ReportMetric(float64(len(ids)), "workspaces")
			})
		})
	}
}
