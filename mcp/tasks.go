package mcp

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/enclave-mcp/enclave/capabilities"
)

// Tasks (protocol 2026-07-28 tasks extension, "io.modelcontextprotocol/tasks").
//
// A capability declaring Task support runs as usual until its handler
// calls Call.Detach; then, for a client that negotiated the extension, the
// task is stored (Options.Tasks) and the call answers with it at once,
// while the handler goes on in the background. Questions it asks after
// that park the task in input_required until tasks/update brings the
// answers. tasks/get, tasks/update and tasks/cancel act only on the
// caller's own tasks (another user's task id answers like an unknown one),
// and only while the caller may still use the capability that made it.

const tasksExtension = "io.modelcontextprotocol/tasks"

const (
	taskTTL          = time.Hour
	taskPollInterval = 500 * time.Millisecond
)

// taskRun is a call that may become a task.
type taskRun struct {
	s        *Server
	userID   string
	name     string
	cancel   context.CancelFunc
	detached chan struct{}
	once     sync.Once
	id       string
	created  Task // as stored by Detach
	asked    int
	isTask   atomic.Bool
}

func newTaskID() string {
	b := make([]byte, 18)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// negotiatedTasks reports whether a 2026-07-28 request declared the tasks
// extension.
func negotiatedTasks(ctx context.Context) bool {
	info := mcpserver.RequestProtocolInfoFromContext(ctx)
	if info == nil || info.ClientCapabilities == nil {
		return false
	}
	_, ok := info.ClientCapabilities.Extensions[tasksExtension]
	return ok
}

var errTaskRequired = mcpgo.MissingRequiredClientCapabilityError{Capability: "extensions"}

// Detach implements capabilities.Detacher.
func (c *client) Detach(ctx context.Context) (context.Context, error) {
	tr := c.task
	if tr == nil {
		return ctx, nil
	}
	if err := ctx.Err(); err != nil {
		return ctx, err // the call was cancelled: nothing to continue
	}
	var err error
	tr.once.Do(func() {
		if !c.s.startTask(tr.userID) {
			err = capabilities.Errorf(capabilities.CodeQuotaExceeded, "too many running tasks: wait for one to finish or cancel one")
			return
		}
		now := c.s.now().UTC()
		t := Task{ID: newTaskID(), UserID: tr.userID, Capability: tr.name, Status: TaskWorking,
			CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(taskTTL)}
		if err = c.s.tasks.Create(context.WithoutCancel(ctx), t); err != nil {
			c.s.endTask(tr.userID)
			err = fmt.Errorf("mcp: create task: %w", err)
			return
		}
		tr.id, tr.created = t.ID, t
		tr.isTask.Store(true)
		close(tr.detached)
	})
	return ctx, err
}

// startTask counts a task of userID as running, unless the user already
// has Options.MaxTasksPerUser running on this server.
func (s *Server) startTask(userID string) bool {
	s.taskMu.Lock()
	defer s.taskMu.Unlock()
	if s.running == nil {
		s.running = map[string]int{}
	}
	if s.running[userID] >= cmp.Or(s.opts.MaxTasksPerUser, 16) {
		return false
	}
	s.running[userID]++
	return true
}

// endTask releases what startTask counted.
func (s *Server) endTask(userID string) {
	s.taskMu.Lock()
	defer s.taskMu.Unlock()
	if s.running[userID]--; s.running[userID] <= 0 {
		delete(s.running, userID)
	}
}

// taskAllowed reports whether a running task may go on: its token still
// verifies while it has not expired (a revoked token, a suspended account
// end it; one that merely expired does not, the client refreshes), and the
// task's owner, loaded fresh, still passes the registry's decision for its
// capability (account state, role, permission, feature, scope), audited
// like a call. A load failure fails closed.
func (s *Server) taskAllowed(ctx context.Context, st *reqState, name string) bool {
	if s.opts.Anonymous != nil {
		return true
	}
	var fresh *capabilities.Caller
	if st.token != "" && (st.expires.IsZero() || s.now().Before(st.expires)) {
		info, err := s.verify(ctx, st.token)
		if err != nil || info.UserID != st.caller.UserID {
			return false
		}
		fresh = info.Caller // the verifier loaded the account already
	}
	var caller capabilities.Caller
	if fresh != nil {
		if fresh.UserID != "" && fresh.UserID != st.caller.UserID {
			return false
		}
		caller = *fresh
		caller.UserID = st.caller.UserID
	} else {
		var err error
		if caller, err = s.callerFor(ctx, st.caller.UserID); err != nil {
			return false
		}
	}
	caller.Scopes, caller.AllScopes = st.caller.Scopes, st.caller.AllScopes
	caller.Interactive = st.caller.Interactive
	caller.Session = false
	return s.reg.Admit(ctx, caller, name) == nil
}

// taskCreated is the CreateTaskResult of a task just stored.
func taskCreated(t Task) map[string]any {
	return map[string]any{
		"resultType": "task", "taskId": t.ID, "status": t.Status,
		"createdAt": t.CreatedAt.Format(time.RFC3339Nano), "lastUpdatedAt": t.UpdatedAt.Format(time.RFC3339Nano),
		"ttlMs": t.ExpiresAt.Sub(t.CreatedAt).Milliseconds(), "pollIntervalMs": taskPollInterval.Milliseconds(),
	}
}

// detailed is the tasks/get answer.
func detailed(t Task) map[string]any {
	out := taskCreated(t)
	out["resultType"] = "complete"
	switch t.Status {
	case TaskCompleted:
		out["result"] = t.Result
	case TaskFailed:
		out["error"] = t.Error
	case TaskInputRequired:
		out["inputRequests"] = t.InputRequests
	}
	return out
}

// outcome is what a handler returned.
type outcome struct {
	res capabilities.Result
	err error
}

// callAsTask runs a call of a task-supporting capability: synchronously
// until the handler detaches, then in the background.
func (s *Server) callAsTask(ctx context.Context, st *reqState, cl *client, name string, args json.RawMessage) (*mcpgo.CallToolResult, error) {
	hctx, cancelCause := context.WithCancelCause(context.WithoutCancel(ctx))
	// Cancelling a task is a deliberate stop (tasks/cancel, the caller's
	// access ended, shutdown): ErrCallStopped ends even a call made with
	// an idempotency key, whose handler otherwise outlives its client.
	cancel := func() { cancelCause(capabilities.ErrCallStopped) }
	tr := &taskRun{s: s, userID: st.caller.UserID, name: name, cancel: cancel, detached: make(chan struct{})}
	cl.task = tr
	done := make(chan outcome, 1)
	go func() {
		res, err := s.reg.Invoke(capabilities.WithClient(hctx, cl), st.caller, name, args)
		done <- outcome{res, err}
	}()
	var o outcome
	finished := false // o holds the handler's outcome (taken from done)
	select {
	case o = <-done:
		finished = true
	case <-ctx.Done():
		select {
		case <-tr.detached: // a task already: the client going away does not end it
		default:
			// The client went away before the call became a task: an
			// ordinary cancellation, which a keyed call outlives like
			// any call that is not a task.
			cancelCause(context.Canceled)
			o, finished = <-done, true
		}
	case <-tr.detached:
	}
	if finished {
		// The handler may have detached and returned at once: runTask must
		// still get its outcome.
		done <- o
	}
	if !tr.isTask.Load() {
		cancel()
		return s.toolResult(ctx, st, cl, name, o.res, o.err)
	}
	// Create has returned: tasks/get already answers for it.
	body, _ := resultAnswer(st.rpcID, taskCreated(tr.created))
	st.answerWith(body)
	if !s.background(func() {
		defer s.endTask(tr.userID)
		defer cancel()
		s.runTask(hctx, st, tr, done)
	}) {
		// The server is closing: the handler is ended, and the task is
		// left as the store has it (a replica that stops mid-task).
		s.endTask(tr.userID)
		cancel()
	}
	return &mcpgo.CallToolResult{Content: []mcpgo.Content{}}, nil
}

// runTask waits for a detached handler, ending it when the task is
// cancelled on any replica, and stores its outcome.
func (s *Server) runTask(ctx context.Context, st *reqState, tr *taskRun, done <-chan outcome) {
	bg := context.WithoutCancel(ctx)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// The owner's access is checked again as long-lived streams' tokens are:
	// a task must not go on writing for a suspended or deleted account, a
	// revoked token, or a caller who lost the capability.
	recheck := time.NewTicker(s.recheck)
	defer recheck.Stop()
	var o outcome
	var revoked bool
	stop := s.stop
wait:
	for {
		select {
		case o = <-done:
			break wait
		case <-stop:
			stop = nil // the server is closing: end the handler, then store its outcome
			tr.cancel()
		case <-tick.C:
			if t, err := s.tasks.Get(bg, tr.userID, tr.id); err != nil || t.Status == TaskCancelled {
				tr.cancel()
			}
		case <-recheck.C:
			if !revoked && !s.taskAllowed(bg, st, tr.name) {
				s.log.InfoContext(bg, "mcp: task stopped: its owner may no longer run it", "capability", tr.name, "request_id", st.requestID)
				revoked = true
				tr.cancel()
			}
		}
	}
	_, err := s.tasks.Update(bg, tr.userID, tr.id, func(t *Task) error {
		if t.Terminal() {
			return nil // cancelled meanwhile
		}
		t.UpdatedAt = s.now().UTC()
		t.InputRequests = nil
		if revoked {
			t.Status = TaskFailed
			t.Error, _ = json.Marshal(rpcError{Code: mcpgo.INVALID_REQUEST, Message: "the task was stopped: its caller's access ended"})
			return nil
		}
		if o.err != nil && capabilities.CodeOf(o.err) == capabilities.CodeInternal {
			s.logIfInternal(bg, st, "task "+tr.name, o.err)
			t.Status = TaskFailed
			t.Error, _ = json.Marshal(rpcError{Code: mcpgo.INTERNAL_ERROR, Message: publicMessage(o.err, st.requestID)})
			return nil
		}
		res := mcpgo.CallToolResult{Content: contents(o.res.Content), StructuredContent: o.res.Structured, IsError: o.res.IsError}
		if o.err != nil {
			res = *mcpgo.NewToolResultError(publicMessage(o.err, st.requestID))
		}
		if len(res.Content) == 0 {
			res.Content = []mcpgo.Content{}
		}
		t.Status = TaskCompleted
		t.Result, _ = json.Marshal(res)
		return nil
	})
	if err != nil {
		s.log.ErrorContext(bg, "mcp: store the task's outcome", "err", err, "request_id", st.requestID)
	}
}

// askTask is Ask for a detached handler: questions not yet answered park
// the task in input_required until tasks/update answers all of them.
func (c *client) askTask(ctx context.Context, qs []capabilities.Question) ([]capabilities.Answer, error) {
	tr := c.task
	keys := make([]string, len(qs))
	missing := mcpgo.InputRequests{}
	for i, q := range qs {
		tr.asked++
		keys[i] = q.Key
		if keys[i] == "" {
			keys[i] = fmt.Sprintf("%s-%d", questionMethod(q), tr.asked)
		}
		missing[keys[i]] = inputRequest(q)
	}
	pending, _ := json.Marshal(missing)
	bg := context.WithoutCancel(ctx)
	_, err := c.s.tasks.Update(bg, tr.userID, tr.id, func(t *Task) error {
		if t.Terminal() {
			return context.Canceled
		}
		t.Status, t.InputRequests, t.UpdatedAt = TaskInputRequired, pending, c.s.now().UTC()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mcp: task input: %w", err)
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		var got map[string]json.RawMessage
		_, err := c.s.tasks.Update(bg, tr.userID, tr.id, func(t *Task) error {
			got = nil
			if t.Terminal() {
				return context.Canceled
			}
			for _, k := range keys {
				if _, ok := t.Answers[k]; !ok {
					return nil
				}
			}
			got = map[string]json.RawMessage{}
			for _, k := range keys {
				got[k] = t.Answers[k]
				delete(t.Answers, k)
			}
			t.Status, t.InputRequests, t.UpdatedAt = TaskWorking, nil, c.s.now().UTC()
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("mcp: task input: %w", err)
		}
		if got == nil {
			continue
		}
		out := make([]capabilities.Answer, len(qs))
		for i, q := range qs {
			if out[i], err = decodeAnswer(q, got[keys[i]]); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}

// serveTasks answers tasks/get, tasks/update and tasks/cancel (protocol
// 2026-07-28); the removed tasks/result and tasks/list are unknown methods.
func (s *Server) serveTasks(w http.ResponseWriter, r *http.Request, st *reqState, method string, body []byte) {
	fail := func(status, code int, msg string, data any) {
		writeError(w, status, st.rpcID, code, msg, data)
	}
	var req struct {
		Params struct {
			TaskID         string                     `json:"taskId"`
			InputResponses map[string]json.RawMessage `json:"inputResponses"`
			Meta           *mcpgo.Meta                `json:"_meta"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &req)
	p := req.Params
	// First the transport's checks of every 2026-07-28 request.
	if f := modernRefusal(r, p.Meta.ProtocolVersion()); f != nil {
		f.write(w, st.rpcID)
		return
	}
	switch method {
	case "tasks/get", "tasks/update", "tasks/cancel":
	default:
		fail(http.StatusNotFound, mcpgo.METHOD_NOT_FOUND, "method not found: "+method, nil)
		return
	}
	if s.tasks == nil {
		fail(http.StatusNotFound, mcpgo.METHOD_NOT_FOUND, "tasks are not supported", nil)
		return
	}
	caps := map[string]any{}
	if p.Meta != nil {
		if c, ok := p.Meta.AdditionalFields[mcpgo.MetaKeyClientCapabilities].(map[string]any); ok {
			caps = c
		}
	}
	if ext, _ := caps["extensions"].(map[string]any); ext[tasksExtension] == nil {
		fail(http.StatusBadRequest, mcpgo.MISSING_REQUIRED_CLIENT_CAPABILITY, "the tasks extension was not declared",
			map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}})
		return
	}
	if p.TaskID == "" {
		fail(http.StatusBadRequest, mcpgo.INVALID_PARAMS, "params.taskId is required", nil)
		return
	}
	if h := r.Header.Get("Mcp-Method"); h != method {
		fail(http.StatusBadRequest, mcpgo.HEADER_MISMATCH, "Mcp-Method header does not match the request", nil)
		return
	}
	if h := r.Header.Get("Mcp-Name"); h != p.TaskID {
		fail(http.StatusBadRequest, mcpgo.HEADER_MISMATCH, "Mcp-Name header does not match params.taskId", nil)
		return
	}
	ctx := r.Context()
	t, err := s.tasks.Get(ctx, st.caller.UserID, p.TaskID)
	// A task of a capability the caller may no longer use is unknown too:
	// every task operation passes the registry's decision, audited,
	// including the token's scopes (a token that could not start the task
	// cannot read, answer or cancel it either).
	if err == nil && (s.reg.Screen(ctx, st.caller, t.Capability) || s.reg.CheckScope(ctx, st.caller, t.Capability) != nil) {
		err = ErrTaskNotFound
	}
	if errors.Is(err, ErrTaskNotFound) {
		fail(unknownTask())
		return
	} else if err != nil {
		s.log.ErrorContext(ctx, "mcp: task", "err", err, "request_id", st.requestID)
		fail(http.StatusInternalServerError, mcpgo.INTERNAL_ERROR, internalMessage(st.requestID), nil)
		return
	}
	result := map[string]any{"resultType": "complete"}
	switch method {
	case "tasks/get":
		result = detailed(t)
	case "tasks/update":
		// Answers let the handler go on: a mutation, refused like a call
		// of the capability would be (an account being deleted resumes no
		// writing task).
		if e := s.reg.Admit(ctx, st.caller, t.Capability); e != nil {
			s.taskRefused(ctx, w, st, t.Capability, e, fail)
			return
		}
		_, err = s.tasks.Update(ctx, st.caller.UserID, t.ID, func(t *Task) error {
			if t.Status != TaskInputRequired {
				return nil
			}
			var pending map[string]json.RawMessage
			_ = json.Unmarshal(t.InputRequests, &pending)
			for k, v := range p.InputResponses {
				if _, asked := pending[k]; asked {
					if t.Answers == nil {
						t.Answers = map[string]json.RawMessage{}
					}
					t.Answers[k] = v
					delete(pending, k)
				}
			}
			t.InputRequests, _ = json.Marshal(pending)
			t.UpdatedAt = s.now().UTC()
			return nil
		})
	case "tasks/cancel":
		_, err = s.tasks.Update(ctx, st.caller.UserID, t.ID, func(t *Task) error {
			if !t.Terminal() {
				t.Status, t.InputRequests, t.UpdatedAt = TaskCancelled, nil, s.now().UTC()
			}
			return nil
		})
	}
	if err != nil {
		s.log.ErrorContext(ctx, "mcp: task", "err", err, "request_id", st.requestID)
		fail(http.StatusInternalServerError, mcpgo.INTERNAL_ERROR, internalMessage(st.requestID), nil)
		return
	}
	writeResult(w, st.rpcID, result)
}

// unknownTask is the answer to a task id the caller has no task under: an
// unknown one, another user's, or one of a capability the caller may no
// longer see.
func unknownTask() (status, code int, msg string, data any) {
	return http.StatusBadRequest, mcpgo.INVALID_PARAMS, "unknown task id", nil
}

// taskRefused answers a task operation the registry's decision refused
// (Admit) as the transport answers any refusal: the HTTP status and
// JSON-RPC code of capabilities' one table (HTTPStatus, RPCCode) and the
// domain message, with the domain code in the error's data and, for a
// quota, when to retry (data and Retry-After) as tools/call says it. A
// refusal that hides the capability (not found) is the unknown-task
// answer, and an internal error's detail goes to the log only.
func (s *Server) taskRefused(ctx context.Context, w http.ResponseWriter, st *reqState, capability string, err error, fail func(status, code int, msg string, data any)) {
	code := capabilities.CodeOf(err)
	switch {
	case code == capabilities.CodeNotFound:
		fail(unknownTask())
		return
	case code == capabilities.CodeInternal || errors.Is(err, context.Canceled):
		s.logIfInternal(ctx, st, "tasks/update "+capability, err)
		code = capabilities.CodeInternal
	}
	data := map[string]any{"code": string(code)}
	if at, ok := capabilities.RetryAfterOf(err); ok {
		data["retryAfter"] = at.UTC().Format(time.RFC3339)
		secs := int64(math.Ceil(at.Sub(s.now()).Seconds()))
		w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	}
	fail(capabilities.HTTPStatus(code), capabilities.RPCCode(code), publicMessage(err, st.requestID), data)
}
