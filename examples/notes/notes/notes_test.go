package notes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/examples/notes/notes"
	"github.com/enclave-mcp/enclave/migrations"
)

func options() enclavetest.Options {
	return enclavetest.Options{
		Config: enclave.Config{Migrations: []migrations.Source{notes.Migrations}, Vocabulary: notes.Vocabulary()},
		Setup: func(srv *enclave.Server) error {
			_, err := notes.Register(srv)
			return err
		},
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The notes domain over real MCP with real tokens: its own permissions,
// per-user isolation on every capability, the word-count job after an
// upload, the stats schedule, and export and deletion of all of it.
func TestNotesDomain(t *testing.T) {
	notes.StatsEvery = time.Second
	enclavetest.Each(t, options(), func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		// The domain's tables are covered by the inventory guardrail.
		if err := s.Inventory().Check(ctx, s.Store().DB); err != nil {
			t.Fatal(err)
		}
		// ... and by the retention guardrail.
		if err := s.Retention().Check(ctx, s.Store().DB); err != nil {
			t.Fatal(err)
		}
		aliceU, bobU := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		if !aliceU.Caller(t).HasPermission(notes.CreateNoteOwn) {
			t.Fatal("role user lacks create:note:own")
		}
		alice, bob := aliceU.MCP(t), bobU.MCP(t)
		call := func(c *enclavetest.Client, name, args string) enclavetest.ToolResult {
			t.Helper()
			res, err := c.Call(name, json.RawMessage(args))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return res
		}
		res := call(alice, "noteCreate", `{"title":"plan","body":"ship it","attachmentBase64":"aGVsbG8gYnJhdmUgbmV3IHdvcmxk"}`) // "hello brave new world"
		var n notes.Note
		if res.IsError || res.Decode(&n) != nil || n.ID == 0 {
			t.Fatalf("create: %+v", res)
		}
		if res := call(bob, "noteCreate", `{"title":"bob's","body":"mine"}`); res.IsError {
			t.Fatalf("bob's create: %+v", res)
		}

		// Happy path, then cross-user denial on every capability.
		id := `{"id":` + itoa(n.ID) + `}`
		if res := call(alice, "noteGet", id); res.IsError || !strings.Contains(string(res.Structured), "aGVsbG8g") {
			t.Fatalf("alice's get: %+v", res)
		}
		if res := call(bob, "noteGet", id); !res.IsError || !strings.Contains(res.Text, "no such note") {
			t.Fatalf("bob reads alice's note: %+v", res)
		}
		if res := call(bob, "noteList", `{}`); strings.Contains(string(res.Structured), "plan") {
			t.Fatalf("bob lists alice's note: %+v", res)
		}
		if res := call(bob, "noteDelete", id); string(res.Structured) != `{"deleted":false}` {
			t.Fatalf("bob deletes alice's note: %+v", res)
		}

		// The job counted the attachment's words, as alice.
		waitFor(t, "the word count", func() bool {
			var got struct{ Note notes.Note }
			res := call(alice, "noteGet", id)
			return res.Decode(&got) == nil && got.Note.AttachmentWords != nil && *got.Note.AttachmentWords == 4
		})
		// The schedule refreshed the statistics.
		waitFor(t, "the stats schedule", func() bool {
			var st notes.Stats
			err := s.Store().DB.NewSelect().Model(&st).Where("user_id = ?", aliceU.ID).Scan(ctx)
			return err == nil && st.Notes == 1 && st.Words == 4
		})

		// The generic machinery exports and deletes the domain.
		var buf bytes.Buffer
		if err := s.Lifecycle().WriteExport(ctx, aliceU.Owner(), &buf); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		if !strings.Contains(out, `"sql:notes"`) || !strings.Contains(out, `"sql:note_stats"`) || !strings.Contains(out, `"sql:outbox"`) ||
			!strings.Contains(out, "aGVsbG8g") || strings.Contains(out, "bob's") {
			t.Fatalf("alice's export: %.600s", out)
		}
		del, err := s.Lifecycle().Delete(ctx, aliceU.Owner())
		if err != nil || del.Deleted["sql:notes"] != 1 || del.Deleted["blob:notes"] != 1 || del.Deleted["sql:note_stats"] != 1 {
			t.Fatalf("deletion: %+v %v", del, err)
		}
		if res := call(bob, "noteList", `{}`); !strings.Contains(string(res.Structured), "bob's") {
			t.Fatalf("bob's notes after alice's deletion: %+v", res)
		}
	})
}

// A job enqueued for a note is exported with its owner's account until it
// ran, and deleted with it.
func TestWordCountJobGoesWithTheAccount(t *testing.T) {
	enclavetest.Each(t, options(), func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		u := s.CreateUser(t, "carol")
		// A job that cannot run yet: the account is suspended, so the job's
		// non-interactive caller is refused and the job retries later.
		if _, err := s.Accounts().Lifecycle.Suspend(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		err := s.Store().RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			return s.Jobs().Enqueue(ctx, tx, notes.WordCountJob, u.StableID, map[string]int64{"noteId": 1})
		})
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.Lifecycle().Manifest(ctx, u.Owner())
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, sec := range m.Sections {
			found = found || (sec.Name == "sql:outbox" && sec.Count >= 1)
		}
		if !found {
			t.Fatalf("the pending job is not in carol's export: %+v", m.Sections)
		}
		if _, err := s.Lifecycle().Delete(ctx, u.Owner()); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Store().DB.NewSelect().Table("outbox").Where("user_id = ?", u.ID).Count(ctx); err != nil || n != 0 {
			t.Fatalf("carol's jobs after deletion: %d %v", n, err)
		}
	})
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
