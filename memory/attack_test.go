package memory_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// ftsRangeRows counts the SQLite full-text index's entries in owner's
// rowid range (both statuses) that match word.
func ftsRangeRows(t *testing.T, s *storage.Store, ownerID int64, word string) int {
	t.Helper()
	var n int
	lo := ownerID << 33
	if err := s.DB.NewRaw(`SELECT count(*) FROM memory_fts WHERE memory_fts MATCH ? AND rowid BETWEEN ? AND ?`,
		`"`+word+`"`, lo, lo+(int64(1)<<33)-1).Scan(context.Background(), &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDeletedAccountLeavesNothingToAReusedID: deleting an account (the
// inventory's rows, then the users row; or the users row alone, by its
// cascades) leaves no full-text entries in its range and no counts, so a
// new account that gets the same users id (SQLite reuses the largest id
// after a delete) and memories with the same row ids inherits none of
// them.
func TestDeletedAccountLeavesNothingToAReusedID(t *testing.T) {
	for _, how := range []string{"inventory", "cascade"} {
		t.Run(how, func(t *testing.T) {
			storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
				ctx := t.Context()
				e := newEnv(t, s, memory.Config{})
				bob := e.user("bob")
				alice := e.user("alice")          // the largest users id
				e.save(bob, "bob keeps a wombat") // alice's memories have the largest row ids
				var aliceIDs []int64
				for i := range 5 {
					m := e.save(alice, fmt.Sprintf("alice keeps the quokka secret %d", i))
					var id int64
					if err := s.DB.NewRaw("SELECT id FROM memories WHERE public_id = ?", m.ID).Scan(ctx, &id); err != nil {
						t.Fatal(err)
					}
					aliceIDs = append(aliceIDs, id)
				}
				archived := e.save(alice, "alice archived the quokka plan")
				if _, err := e.svc.Update(ctx, owner(alice), "agent", memory.UpdateInput{ID: archived.ID, Status: memory.StatusArchived}); err != nil {
					t.Fatal(err)
				}
				if s.Dialect() == storage.SQLite && ftsRangeRows(t, s, alice.OwnerID, "quokka") != 6 {
					t.Fatalf("alice's range holds %d entries of quokka, want 6", ftsRangeRows(t, s, alice.OwnerID, "quokka"))
				}
				err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
					if how == "inventory" {
						inv := storage.NewInventory()
						if err := memory.RegisterInventory(inv); err != nil {
							return err
						}
						if _, err := inv.DeleteRows(ctx, tx, owner(alice)); err != nil {
							return err
						}
					}
					_, err := tx.NewDelete().Table("users").Where("id = ?", alice.OwnerID).Exec(ctx)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				if n := count(t, s.DB, "memories WHERE user_id = "+fmt.Sprint(alice.OwnerID)); n != 0 {
					t.Fatalf("alice's memories left: %d", n)
				}
				if n := count(t, s.DB, "memory_counts WHERE user_id = "+fmt.Sprint(alice.OwnerID)); n != 0 {
					t.Fatalf("alice's counts left: %d", n)
				}
				if s.Dialect() == storage.SQLite {
					for _, w := range []string{"quokka", "alice", "secret", "plan"} {
						if n := ftsRangeRows(t, s, alice.OwnerID, w); n != 0 {
							t.Fatalf("full-text entries of %q left in alice's range: %d", w, n)
						}
					}
					if _, err := s.DB.ExecContext(ctx, "INSERT INTO memory_fts (memory_fts, rank) VALUES ('integrity-check', 1)"); err != nil {
						t.Fatalf("full-text index out of step: %v", err)
					}
				}
				// Alice's users id is never given again (migration 0011): an
				// insert that would take it is refused, on SQLite also one
				// that takes it as the next automatic id.
				now := time.Now().UTC()
				if _, err := s.DB.ExecContext(ctx, "INSERT INTO users (id, stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, 'x@example.com', 'x', ?, ?)",
					alice.OwnerID, strings.Repeat("1", 64), now, now); err == nil || !strings.Contains(err.Error(), "retired") {
					t.Fatalf("a new account took alice's users id: %v", err)
				}
				if s.Dialect() == storage.SQLite {
					if _, err := s.DB.ExecContext(ctx, "INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, 'y@example.com', 'y', ?, ?)",
						strings.Repeat("2", 64), now, now); err == nil || !strings.Contains(err.Error(), "retired") {
						t.Fatalf("a new account took alice's users id as the next rowid: %v", err)
					}
					if _, err := s.DB.ExecContext(ctx, "INSERT INTO users (id, stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, 'z@example.com', 'z', ?, ?)",
						alice.OwnerID+1, strings.Repeat("3", 64), now, now); err != nil {
						t.Fatal(err)
					}
				}
				carol := e.user("carol")
				var reused int
				for i := range 6 {
					m := e.save(carol, fmt.Sprintf("carol plants a tomato %d", i))
					var id int64
					if err := s.DB.NewRaw("SELECT id FROM memories WHERE public_id = ?", m.ID).Scan(ctx, &id); err != nil {
						t.Fatal(err)
					}
					if slices.Contains(aliceIDs, id) {
						reused++
					}
				}
				// SQLite gives alice's memories' row ids to carol's (no
				// AUTOINCREMENT): their index entries are under carol's range.
				if s.Dialect() == storage.SQLite && reused == 0 {
					t.Fatalf("carol's memories took none of alice's row ids %v: the test does not test reuse", aliceIDs)
				}
				for _, st := range []string{"active", "archived", "all"} {
					for _, q := range []string{"quokka", "secret", "alice keeps", "plan"} {
						if res := e.search(carol, map[string]any{"query": q, "status": st, "limit": 100}); len(res) != 0 {
							t.Fatalf("carol's search %q (%s) found %v", q, st, foundIDs(res))
						}
					}
				}
				if res := e.search(carol, map[string]any{"query": "tomato", "limit": 100}); len(res) != 6 {
					t.Fatalf("carol's tomatoes: %d", len(res))
				}
				var c struct {
					Active   int64 `bun:"active"`
					Archived int64 `bun:"archived"`
				}
				if err := s.DB.NewRaw("SELECT active, archived FROM memory_counts WHERE user_id = ?", carol.OwnerID).Scan(ctx, &c); err != nil || c.Active != 6 || c.Archived != 0 {
					t.Fatalf("carol's counts %+v %v: want 6 active", c, err)
				}
			})
		})
	}
}

// TestSearchMatchesBruteForceAfterUpdates: with a common word in more of
// the caller's memories than a search reads of it, old memories updated
// to hold (or lose) words, archived and brought back, all saved at one
// instant, search ranks as a brute-force ranking over the user's own
// memories does (each word's rarity among them).
func TestSearchMatchesBruteForceAfterUpdates(t *testing.T) {
	if testing.Short() {
		t.Skip("thousands of memories")
	}
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := t.Context()
		at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		e := newEnv(t, s, memory.Config{Now: func() time.Time { return at }, Options: memory.Options{MaxMemories: 100000}})
		alice, bob := e.user("alice"), e.user("bob")
		const n = 2600
		id := func(i int) string {
			b := []byte(fmt.Sprintf("%024d", i))
			for k := range b {
				b[k] = 'a' + (b[k] - '0')
			}
			return "mem_" + string(b)
		}
		// texts[i] is memory i's text; rare in every 50th, the common
		// word in all but every 7th.
		texts := make([]string, n)
		for i := range n {
			w := []string{"filler"}
			if i%7 != 0 {
				w = append(w, "pelican")
			}
			if i%50 == 0 {
				w = append(w, "narwhal")
			}
			texts[i] = strings.Join(w, " ")
		}
		err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			for i := range n {
				if _, err := tx.ExecContext(ctx, `INSERT INTO memories (public_id, user_id, text, tags, source, writer, status, created_at, updated_at)
					VALUES (?, ?, ?, '[]', '', 'agent', 'active', ?, ?)`, id(i), alice.OwnerID, texts[i], at, at); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Bob's memories hold both words: they must not count.
		for range 30 {
			e.save(bob, "narwhal pelican")
		}
		up := func(i int, in memory.UpdateInput) {
			t.Helper()
			in.ID = id(i)
			if _, err := e.svc.Update(ctx, owner(alice), "agent", in); err != nil {
				t.Fatal(err)
			}
			if in.Text != "" {
				texts[i] = in.Text
			}
		}
		// Old memories (below the newest 2000 of the common word) gain the
		// common word, the rare one, or lose the common word; new ones
		// lose it; some are archived and brought back (a new rowid range
		// and back), some stay archived.
		for _, i := range []int{7, 14, 21, 350} {
			up(i, memory.UpdateInput{Text: "filler pelican narwhal"})
		}
		for _, i := range []int{100, 150, 2550} {
			up(i, memory.UpdateInput{Text: "filler narwhal"})
		}
		for _, i := range []int{1, 2, 3, 2599, 2598} {
			up(i, memory.UpdateInput{Text: "narwhal pelican"})
		}
		for _, i := range []int{200, 250, 2500, 2597} {
			up(i, memory.UpdateInput{Status: memory.StatusArchived})
			up(i, memory.UpdateInput{Status: memory.StatusActive})
		}
		archived := map[int]bool{}
		for _, i := range []int{300, 2450, 5} {
			up(i, memory.UpdateInput{Status: memory.StatusArchived})
			archived[i] = true
		}
		rowID := map[string]int64{}
		var rows []struct {
			ID       int64  `bun:"id"`
			PublicID string `bun:"public_id"`
		}
		if err := s.DB.NewRaw("SELECT id, public_id FROM memories WHERE user_id = ?", alice.OwnerID).Scan(ctx, &rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			rowID[r.PublicID] = r.ID
		}
		for _, st := range []string{"active", "archived", "all"} {
			for _, q := range []string{"narwhal pelican", "pelican", "narwhal", "filler narwhal"} {
				words := strings.Fields(q)
				var mine []int
				for i := range n {
					if st == "all" || (st == "archived") == archived[i] {
						mine = append(mine, i)
					}
				}
				idf := map[string]float64{}
				for _, w := range words {
					k := 0
					for _, i := range mine {
						if slices.Contains(strings.Fields(texts[i]), w) {
							k++
						}
					}
					N, m := float64(len(mine)), float64(k)
					idf[w] = math.Log(1 + (max(N, m)-m+0.5)/(m+0.5))
				}
				type sc struct {
					id    string
					score float64
				}
				var want []sc
				for _, i := range mine {
					score, hit := 0.0, false
					for _, w := range words {
						if slices.Contains(strings.Fields(texts[i]), w) {
							score += idf[w]
							hit = true
						}
					}
					if hit {
						want = append(want, sc{id(i), score})
					}
				}
				slices.SortFunc(want, func(a, b sc) int {
					if math.Abs(a.score-b.score) > 1e-9 {
						return cmp.Compare(b.score, a.score)
					}
					return cmp.Compare(rowID[b.id], rowID[a.id])
				})
				got := e.search(alice, map[string]any{"query": q, "status": st, "limit": 100})
				want = want[:min(100, len(want))]
				if len(got) != len(want) {
					t.Fatalf("%q (%s): %d results, want %d", q, st, len(got), len(want))
				}
				for k := range want {
					if got[k].ID != want[k].id || math.Abs(got[k].Score-want[k].score) > 1e-9 {
						t.Fatalf("%q (%s): result %d is %s (%.6f), want %s (%.6f)", q, st, k, got[k].ID, got[k].Score, want[k].id, want[k].score)
					}
				}
			}
		}
	})
}

// TestPostgresLongWordsKeepOtherWords: a word the parser keeps (up to
// 2047 bytes) is longer than a lexeme may be once the owner's prefix is
// added; array_to_tsvector does not refuse it but truncates its length
// (to 11 bits), which leaves the vector out of order, so that the
// memory's other words no longer match it. Lexemes too long for any query
// word are left out of the vector instead (migration 0300).
func TestPostgresLongWordsKeepOtherWords(t *testing.T) {
	s := storagetest.Open(t, storage.Postgres) // skips without PostgreSQL
	e := newEnv(t, s, memory.Config{})
	alice := e.user("alice")
	for _, n := range []int{2040, 2044, 2045, 2046, 2047} {
		m := e.save(alice, "aardvark ab "+strings.Repeat("b", n)+" "+strings.Repeat("c", n)+" cassowary")
		var ok bool
		if err := s.DB.NewRaw(`SELECT memory_search_vector(user_id, status, text, tags) @@ memory_search_query(user_id, status, 'aardvark')
			AND memory_search_vector(user_id, status, text, tags) @@ memory_search_query(user_id, status, 'ab')
			AND memory_search_vector(user_id, status, text, tags) @@ memory_search_query(user_id, status, 'cassowary') FROM memories WHERE public_id = ?`,
			m.ID).Scan(t.Context(), &ok); err != nil {
			t.Fatal(err)
		}
		if !ok {
			var v string
			_ = s.DB.NewRaw("SELECT left(memory_search_vector(user_id, status, text, tags)::text, 200) FROM memories WHERE public_id = ?", m.ID).Scan(t.Context(), &v)
			t.Fatalf("a memory with a %d-byte word does not match its other words: %s", n, v)
		}
		if res := e.search(alice, map[string]any{"query": "aardvark"}); !slices.Contains(foundIDs(res), m.ID) {
			t.Fatalf("a memory with a %d-byte word is not found by its other words", n)
		}
		if _, err := e.svc.Delete(t.Context(), owner(alice), m.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCountsHoldUnderConcurrentWriters: twenty writers saving, archiving,
// restoring, rewriting and deleting one user's memories at once (deleting
// and archiving the same ones) leave memory_counts equal to the rows, and
// the per-user bound is never passed.
func TestCountsHoldUnderConcurrentWriters(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := t.Context()
		const maxMem = 60
		e := newEnv(t, s, memory.Config{Options: memory.Options{MaxMemories: maxMem}})
		alice := e.user("alice")
		var shared []string
		for i := range 10 {
			shared = append(shared, e.save(alice, fmt.Sprintf("shared note %d", i)).ID)
		}
		errs := make(chan error, 20)
		// The merge lane runs through the writes.
		stop, merged := make(chan struct{}), make(chan error, 1)
		go func() {
			for {
				select {
				case <-stop:
					merged <- nil
					return
				default:
				}
				if _, err := memory.CompactIndex(ctx, s, 0); err != nil {
					merged <- err
					return
				}
			}
		}()
		for w := range 20 {
			go func() {
				var err error
				defer func() { errs <- err }()
				for k := range 6 {
					m, serr := e.svc.Save(ctx, owner(alice), "agent", memory.SaveInput{Text: fmt.Sprintf("writer %d note %d", w, k)})
					if serr != nil && !strings.Contains(serr.Error(), "most allowed") {
						err = serr
						return
					}
					id := shared[(w+k)%len(shared)]
					st := memory.StatusArchived
					if k%2 == 1 {
						st = memory.StatusActive
					}
					if _, uerr := e.svc.Update(ctx, owner(alice), "agent", memory.UpdateInput{ID: id, Status: st, Text: fmt.Sprintf("shared note rewritten %d %d", w, k)}); uerr != nil && !strings.Contains(uerr.Error(), "not found") {
						err = uerr
						return
					}
					if (w+k)%5 == 0 {
						if _, derr := e.svc.Delete(ctx, owner(alice), id); derr != nil {
							err = derr
							return
						}
					}
					if serr == nil && k%3 == 0 {
						if _, derr := e.svc.Delete(ctx, owner(alice), m.ID); derr != nil {
							err = derr
							return
						}
					}
				}
			}()
		}
		for range 20 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		if err := <-merged; err != nil {
			t.Fatal(err)
		}
		var c, rows struct {
			Active   int64 `bun:"active"`
			Archived int64 `bun:"archived"`
		}
		if err := s.DB.NewRaw("SELECT active, archived FROM memory_counts WHERE user_id = ?", alice.OwnerID).Scan(ctx, &c); err != nil {
			t.Fatal(err)
		}
		if err := s.DB.NewRaw(`SELECT COALESCE(SUM(CASE WHEN status = 'active' THEN 1 ELSE 0 END), 0) AS active,
			COALESCE(SUM(CASE WHEN status = 'archived' THEN 1 ELSE 0 END), 0) AS archived FROM memories WHERE user_id = ?`, alice.OwnerID).Scan(ctx, &rows); err != nil {
			t.Fatal(err)
		}
		if c != rows {
			t.Fatalf("memory_counts %+v, rows %+v", c, rows)
		}
		if c.Active+c.Archived > maxMem {
			t.Fatalf("%d memories kept, at most %d allowed", c.Active+c.Archived, maxMem)
		}
		if s.Dialect() == storage.SQLite {
			if _, err := s.DB.ExecContext(ctx, "INSERT INTO memory_fts (memory_fts, rank) VALUES ('integrity-check', 1)"); err != nil {
				t.Fatalf("full-text index out of step: %v", err)
			}
			lo := alice.OwnerID << 33
			var n int64
			if err := s.DB.NewRaw(`SELECT count(*) FROM memory_fts WHERE memory_fts MATCH '"note"' AND rowid BETWEEN ? AND ?`, lo, lo+(int64(1)<<33)-1).Scan(ctx, &n); err != nil || n != rows.Active+rows.Archived {
				t.Fatalf("index entries of note: %d (%v), want %d", n, err, rows.Active+rows.Archived)
			}
		}
		res := e.search(alice, map[string]any{"query": "note", "status": "all", "limit": 100})
		if int64(len(res)) != rows.Active+rows.Archived {
			t.Fatalf("search found %d of %d memories", len(res), rows.Active+rows.Archived)
		}
	})
}

// TestConcurrentUpdatesLoseNothing: a change of status and a change of
// text to one memory at once both hold: the status change does not write
// back the text it read before the other committed.
func TestConcurrentUpdatesLoseNothing(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := t.Context()
		e := newEnv(t, s, memory.Config{})
		alice := e.user("alice")
		for i := range 30 {
			m := e.save(alice, "the first text")
			done := make(chan error, 2)
			text := fmt.Sprintf("the second text %d", i)
			go func() {
				_, err := e.svc.Update(ctx, owner(alice), "agent", memory.UpdateInput{ID: m.ID, Text: text})
				done <- err
			}()
			go func() {
				_, err := e.svc.Update(ctx, owner(alice), "agent", memory.UpdateInput{ID: m.ID, Status: memory.StatusArchived})
				done <- err
			}()
			for range 2 {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			got, err := e.svc.Get(ctx, owner(alice), m.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Text != text || got.Status != memory.StatusArchived {
				t.Fatalf("round %d: text %q, status %s: an update was lost", i, got.Text, got.Status)
			}
		}
	})
}

// TestListCursorReplayedByAnotherUser: a cursor names a place in the
// order of memories, not whose: replayed by another user it pages that
// user's own memories and nothing of the issuer's.
func TestListCursorReplayedByAnotherUser(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		e := newEnv(t, s, memory.Config{Now: func() time.Time { at = at.Add(time.Second); return at }})
		alice, bob := e.user("alice"), e.user("bob")
		var bobs []string
		for i := range 4 {
			e.save(alice, fmt.Sprintf("alice %d", i))
			bobs = append(bobs, e.save(bob, fmt.Sprintf("bob %d", i)).ID)
		}
		page, err := call[memory.ListOutput](e, alice, "memoryList", map[string]any{"limit": 1})
		if err != nil || page.NextCursor == "" {
			t.Fatalf("alice's first page: %v", err)
		}
		got, err := call[memory.ListOutput](e, bob, "memoryList", map[string]any{"limit": 100, "cursor": page.NextCursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range got.Memories {
			if !slices.Contains(bobs, m.ID) {
				t.Fatalf("bob's page with alice's cursor holds %s (%q)", m.ID, m.Text)
			}
		}
	})
}
