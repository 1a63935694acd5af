package memory_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// TestListCursorIsOpaque: a memoryList cursor names the last memory shown
// by its creation time and public id, never by the table's row id (which
// grows with every user's saves and would tell a user how many memories
// others saved between two of theirs); pages made of memories saved at
// the same instant have neither gaps nor duplicates; a cursor this
// listing did not issue is refused as invalid input.
func TestListCursorIsOpaque(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		e := newEnv(t, s, memory.Config{Now: func() time.Time { return at }})
		alice, bob := e.user("alice"), e.user("bob")
		var want []string
		for i := range 7 {
			want = append(want, e.save(alice, fmt.Sprintf("same instant note %d", i)).ID)
			e.save(bob, fmt.Sprintf("bob's note %d", i))
		}
		// Newest first: all were saved at once, so by id, descending.
		slices.Sort(want)
		slices.Reverse(want)
		var got []string
		cursor := ""
		for {
			page, err := call[memory.ListOutput](e, alice, "memoryList", map[string]any{"limit": 3, "cursor": cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range page.Memories {
				got = append(got, m.ID)
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
			raw, err := base64.RawURLEncoding.DecodeString(cursor)
			if err != nil {
				t.Fatalf("cursor %q: %v", cursor, err)
			}
			var body map[string]any
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatalf("cursor %s: %v", raw, err)
			}
			last := page.Memories[len(page.Memories)-1]
			var rowID int64
			if err := s.DB.NewRaw("SELECT id FROM memories WHERE public_id = ?", last.ID).Scan(context.Background(), &rowID); err != nil {
				t.Fatal(err)
			}
			for k, v := range body {
				if f, ok := v.(float64); ok {
					t.Fatalf("cursor %s carries a number (%s = %v; the row id is %d)", raw, k, f, rowID)
				}
			}
			if body["p"] != last.ID || len(body) != 3 {
				t.Fatalf("cursor %s: want the kind, the time and %s", raw, last.ID)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("pages %v, want %v", got, want)
		}

		enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
		for _, bad := range []string{
			"x", "!!!", enc(`{"k":"memories","a":5}`), enc(`{"k":"memories/v2","t":"2026-03-01T12:00:00Z","p":"mem_1"}`),
			enc(`{"k":"other","t":"2026-03-01T12:00:00Z","p":"` + want[0] + `"}`),
			enc(`{"k":"memories/v2","t":"2026-03-01T12:00:00Z","p":"` + want[0] + `","id":7}`),
			enc(`{"k":"memories/v2","p":"` + want[0] + `"}`), enc(strings.Repeat("a", 400)),
		} {
			_, err := call[memory.ListOutput](e, alice, "memoryList", map[string]any{"cursor": bad})
			wantCode(t, err, capabilities.CodeInvalidInput)
		}
		// A cursor naming another user's memory only positions alice's
		// listing: it reads none of bob's rows.
		bobs, err := call[memory.ListOutput](e, bob, "memoryList", map[string]any{"limit": 1})
		if err != nil {
			t.Fatal(err)
		}
		page, err := call[memory.ListOutput](e, alice, "memoryList", map[string]any{"cursor": bobs.NextCursor, "limit": 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page.Memories {
			if !slices.Contains(want, m.ID) {
				t.Fatalf("alice's listing holds %s, not hers", m.ID)
			}
		}
	})
}

// TestSearchChecksCommonWordsAmongTheBest: a word held by more of the
// caller's memories than a search reads of it still counts in the best
// candidates, so the memory holding a rare word and the common one ranks
// above a newer one holding the rare word alone.
func TestSearchChecksCommonWordsAmongTheBest(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, memory.Config{})
		alice := e.user("alice")
		both := e.save(alice, "apple and kumquat jam recipe")
		// More than a search reads of one word on SQLite (PostgreSQL reads
		// them all).
		bulkSave(t, s, owner(alice), 2100, func(i int) string { return fmt.Sprintf("apple filler note %d", i) })
		newer := e.save(alice, "kumquat tree in the garden")
		res := e.search(alice, map[string]any{"query": "apple kumquat"})
		if len(res) == 0 || res[0].ID != both.ID {
			t.Fatalf("found %v first, want %s (then %s)", foundIDs(res[:min(3, len(res))]), both.ID, newer.ID)
		}
		if res[1].ID != newer.ID || res[0].Score <= res[1].Score {
			t.Fatalf("found %+v, want %s second with a lower score", res[:2], newer.ID)
		}
	})
}

// TestMemoryCountsFollowTheRows: the per-user counts the database keeps
// for search and the bound match the rows after saves, status changes,
// deletions and another user's writes.
func TestMemoryCountsFollowTheRows(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, memory.Config{})
		alice, bob := e.user("alice"), e.user("bob")
		var ids []string
		for i := range 6 {
			ids = append(ids, e.save(alice, fmt.Sprintf("note %d", i)).ID)
		}
		e.save(bob, "bob's only note")
		for _, id := range ids[:2] {
			if _, err := call[memory.Memory](e, alice, "memoryUpdate", map[string]any{"id": id, "status": "archived"}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := call[memory.Memory](e, alice, "memoryUpdate", map[string]any{"id": ids[0], "status": "archived", "text": "still archived"}); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{ids[1], ids[5]} {
			if _, err := call[memory.DeleteOutput](e, alice, "memoryDelete", map[string]any{"id": id}); err != nil {
				t.Fatal(err)
			}
		}
		check := func(c capabilities.Caller) {
			t.Helper()
			var counted, real struct{ Active, Archived int64 }
			ctx := context.Background()
			if err := s.DB.NewRaw("SELECT active, archived FROM memory_counts WHERE user_id = ?", c.OwnerID).Scan(ctx, &counted.Active, &counted.Archived); err != nil {
				t.Fatal(err)
			}
			if err := s.DB.NewRaw("SELECT COUNT(*) FILTER (WHERE status = 'active'), COUNT(*) FILTER (WHERE status = 'archived') FROM memories WHERE user_id = ?",
				c.OwnerID).Scan(ctx, &real.Active, &real.Archived); err != nil {
				t.Fatal(err)
			}
			if counted != real {
				t.Fatalf("%s: counted %+v, stored %+v", c.Username, counted, real)
			}
		}
		check(alice)
		check(bob)
	})
}

// TestSearchRefusesIDsBeyondTheIndexRange: on SQLite the full-text
// index's rowids hold the owner id (below 2^30) and the memory id (below
// 2^32); a row outside is refused, never indexed in another owner's
// range.
func TestSearchRefusesIDsBeyondTheIndexRange(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	e := newEnv(t, s, memory.Config{})
	alice := e.user("alice")
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := s.DB.ExecContext(ctx, "INSERT INTO users (id, stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
		int64(1)<<30, strings.Repeat("f", 64), "big@example.com", "big", now, now); err != nil {
		t.Fatal(err)
	}
	big := capabilities.Caller{UserID: strings.Repeat("f", 64), OwnerID: 1 << 30, Username: "big", Roles: alice.Roles,
		Permissions: alice.Permissions, AllScopes: true, State: capabilities.AccountActive, Interactive: true}
	if _, err := call[memory.Memory](e, big, "memorySave", map[string]any{"text": "too far"}); err == nil {
		t.Fatal("a memory of owner 2^30 was indexed")
	}
	if _, err := s.DB.ExecContext(ctx, "INSERT INTO memories (id, public_id, user_id, text, created_at, updated_at) VALUES (?, ?, ?, 'far id', ?, ?)",
		int64(1)<<32, "mem_"+strings.Repeat("b", 24), alice.OwnerID, now, now); err == nil {
		t.Fatal("a memory of row id 2^32 was indexed")
	}
	if n := count(t, s.DB, "memories"); n != 0 {
		t.Fatalf("%d memories stored", n)
	}
}

// bulkSave inserts n memories of o straight into the table (the
// database's triggers index and count them), oldest first.
func bulkSave(t *testing.T, s *storage.Store, o storage.Owner, n int, text func(i int) string) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	for start := 0; start < n; start += 500 {
		var q strings.Builder
		q.WriteString("INSERT INTO memories (public_id, user_id, text, tags, writer, status, created_at, updated_at) VALUES ")
		var args []any
		for i := start; i < min(n, start+500); i++ {
			if i > start {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, '[]', 'agent', 'active', ?, ?)")
			at := now.Add(time.Duration(i) * time.Microsecond)
			args = append(args, fmt.Sprintf("mem_bulk%020d", i), o.ID, text(i), at, at)
		}
		if _, err := s.DB.NewRaw(q.String(), args...).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
