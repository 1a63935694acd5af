package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
)

// Agent state is durable: a bucket's keys and a memory that alice wrote
// over MCP are found by another server process on the same database and
// data directory (a restart, or another replica), and bob finds neither
// there with the same bucket id and the same words; deleting alice's
// account removes every row of both.
func TestAgentStateSurvivesRestartAndDiesWithTheAccount(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		a := alice.MCP(t)
		if r, err := a.Call("storageSet", map[string]any{"storageId": "notes", "key": "plan", "value": map[string]any{"step": 2}}); err != nil || r.IsError {
			t.Fatalf("storageSet: %v %s", err, r.Text)
		}
		if r, err := a.Call("memorySave", map[string]any{"text": "the atlas launch is on friday"}); err != nil || r.IsError {
			t.Fatalf("memorySave: %v %s", err, r.Text)
		}

		restarted := s.Replica(t)
		a2, b2 := restarted.MCP(t, alice.Token(t)), restarted.MCP(t, bob.Token(t))
		if r, err := a2.Call("storageGet", map[string]any{"storageId": "notes", "key": "plan"}); err != nil || r.IsError || !strings.Contains(r.Text, `"step":2`) {
			t.Fatalf("storageGet after the restart: %v %s", err, r.Text)
		}
		if r, err := a2.Call("memorySearch", map[string]any{"query": "atlas launch"}); err != nil || !strings.Contains(r.Text, "friday") {
			t.Fatalf("memorySearch after the restart: %v %s", err, r.Text)
		}
		if r, err := b2.Call("storageGet", map[string]any{"storageId": "notes", "key": "plan"}); err != nil || r.IsError || !strings.Contains(r.Text, `"found":false`) {
			t.Fatalf("bob's storageGet: %v %s", err, r.Text)
		}
		if r, err := b2.Call("memorySearch", map[string]any{"query": "atlas launch friday"}); err != nil || strings.Contains(r.Text, "friday") {
			t.Fatalf("bob's memorySearch: %v %s", err, r.Text)
		}

		res, err := restarted.Lifecycle().Delete(ctx, alice.Owner())
		if err != nil || !res.Completed {
			t.Fatalf("delete alice: %+v %v", res, err)
		}
		for _, table := range []string{"storage_entries", "storage_buckets", "storage_usage", "memories"} {
			n, err := storage.CountRows(ctx, restarted.Store().DB, storage.Table{Name: table, OwnerColumn: "user_id"}, alice.Owner())
			if err != nil || n != 0 {
				t.Fatalf("%s: %d rows of alice after her deletion (%v)", table, n, err)
			}
		}
	})
}
