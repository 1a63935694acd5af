package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// Task is the stored state of one task (protocol 2026-07-28 tasks
// extension): everything any replica needs to answer tasks/get, accept
// tasks/update and tasks/cancel.
type Task struct {
	ID         string
	UserID     string // the owner's stable user id
	Capability string
	Status     string // working, input_required, completed, failed, cancelled
	// InputRequests are the questions still waiting for an answer (an MCP
	// inputRequests object), while Status is input_required.
	InputRequests json.RawMessage
	// Answers are the answers delivered by tasks/update and not yet taken
	// by the handler, by key.
	Answers map[string]json.RawMessage
	// Result is the inlined tool result (completed); Error the JSON-RPC
	// error object (failed).
	Result, Error        json.RawMessage
	CreatedAt, UpdatedAt time.Time
	ExpiresAt            time.Time
}

// Terminal reports whether the task has ended.
func (t Task) Terminal() bool {
	return t.Status == TaskCompleted || t.Status == TaskFailed || t.Status == TaskCancelled
}

// The task statuses.
const (
	TaskWorking       = "working"
	TaskInputRequired = "input_required"
	TaskCompleted     = "completed"
	TaskFailed        = "failed"
	TaskCancelled     = "cancelled"
)

// ErrTaskNotFound is returned for a task that does not exist, has expired,
// or belongs to another user: the three are indistinguishable.
var ErrTaskNotFound = errors.New("mcp: task not found")

// TaskStore keeps tasks so that any replica can answer for them. Every
// method takes the caller's user id and acts only on that user's tasks.
type TaskStore interface {
	// Create stores a new task; it is readable (Get) once Create returns.
	Create(ctx context.Context, t Task) error
	// Get returns userID's task id, or ErrTaskNotFound.
	Get(ctx context.Context, userID, id string) (Task, error)
	// Update applies fn to userID's task id atomically (fn may be called
	// again on a conflict) and stores the result; ErrTaskNotFound if there
	// is no such task.
	Update(ctx context.Context, userID, id string, fn func(*Task) error) (Task, error)
}

// MemoryTasks is a TaskStore in this process's memory: for tests and
// single-process servers (tasks are lost on restart and invisible to other
// replicas). enclave.New uses an SQL store instead.
func MemoryTasks() TaskStore { return &memoryTasks{m: map[string]Task{}, now: time.Now} }

type memoryTasks struct {
	mu  sync.Mutex
	m   map[string]Task
	now func() time.Time
}

func cloneTask(t Task) Task {
	if t.Answers != nil {
		a := make(map[string]json.RawMessage, len(t.Answers))
		for k, v := range t.Answers {
			a[k] = v
		}
		t.Answers = a
	}
	return t
}

func (s *memoryTasks) Create(_ context.Context, t Task) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, old := range s.m {
		if s.now().After(old.ExpiresAt) {
			delete(s.m, id)
		}
	}
	if _, ok := s.m[t.ID]; ok {
		return errors.New("mcp: task id taken")
	}
	s.m[t.ID] = cloneTask(t)
	return nil
}

func (s *memoryTasks) Get(_ context.Context, userID, id string) (Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.m[id]
	if !ok || t.UserID != userID || s.now().After(t.ExpiresAt) {
		return Task{}, ErrTaskNotFound
	}
	return cloneTask(t), nil
}

func (s *memoryTasks) Update(_ context.Context, userID, id string, fn func(*Task) error) (Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.m[id]
	if !ok || t.UserID != userID || s.now().After(t.ExpiresAt) {
		return Task{}, ErrTaskNotFound
	}
	t = cloneTask(t)
	if err := fn(&t); err != nil {
		return Task{}, err
	}
	s.m[id] = t
	return cloneTask(t), nil
}
