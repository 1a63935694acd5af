package sqltasks

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func users(t *testing.T, s *storage.Store) (alice, bob string) {
	t.Helper()
	now := time.Now().UTC()
	for i, name := range []string{"alice", "bob"} {
		_, err := s.DB.ExecContext(context.Background(), "INSERT INTO users (id, stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
			i+1, strings.Repeat(name[:1], 64), name+"@example.com", name, now, now)
		if err != nil {
			t.Fatal(err)
		}
	}
	return strings.Repeat("a", 64), strings.Repeat("b", 64)
}

// TestTasks: a task is stored, read and updated by its owner; another user
// gets ErrTaskNotFound for it, exactly as for an unknown id, and cannot
// change it; an expired task is gone.
func TestTasks(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice, bob := users(t, s)
		st := New(s)
		now := time.Now().UTC().Truncate(time.Millisecond)
		task := mcp.Task{ID: "t1", UserID: alice, Capability: "slow", Status: mcp.TaskWorking,
			CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := st.Create(ctx, task); err != nil {
			t.Fatal(err)
		}
		if err := st.Create(ctx, mcp.Task{ID: "t2", UserID: "nobody", Status: mcp.TaskWorking, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}); err == nil {
			t.Fatal("a task for an unknown user was created")
		}
		got, err := st.Get(ctx, alice, "t1")
		if err != nil || got.Status != mcp.TaskWorking || got.Capability != "slow" || !got.CreatedAt.Equal(now) {
			t.Fatalf("get = %+v, %v", got, err)
		}
		_, err = st.Update(ctx, alice, "t1", func(t *mcp.Task) error {
			t.Status = mcp.TaskInputRequired
			t.InputRequests = json.RawMessage(`{"confirm":{"method":"elicitation/create"}}`)
			t.Answers = map[string]json.RawMessage{"x": json.RawMessage(`{"action":"accept"}`)}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got, _ = st.Get(ctx, alice, "t1")
		if got.Status != mcp.TaskInputRequired || !strings.Contains(string(got.InputRequests), "confirm") || string(got.Answers["x"]) != `{"action":"accept"}` {
			t.Fatalf("after update = %+v", got)
		}

		// Bob: the same answer as for an unknown id, and no change.
		for _, id := range []string{"t1", "unknown"} {
			if _, err := st.Get(ctx, bob, id); !errors.Is(err, mcp.ErrTaskNotFound) {
				t.Errorf("bob get %s: %v", id, err)
			}
			called := false
			if _, err := st.Update(ctx, bob, id, func(t *mcp.Task) error { called = true; t.Status = mcp.TaskCancelled; return nil }); !errors.Is(err, mcp.ErrTaskNotFound) || called {
				t.Errorf("bob update %s: %v (fn called %v)", id, err, called)
			}
		}
		if got, _ := st.Get(ctx, alice, "t1"); got.Status != mcp.TaskInputRequired {
			t.Fatalf("bob changed alice's task: %+v", got)
		}

		// Expired: gone for its owner too.
		st.now = func() time.Time { return now.Add(2 * time.Hour) }
		if _, err := st.Get(ctx, alice, "t1"); !errors.Is(err, mcp.ErrTaskNotFound) {
			t.Fatalf("expired task: %v", err)
		}
	})
}
