package workspaces_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/workspaces"
)

type addResult = workspaces.OpResult[addOut]

// TestOpContract is the contract every workspace store keeps, run on both
// dialects.
func TestOpContract(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, 0)
		ann, val, eve := e.user("ann"), e.user("val"), e.user("eve")
		ws := e.create(ann, "Ops")
		other := e.create(ann, "Other")
		e.join(ann, val, ws, workspaces.RoleViewer)

		t.Run("concurrent ops serialize", func(t *testing.T) {
			const workers, each = 4, 10
			var wg sync.WaitGroup
			errs := make(chan error, workers*each)
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						errs <- e.call(ann, "counterAdd", map[string]any{"workspaceId": ws, "counter": "hits", "by": 1}, nil)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			var got workspaces.OpResult[addOut]
			e.must(val, "counterGet", map[string]any{"workspaceId": ws, "counter": "hits"}, &got)
			if got.Result.Value != workers*each || got.Revision != workers*each {
				t.Fatalf("after %d adds: value %d, revision %d", workers*each, got.Result.Value, got.Revision)
			}
			evs, err := e.svc.Events(context.Background(), ws, 0, 0)
			if err != nil || len(evs) != workers*each {
				t.Fatalf("events: %d, %v", len(evs), err)
			}
			for i, ev := range evs {
				if ev.Revision != int64(i+1) || ev.Op != "counterAdd" || ev.Actor != ann.UserID || ev.At.IsZero() {
					t.Fatalf("event %d = %+v", i, ev)
				}
			}
			// The other workspace is untouched.
			e.must(ann, "counterGet", map[string]any{"workspaceId": other, "counter": "hits"}, &got)
			if got.Result.Value != 0 || got.Revision != 0 {
				t.Fatalf("other workspace: %+v", got)
			}
		})

		t.Run("viewer cannot write", func(t *testing.T) {
			err := e.call(val, "counterAdd", map[string]any{"workspaceId": ws, "counter": "hits", "by": 1}, nil)
			wantCode(t, err, capabilities.CodeNotFound, "viewer write")
			var got addResult
			e.must(val, "counterGet", map[string]any{"workspaceId": ws, "counter": "hits"}, &got)
			if got.Result.Value != 40 {
				t.Fatalf("a refused write changed the counter: %d", got.Result.Value)
			}
		})

		t.Run("non-member gets not found", func(t *testing.T) {
			errOp := e.call(eve, "counterGet", map[string]any{"workspaceId": ws, "counter": "hits"}, nil)
			errUnknown := e.call(eve, "counterGet", map[string]any{"workspaceId": "w_bbbbbbbbbbbbbbbbbbbbbbbbbb", "counter": "hits"}, nil)
			wantCode(t, errOp, capabilities.CodeNotFound, "non-member op")
			if errOp.Error() != errUnknown.Error() {
				t.Fatalf("non-member %q vs unknown %q", errOp, errUnknown)
			}
		})

		t.Run("stale expectedRevision", func(t *testing.T) {
			var cur workspaces.Details
			e.must(ann, "workspaceGet", map[string]any{"workspaceId": ws}, &cur)
			var ok addResult
			e.must(ann, "counterAdd", map[string]any{"workspaceId": ws, "counter": "c", "by": 5, "expectedRevision": cur.Revision}, &ok)
			if ok.Revision != cur.Revision+1 {
				t.Fatalf("revision %d after %d", ok.Revision, cur.Revision)
			}
			err := e.call(ann, "counterAdd", map[string]any{"workspaceId": ws, "counter": "c", "by": 5, "expectedRevision": cur.Revision}, nil)
			wantCode(t, err, capabilities.CodeConflict, "stale revision")
			var got addResult
			e.must(ann, "counterGet", map[string]any{"workspaceId": ws, "counter": "c"}, &got)
			if got.Result.Value != 5 || got.Revision != ok.Revision {
				t.Fatalf("a refused op committed: %+v", got)
			}
		})

		t.Run("idempotent retry", func(t *testing.T) {
			args := map[string]any{"workspaceId": ws, "counter": "idem", "by": 3, "idempotencyKey": "k-1"}
			var first, second addResult
			e.must(ann, "counterAdd", args, &first)
			e.must(ann, "counterAdd", args, &second)
			if first.Replayed || !second.Replayed || second.Result != first.Result || second.Revision != first.Revision {
				t.Fatalf("first %+v, retry %+v", first, second)
			}
			var got addResult
			e.must(ann, "counterGet", map[string]any{"workspaceId": ws, "counter": "idem"}, &got)
			if got.Result.Value != 3 || got.Revision != first.Revision {
				t.Fatalf("the retry ran again: %+v", got)
			}
			args["by"] = 4
			wantCode(t, e.call(ann, "counterAdd", args, nil), capabilities.CodeConflict, "same key, other arguments")
			// After the keep time, the key is free again.
			e.clock.add(workspaces.DefaultIdempotencyTTL + time.Second)
			var later addResult
			e.must(ann, "counterAdd", args, &later)
			if later.Replayed || later.Result.Value != 7 {
				t.Fatalf("an expired key replayed: %+v", later)
			}
			args["by"] = 3
			// The same key in another workspace is another key.
			args["workspaceId"], args["by"] = other, 3
			var there addResult
			e.must(ann, "counterAdd", args, &there)
			if there.Replayed || there.WorkspaceID != other {
				t.Fatalf("key leaked across workspaces: %+v", there)
			}
		})

		t.Run("removed member loses access at the next call", func(t *testing.T) {
			e.must(ann, "workspaceMemberRoleSet", map[string]any{"workspaceId": ws, "userId": val.UserID, "role": "admin"}, nil)
			e.must(val, "counterAdd", map[string]any{"workspaceId": ws, "counter": "v", "by": 1}, nil)
			e.must(ann, "workspaceMemberRemove", map[string]any{"workspaceId": ws, "userId": val.UserID}, nil)
			wantCode(t, e.call(val, "counterAdd", map[string]any{"workspaceId": ws, "counter": "v", "by": 1}, nil), capabilities.CodeNotFound, "removed member write")
			wantCode(t, e.call(val, "counterGet", map[string]any{"workspaceId": ws, "counter": "v"}, nil), capabilities.CodeNotFound, "removed member read")
		})

		t.Run("jobs are enqueued with the op", func(t *testing.T) {
			before := outboxJobs(t, st)
			e.must(ann, "counterAdd", map[string]any{"workspaceId": ws, "counter": "j", "by": 1, "job": true}, nil)
			if got := outboxJobs(t, st); got != before+1 {
				t.Fatalf("outbox jobs %d → %d", before, got)
			}
			// A failing op enqueues nothing.
			err := e.call(ann, "counterAdd", map[string]any{"workspaceId": ws, "counter": "j", "by": 1, "job": true, "expectedRevision": 0}, nil)
			wantCode(t, err, capabilities.CodeConflict, "stale")
			if got := outboxJobs(t, st); got != before+1 {
				t.Fatalf("a refused op enqueued a job: %d", got)
			}
		})

		t.Run("deleting account may only read", func(t *testing.T) {
			d := ann
			d.State = capabilities.AccountDeleting
			wantCode(t, e.call(d, "counterAdd", map[string]any{"workspaceId": ws, "counter": "x", "by": 1}, nil), capabilities.CodeAccountDeleting, "deleting write")
			e.must(d, "counterGet", map[string]any{"workspaceId": ws, "counter": "x"}, nil)
		})
	})
}

func outboxJobs(t *testing.T, st *storage.Store) int64 {
	t.Helper()
	n, err := st.DB.NewSelect().Table("outbox").Where("topic = ?", "job:counter.changed").Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOpRegistration refuses reserved field names and duplicate ops.
func TestOpRegistration(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	e := newEnv(t, st, 0)
	type bad struct {
		WorkspaceID string `json:"workspaceId"`
	}
	h := func(context.Context, *workspaces.Tx, bad) (addOut, error) { return addOut{}, nil }
	if err := workspaces.Register(e.svc, workspaces.Op[bad, addOut]{Name: "badOp", Description: "x", Handler: h}); err == nil {
		t.Fatal("an op using workspaceId in its input was registered")
	}
	if err := workspaces.Register(e.svc, workspaces.Op[addIn, addOut]{Name: "counterAdd", Description: "x", Handler: counterAdd}); err == nil {
		t.Fatal("a duplicate op was registered")
	}
	c, ok := func() (capabilities.Capability, bool) {
		for _, c := range e.reg.All() {
			if c.Name == "counterAdd" {
				return c, true
			}
		}
		return capabilities.Capability{}, false
	}()
	if !ok {
		t.Fatal("counterAdd not registered")
	}
	var sch struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(c.InputSchema, &sch); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"workspaceId", "expectedRevision", "idempotencyKey", "counter", "by"} {
		if _, ok := sch.Properties[f]; !ok {
			t.Fatalf("input schema lacks %s: %s", f, c.InputSchema)
		}
	}
	if sch.Required[0] != "workspaceId" {
		t.Fatalf("required = %v", sch.Required)
	}
}
