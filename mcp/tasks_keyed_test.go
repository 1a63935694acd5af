package mcp

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// keyStore is an in-memory capabilities.IdempotencyStore.
type keyStore struct {
	mu   sync.Mutex
	next int64
	rows map[capabilities.IdempotencyKey]*capabilities.IdempotencyRecord
	byID map[int64]capabilities.IdempotencyKey
}

func (m *keyStore) Claim(_ context.Context, k capabilities.IdempotencyKey) (capabilities.IdempotencyRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := k
	id.ArgsHash = ""
	if r, ok := m.rows[id]; ok {
		return *r, false, nil
	}
	m.next++
	m.rows[id] = &capabilities.IdempotencyRecord{ID: m.next, ArgsHash: k.ArgsHash}
	m.byID[m.next] = id
	return *m.rows[id], true, nil
}

func (m *keyStore) Complete(_ context.Context, id int64, result []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.rows[m.byID[id]]; r != nil {
		r.Done, r.Result = true, result
	}
	return nil
}

func (m *keyStore) Release(_ context.Context, id int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rows, m.byID[id])
	return nil
}

// TestKeyedTaskEndsWhenStopped: a task started with an idempotency key is
// stopped like any other task when it is cancelled or its owner is
// suspended (a keyed handler outlives a client that went away, not a
// deliberate stop), and the stopped call's key is free again.
func TestKeyedTaskEndsWhenStopped(t *testing.T) {
	ended := make(chan bool, 16)
	reg := capabilities.NewRegistry(capabilities.Options{Idempotency: &keyStore{rows: map[capabilities.IdempotencyKey]*capabilities.IdempotencyRecord{}, byID: map[int64]capabilities.IdempotencyKey{}}, Logger: slog.New(slog.DiscardHandler)})
	must(t, reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "holdJob", Domain: "test", Description: "Holds.", Annotations: writes, Task: capabilities.TaskOptional,
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
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
		},
	})))
	f := newFixture(t, func(o *Options) {
		o.Registry = reg
		o.Tasks = MemoryTasks()
		o.recheck = 20 * time.Millisecond
	})
	start := func(token, key string) string {
		t.Helper()
		_, m := f.modernCall(token, "tools/call", "holdJob", map[string]any{"name": "holdJob", "arguments": map[string]any{}, "_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "t", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": taskCaps,
			capabilities.MetaIdempotencyKey:              key,
		}}, taskCaps)
		r, _ := m["result"].(map[string]any)
		id, _ := r["taskId"].(string)
		if id == "" {
			t.Fatalf("tools/call holdJob = %v, want a task", m)
		}
		return id
	}
	waitEnded := func(what string) {
		t.Helper()
		select {
		case ok := <-ended:
			if !ok {
				t.Fatalf("%s: the keyed task went on running", what)
			}
		case <-time.After(8 * time.Second):
			t.Fatalf("%s: the keyed task is still running", what)
		}
	}

	id := start("alice-token", "k-cancel")
	f.taskOp("alice-token", "tasks/cancel", id, nil)
	waitEnded("tasks/cancel")
	// The stopped call did not spend its key: the same key starts anew.
	id = start("alice-token", "k-cancel")
	f.taskOp("alice-token", "tasks/cancel", id, nil)
	waitEnded("tasks/cancel again")

	start("bob-token", "k-suspend")
	suspended := capabilitiestest.User("bob")
	suspended.State = capabilities.AccountSuspended
	f.loader.Set(suspended)
	waitEnded("owner suspended")
}
