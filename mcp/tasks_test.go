package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

var taskCaps = map[string]any{"elicitation": map[string]any{}, "extensions": map[string]any{tasksExtension: map[string]any{}}}

// taskFixture serves a capability that continues as a task and asks a
// question from there.
func taskFixture(t *testing.T) *fixture {
	f := newFixture(t, func(o *Options) { o.Tasks = MemoryTasks() })
	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "longJob", Domain: "test", Description: "Runs as a task and asks.", Annotations: readOnly, Task: capabilities.TaskOptional,
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			ctx, err := call.Detach(ctx)
			if err != nil {
				return capabilities.Result{}, err
			}
			ans, err := call.Ask(ctx, capabilities.Question{Key: "ok", Elicit: &capabilities.ElicitRequest{Message: "go on?",
				Schema: json.RawMessage(`{"type":"object","properties":{"v":{"type":"string"}}}`)}})
			if err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult(fmt.Sprintf("%s did %v", call.Caller.UserID, ans[0].Elicit.Content["v"])), nil
		},
	})))
	return f
}

func (f *fixture) taskOp(token, method, id string, extra map[string]any) (int, map[string]any) {
	params := map[string]any{"taskId": id}
	for k, v := range extra {
		params[k] = v
	}
	return f.modernCall(token, method, id, params, taskCaps)
}

// waitStatus polls tasks/get until the task reaches status.
func (f *fixture) waitStatus(token, id, status string) map[string]any {
	f.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, m := f.taskOp(token, "tasks/get", id, nil); m["result"] != nil && m["result"].(map[string]any)["status"] == status {
			return m["result"].(map[string]any)
		}
	}
	f.t.Fatalf("task %s never reached %s", id, status)
	return nil
}

// TestTaskLifecycleAndOwnership: a task asks through input_required and
// completes after tasks/update; another user's tasks/get, tasks/update
// and tasks/cancel answer exactly as for an unknown task and change
// nothing.
func TestTaskLifecycleAndOwnership(t *testing.T) {
	f := taskFixture(t)
	_, m := f.modernCall("alice-token", "tools/call", "longJob", map[string]any{"name": "longJob", "arguments": map[string]any{}}, taskCaps)
	created, _ := m["result"].(map[string]any)
	id, _ := created["taskId"].(string)
	if created["resultType"] != "task" || id == "" || created["status"] != "working" || created["ttlMs"] == nil {
		t.Fatalf("tools/call = %v", m)
	}
	parked := f.waitStatus("alice-token", id, "input_required")
	if parked["inputRequests"].(map[string]any)["ok"] == nil {
		t.Fatalf("input_required task = %v", parked)
	}

	_, unknown := f.taskOp("bob-token", "tasks/get", "no-such-task", nil)
	for _, method := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		status, m := f.taskOp("bob-token", method, id, map[string]any{"inputResponses": map[string]any{"ok": map[string]any{"action": "accept", "content": map[string]any{"v": "bob's"}}}})
		if status != http.StatusBadRequest || fmt.Sprint(m["error"]) != fmt.Sprint(unknown["error"]) {
			t.Errorf("bob's %s of alice's task: %d %v, want the unknown-task answer %v", method, status, m, unknown)
		}
	}
	if status, m := f.taskOp("alice-token", "tasks/get", id, nil); status != http.StatusOK || m["result"].(map[string]any)["status"] != "input_required" {
		t.Fatalf("alice's task after bob's attempts: %v", m)
	}

	if _, m := f.taskOp("alice-token", "tasks/update", id, map[string]any{"inputResponses": map[string]any{"ok": map[string]any{"action": "accept", "content": map[string]any{"v": "it"}}}}); m["result"].(map[string]any)["resultType"] != "complete" {
		t.Fatalf("tasks/update = %v", m)
	}
	done := f.waitStatus("alice-token", id, "completed")
	if got := fmt.Sprint(done["result"]); !strings.Contains(got, "alice did it") {
		t.Fatalf("completed task = %v", done)
	}
}

// TestTaskCancelAndNegotiation: tasks/cancel ends a task; task methods of
// a client that did not declare the extension are refused with -32021, and
// a mismatched Mcp-Name header with -32020.
func TestTaskCancelAndNegotiation(t *testing.T) {
	f := taskFixture(t)
	_, m := f.modernCall("alice-token", "tools/call", "longJob", map[string]any{"name": "longJob", "arguments": map[string]any{}}, taskCaps)
	id, _ := m["result"].(map[string]any)["taskId"].(string)
	f.waitStatus("alice-token", id, "input_required")
	if _, m := f.taskOp("alice-token", "tasks/cancel", id, nil); m["result"].(map[string]any)["resultType"] != "complete" {
		t.Fatalf("tasks/cancel = %v", m)
	}
	f.waitStatus("alice-token", id, "cancelled")

	status, m := f.modernCall("alice-token", "tasks/get", id, map[string]any{"taskId": id}, elicitCaps)
	if e, _ := m["error"].(map[string]any); status != http.StatusBadRequest || e["code"] != float64(-32021) {
		t.Fatalf("tasks/get without the extension: %d %v", status, m)
	}
	status, m = f.modernCall("alice-token", "tasks/get", "other", map[string]any{"taskId": id}, taskCaps)
	if e, _ := m["error"].(map[string]any); status != http.StatusBadRequest || e["code"] != float64(-32020) {
		t.Fatalf("tasks/get with a mismatched Mcp-Name: %d %v", status, m)
	}
	// Without the extension the capability runs as an ordinary call (and
	// asks through an input-required result).
	_, m = f.modernCall("alice-token", "tools/call", "longJob", map[string]any{"name": "longJob", "arguments": map[string]any{}}, elicitCaps)
	if r, _ := m["result"].(map[string]any); r["resultType"] != "input_required" || r["taskId"] != nil {
		t.Fatalf("tools/call without the extension = %v", m)
	}
}
