package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

var taskCaps = map[string]any{"elicitation": map[string]any{}, "extensions": map[string]any{tasksExtension: map[string]any{}}}

// taskFixture serves a capability that continues as a task and asks a
// question from there.
func taskFixture(t testing.TB, tweak ...func(*Options)) *fixture {
	f := newFixture(t, append([]func(*Options){func(o *Options) { o.Tasks = MemoryTasks() }}, tweak...)...)
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

// holdFixture serves "holdJob" (anyone) and "adminHold" (admins), which
// continue as tasks and then hold until their context ends, reporting on
// ended whether that happened (true) or they gave up after 10 s and would
// have gone on writing (false).
func holdFixture(t *testing.T, tweak ...func(*Options)) (*fixture, chan bool) {
	ended := make(chan bool, 16)
	f := newFixture(t, append([]func(*Options){func(o *Options) { o.Tasks = MemoryTasks(); o.recheck = 20 * time.Millisecond }}, tweak...)...)
	hold := func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
		ctx, err := call.Detach(ctx)
		if err != nil {
			return capabilities.Result{}, err
		}
		select {
		case <-ctx.Done():
			ended <- true
			return capabilities.Result{}, ctx.Err()
		case <-time.After(10 * time.Second):
			ended <- false
			return capabilities.TextResult("wrote"), nil
		}
	}
	must(t, f.reg.Register(
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "holdJob", Domain: "test", Description: "Holds.", Annotations: writes, Task: capabilities.TaskOptional, Handler: hold,
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "adminHold", Domain: "test", Description: "Holds, admins only.", Annotations: writes, Task: capabilities.TaskOptional,
			Requires: capabilities.Requirement{Role: capabilities.RoleAdmin}, Handler: hold,
		}),
	))
	return f, ended
}

func (f *fixture) startTask(token, name string) string {
	f.t.Helper()
	_, m := f.modernCall(token, "tools/call", name, map[string]any{"name": name, "arguments": map[string]any{}}, taskCaps)
	r, _ := m["result"].(map[string]any)
	id, _ := r["taskId"].(string)
	if id == "" {
		f.t.Fatalf("tools/call %s = %v, want a task", name, m)
	}
	return id
}

// TestTaskEndsWhenAccessEnds: a running task is stopped (its context
// ends) once its owner is suspended, the token that started it is
// revoked, or the owner loses the role the capability requires; a task
// whose access is intact goes on.
func TestTaskEndsWhenAccessEnds(t *testing.T) {
	var revoked atomic.Bool
	f, ended := holdFixture(t, func(o *Options) {
		inner := o.Verifier
		o.Verifier = TokenVerifierFunc(func(ctx context.Context, token string) (TokenInfo, error) {
			if token == "alice-notes-token" && revoked.Load() {
				return TokenInfo{}, ErrInvalidToken
			}
			return inner.VerifyToken(ctx, token)
		})
	})
	waitEnded := func(what string) {
		t.Helper()
		select {
		case ok := <-ended:
			if !ok {
				t.Fatalf("%s: the task went on running", what)
			}
		case <-time.After(8 * time.Second):
			t.Fatalf("%s: the task is still running", what)
		}
	}

	// The token that started it is revoked.
	f.startTask("alice-notes-token", "holdJob")
	revoked.Store(true)
	waitEnded("token revoked")

	// The admin loses the admin role: the admin-only task stops; bob's
	// task, whose access is intact, goes on.
	bobID := f.startTask("bob-token", "holdJob")
	adminID := f.startTask("admin-token", "adminHold")
	f.loader.Set(capabilitiestest.User("admin"))
	waitEnded("role removed")
	if status, m := f.taskOp("admin-token", "tasks/get", adminID, nil); status != http.StatusBadRequest {
		t.Fatalf("tasks/get of a task of a capability the caller lost = %d %v, want the unknown-task answer", status, m)
	}

	// bob is suspended.
	suspended := capabilitiestest.User("bob")
	suspended.State = capabilities.AccountSuspended
	f.loader.Set(suspended)
	waitEnded("owner suspended")
	f.loader.Set(capabilitiestest.User("bob"))
	if got := f.waitStatus("bob-token", bobID, "failed"); !strings.Contains(fmt.Sprint(got["error"]), "access ended") {
		t.Fatalf("bob's stopped task = %v", got)
	}
}

// TestTasksPerUserBounded: a user cannot hold more than MaxTasksPerUser
// running tasks; the next Detach fails with a clear error, other users are
// unaffected, and a finished task frees its place.
func TestTasksPerUserBounded(t *testing.T) {
	f, ended := holdFixture(t, func(o *Options) { o.MaxTasksPerUser = 2 })
	first := f.startTask("alice-token", "holdJob")
	f.startTask("alice-token", "holdJob")
	_, m := f.modernCall("alice-token", "tools/call", "holdJob", map[string]any{"name": "holdJob", "arguments": map[string]any{}}, taskCaps)
	r, _ := m["result"].(map[string]any)
	if r["taskId"] != nil || r["isError"] != true || !strings.Contains(fmt.Sprint(r["content"]), "too many running tasks") {
		t.Fatalf("alice's third task = %v, want a tool error naming the limit", m)
	}
	f.startTask("bob-token", "holdJob")

	f.taskOp("alice-token", "tasks/cancel", first, nil)
	<-ended
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, m := f.modernCall("alice-token", "tools/call", "holdJob", map[string]any{"name": "holdJob", "arguments": map[string]any{}}, taskCaps)
		if r, _ := m["result"].(map[string]any); r["taskId"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a cancelled task never freed its place")
		}
	}
}

// TestTaskOpsNeedTheCapabilityScopes: a token lacking the scope the task's
// capability requires gets the unknown-task answer for tasks/get,
// tasks/update and tasks/cancel, even for its own user's task.
func TestTaskOpsNeedTheCapabilityScopes(t *testing.T) {
	f, _ := holdFixture(t)
	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "scopedJob", Domain: "test", Description: "Needs notes:write.", Annotations: writes, Task: capabilities.TaskOptional,
		Requires: capabilities.Requirement{Scopes: []string{"notes:write"}},
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			if _, err := call.Detach(ctx); err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult("secret result"), nil
		},
	})))
	id := f.startTask("alice-notes-token", "scopedJob")
	f.waitStatus("alice-notes-token", id, "completed")
	_, unknown := f.taskOp("alice-token", "tasks/get", "no-such-task", nil)
	for _, method := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		status, m := f.taskOp("alice-token", method, id, nil)
		if status != http.StatusBadRequest || fmt.Sprint(m["error"]) != fmt.Sprint(unknown["error"]) || strings.Contains(fmt.Sprint(m), "secret") {
			t.Errorf("%s with a token lacking notes:write: %d %v, want the unknown-task answer", method, status, m)
		}
	}
}

// TestTaskUpdateRefusedWhileDeleting: the answers of tasks/update resume
// the handler, so an account being deleted cannot deliver them to a task
// of a capability that writes; it can still read and cancel its task.
func TestTaskUpdateRefusedWhileDeleting(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Tasks = MemoryTasks() })
	resumed := make(chan struct{}, 1)
	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "writeJob", Domain: "test", Description: "Asks, then writes.", Annotations: writes, Task: capabilities.TaskOptional,
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			ctx, err := call.Detach(ctx)
			if err != nil {
				return capabilities.Result{}, err
			}
			if _, err := call.Ask(ctx, capabilities.Question{Key: "ok", Elicit: &capabilities.ElicitRequest{Message: "write?"}}); err != nil {
				return capabilities.Result{}, err
			}
			resumed <- struct{}{}
			return capabilities.TextResult("wrote"), nil
		},
	})))
	id := f.startTask("alice-token", "writeJob")
	f.waitStatus("alice-token", id, "input_required")
	deleting := capabilitiestest.User("alice")
	deleting.State = capabilities.AccountDeleting
	f.loader.Set(deleting)
	status, m := f.taskOp("alice-token", "tasks/update", id, map[string]any{"inputResponses": map[string]any{"ok": accept("y")}})
	if e, _ := m["error"].(map[string]any); status != http.StatusForbidden || e["code"] != float64(capabilities.RPCInvalidRequest) ||
		!strings.Contains(fmt.Sprint(e["message"]), "being deleted") || fmt.Sprint(e["data"]) != "map[code:account_deleting]" {
		t.Fatalf("tasks/update while deleting: %d %v, want 403 naming the deletion", status, m)
	}
	select {
	case <-resumed:
		t.Fatal("the writing task resumed for an account being deleted")
	case <-time.After(600 * time.Millisecond):
	}
	if got := f.waitStatus("alice-token", id, "input_required"); got == nil {
		t.Fatal("tasks/get while deleting")
	}
	if _, m := f.taskOp("alice-token", "tasks/cancel", id, nil); m["result"] == nil {
		t.Fatalf("tasks/cancel while deleting: %v", m)
	}
}

// TestTaskFinishingAtOnceCompletes: a handler that returns right after
// Detach still completes its task (its outcome is not lost when the call
// sees the outcome and the detachment together), and frees its place.
func TestTaskFinishingAtOnceCompletes(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Tasks = MemoryTasks(); o.MaxTasksPerUser = 1 })
	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "quickJob", Domain: "test", Description: "Detaches and finishes.", Annotations: readOnly, Task: capabilities.TaskOptional,
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			if _, err := call.Detach(ctx); err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult("quick"), nil
		},
	})))
	for range 20 {
		var id string
		for deadline := time.Now().Add(5 * time.Second); id == ""; time.Sleep(10 * time.Millisecond) {
			_, m := f.modernCall("alice-token", "tools/call", "quickJob", map[string]any{"name": "quickJob", "arguments": map[string]any{}}, taskCaps)
			r, _ := m["result"].(map[string]any)
			id, _ = r["taskId"].(string)
			if id == "" && time.Now().After(deadline) {
				t.Fatalf("no task place freed: %v", m)
			}
		}
		if got := f.waitStatus("alice-token", id, "completed"); !strings.Contains(fmt.Sprint(got["result"]), "quick") {
			t.Fatalf("task = %v", got)
		}
	}
}

// TestDetachAfterCancelLeavesNothingRunning: a handler that detaches only
// after its call was cancelled (the client went away) gets the
// cancellation; no task is left running, its place is free, and the
// server closes.
func TestDetachAfterCancelLeavesNothingRunning(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Tasks = MemoryTasks(); o.MaxTasksPerUser = 1 })
	detached := make(chan error, 1)
	must(t, f.reg.Register(
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "lateJob", Domain: "test", Description: "Detaches late.", Annotations: readOnly, Task: capabilities.TaskOptional,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
				}
				_, err := call.Detach(ctx)
				detached <- err
				return capabilities.TextResult("late"), err
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "quick", Domain: "test", Description: "Detaches and finishes.", Annotations: readOnly, Task: capabilities.TaskOptional,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				if _, err := call.Detach(ctx); err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.TextResult("quick"), nil
			},
		}),
	))
	ctx, cancel := context.WithCancel(t.Context())
	body := rpc(7, "tools/call", map[string]any{"name": "lateJob", "arguments": map[string]any{}, "_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": taskCaps,
	}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(versionHeader, "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "lateJob")
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case err := <-detached:
		if err == nil {
			t.Fatal("Detach after the call was cancelled made a task")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler never detached")
	}
	// The place is free: a quick task runs and completes.
	var id string
	for deadline := time.Now().Add(3 * time.Second); id == ""; time.Sleep(20 * time.Millisecond) {
		_, m := f.modernCall("alice-token", "tools/call", "quick", map[string]any{"name": "quick", "arguments": map[string]any{}}, taskCaps)
		id, _ = m["result"].(map[string]any)["taskId"].(string)
		if id == "" && time.Now().After(deadline) {
			t.Fatalf("no task place: %v", m)
		}
	}
	f.waitStatus("alice-token", id, "completed")
	closed := make(chan struct{})
	go func() { f.srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the server does not close: a task runner waits forever")
	}
}

// TestTasks2026TransportChecks: tasks/get, tasks/update and tasks/cancel
// never reach mcp-go, so the checks its transport makes of every
// 2026-07-28 request (Last-Event-ID refused, the version in the header and
// in _meta both present and equal) are made for them too, with the same
// status, code and message mcp-go gives a tools/call.
func TestTasks2026TransportChecks(t *testing.T) {
	f := taskFixture(t)
	send := func(method, name string, params map[string]any, metaVersion string, headers map[string]string) (int, map[string]any) {
		meta := map[string]any{
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "t", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": taskCaps,
		}
		if metaVersion != "" {
			meta["io.modelcontextprotocol/protocolVersion"] = metaVersion
		}
		params["_meta"] = meta
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(rpc(7, method, params)))
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Method", method)
		req.Header.Set("Mcp-Name", name)
		req.Header.Set(versionHeader, "2026-07-28")
		for k, v := range headers {
			if v == "" {
				req.Header.Del(k)
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		defer resp.Body.Close()
		var m map[string]any
		must(t, json.NewDecoder(resp.Body).Decode(&m))
		return resp.StatusCode, m
	}
	for _, c := range []struct {
		name        string
		metaVersion string
		headers     map[string]string
	}{
		{"Last-Event-ID", "2026-07-28", map[string]string{"Last-Event-ID": "1"}},
		{"no version header", "2026-07-28", map[string]string{versionHeader: ""}},
		{"no _meta version", "", nil},
		{"versions differ", "2025-11-25", nil},
	} {
		gotStatus, got := send("tasks/get", "t-1", map[string]any{"taskId": "t-1"}, c.metaVersion, c.headers)
		wantStatus, want := send("tools/call", "echo", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}}, c.metaVersion, c.headers)
		if gotStatus != wantStatus || gotStatus != http.StatusBadRequest || fmt.Sprint(got["error"]) != fmt.Sprint(want["error"]) {
			t.Errorf("%s: tasks/get answered %d %v; mcp-go answers a tools/call %d %v", c.name, gotStatus, got["error"], wantStatus, want["error"])
		}
	}
}

// flagCountdown is a feature flag that is on until armed, then on for n
// more reads and off from then on.
type flagCountdown struct{ left atomic.Int32 }

func (c *flagCountdown) Enabled(context.Context, capabilities.Caller, string) bool {
	return c.left.Load() < 0 || c.left.Add(-1) >= 0
}

// TestTaskUpdateRefusalsReadTheTable: tasks/update answers each refusal
// of the registry's decision for the task's capability with the HTTP
// status and JSON-RPC code of capabilities' one table, the domain message
// and the domain code in the error's data: a quota with when to retry
// (data and Retry-After, as tools/call says it), a missing second factor,
// an internal failure without its detail; a refusal that hides the
// capability answers exactly like an unknown task.
func TestTaskUpdateRefusalsReadTheTable(t *testing.T) {
	var gate atomic.Pointer[error]
	flag := &flagCountdown{}
	flag.left.Store(-1)
	f := newFixture(t, func(o *Options) {
		reg := capabilities.NewRegistry(capabilities.Options{
			Logger: slog.New(slog.DiscardHandler), Features: flag,
			RoleGate: func(context.Context, capabilities.Caller, string) error {
				if e := gate.Load(); e != nil {
					return *e
				}
				return nil
			},
		})
		must(t, reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "gatedJob", Domain: "test", Description: "Asks, then writes.", Annotations: writes, Task: capabilities.TaskOptional,
			Requires: capabilities.Requirement{Role: capabilities.RoleAdmin, Feature: "jobs"},
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				ctx, err := call.Detach(ctx)
				if err != nil {
					return capabilities.Result{}, err
				}
				if _, err := call.Ask(ctx, capabilities.Question{Key: "ok", Elicit: &capabilities.ElicitRequest{Message: "write?"}}); err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.TextResult("wrote"), nil
			},
		})))
		o.Registry = reg
		o.Tasks = MemoryTasks()
	})
	id := f.startTask("admin-token", "gatedJob")
	f.waitStatus("admin-token", id, "input_required")
	update := func(refusal error) (int, http.Header, map[string]any) {
		t.Helper()
		gate.Store(&refusal)
		defer gate.Store(nil)
		return f.modernCallHeader("admin-token", "tasks/update", id, map[string]any{"taskId": id, "inputResponses": map[string]any{"ok": accept("y")}}, taskCaps)
	}
	errorOf := func(m map[string]any) (e, data map[string]any) {
		e, _ = m["error"].(map[string]any)
		data, _ = e["data"].(map[string]any)
		return e, data
	}

	reset := f.clock.Now().Add(90 * time.Second)
	status, header, m := update(&capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "daily limit reached", RetryAfter: reset})
	if e, data := errorOf(m); status != http.StatusTooManyRequests || e["code"] != float64(capabilities.RPCQuotaExceeded) || e["message"] != "daily limit reached" ||
		data["code"] != "quota_exceeded" || data["retryAfter"] != reset.Format(time.RFC3339) || header.Get("Retry-After") != "90" || m["id"] != float64(7) {
		t.Errorf("tasks/update over quota: %d %v (Retry-After %q), want 429 -32029 saying when to retry", status, m, header.Get("Retry-After"))
	}

	status, _, m = update(capabilities.Errorf(capabilities.CodeSecondFactorRequired, "set up a second factor first"))
	if e, data := errorOf(m); status != http.StatusForbidden || e["code"] != float64(capabilities.RPCInvalidRequest) ||
		e["message"] != "set up a second factor first" || data["code"] != "second_factor_required" {
		t.Errorf("tasks/update without a second factor: %d %v, want 403 -32600", status, m)
	}

	status, _, m = update(errors.New("db: password hunter2 rejected"))
	if e, _ := errorOf(m); status != http.StatusInternalServerError || e["code"] != float64(capabilities.RPCInternalError) ||
		!strings.Contains(fmt.Sprint(e["message"]), "internal error (request id") || strings.Contains(fmt.Sprint(m), "hunter2") {
		t.Errorf("tasks/update failing internally: %d %v, want 500 -32603 without the detail", status, m)
	}

	// The flag turns off after the task's screen and scope check (two
	// reads): only the registry's decision sees the capability hidden.
	_, unknown := f.taskOp("admin-token", "tasks/get", "no-such-task", nil)
	flag.left.Store(2)
	status, _, m = update(nil)
	left := flag.left.Load()
	flag.left.Store(-1)
	if left != -1 {
		t.Fatalf("the flag was read %d times, want 3 (screen, scope, decision)", 2-left)
	}
	if status != http.StatusBadRequest || fmt.Sprint(m["error"]) != fmt.Sprint(unknown["error"]) {
		t.Errorf("tasks/update of a capability hidden since the screen: %d %v, want the unknown-task answer %v", status, m, unknown)
	}

	// Nothing refused: the answer goes through and the task completes.
	if status, m := f.taskOp("admin-token", "tasks/update", id, map[string]any{"inputResponses": map[string]any{"ok": accept("y")}}); status != http.StatusOK || m["result"] == nil {
		t.Fatalf("tasks/update allowed: %d %v", status, m)
	}
	f.waitStatus("admin-token", id, "completed")
}
