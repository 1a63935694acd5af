package memory_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// TestSearchScoresIgnoreOtherUsers: the scores and the order of a user's
// search depend on that user's memories only. A ranking with statistics
// of the whole index (BM25 over every user's rows) tells a user how many
// other users' memories hold a word: save one memory holding it, search,
// and watch the score move.
func TestSearchScoresIgnoreOtherUsers(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, memory.Config{})
		alice, bob := e.user("alice"), e.user("bob")
		rare := e.save(alice, "the launch codename is kumquat")
		other := e.save(alice, "the budget codename is zanzibar")
		for i := range 3 {
			e.save(alice, fmt.Sprintf("filler memory number %d about lunch", i))
		}
		before := e.search(alice, map[string]any{"query": "kumquat zanzibar"})
		if len(before) != 2 {
			t.Fatalf("found %v, want %s and %s", foundIDs(before), rare.ID, other.ID)
		}
		// Bob's memories hold one of the words, many times over.
		for i := range 20 {
			e.save(bob, fmt.Sprintf("kumquat harvest report %d", i))
		}
		after := e.search(alice, map[string]any{"query": "kumquat zanzibar"})
		if len(after) != len(before) {
			t.Fatalf("found %v after bob's saves, %v before", foundIDs(after), foundIDs(before))
		}
		t.Logf("before %+v\nafter %+v", before, after)
		for i := range before {
			if after[i].ID != before[i].ID || after[i].Score != before[i].Score {
				t.Fatalf("bob's memories changed alice's ranking: before %+v, after %+v", before, after)
			}
		}
	})
}

// badEmbedder answers vectors of the configured size, except for texts
// holding "nan" (a NaN component), "inf" (an infinite one), "long" (one
// more component than asked) and "empty" (no component).
type badEmbedder struct{ dims int }

func (b badEmbedder) Model() string   { return "bad" }
func (b badEmbedder) Dimensions() int { return b.dims }
func (b badEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v := make([]float32, b.dims)
		v[0] = 1
		switch {
		case strings.Contains(t, "nan"):
			v[1] = float32(math.NaN())
		case strings.Contains(t, "inf"):
			v[1] = float32(math.Inf(1))
		case strings.Contains(t, "long"):
			v = append(v, 1)
		case strings.Contains(t, "empty"):
			v = nil
		}
		out[i] = v
	}
	return out, nil
}

// TestEmbedderAnswersChecked: a vector that is not finite or not of the
// size asked is refused, never stored, and ranks nothing.
func TestEmbedderAnswersChecked(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, memory.Config{Embedder: badEmbedder{dims: 4}})
		alice := e.user("alice")
		e.save(alice, "a fine memory")
		for _, text := range []string{"a nan memory", "an inf memory", "a long memory", "an empty memory"} {
			e.save(alice, text)
		}
		if n := count(t, s.DB, "memory_vectors"); n != 1 {
			t.Fatalf("%d vectors stored, want 1 (the fine memory's)", n)
		}
		rep, err := e.svc.Reindex(t.Context(), 100)
		if err != nil || rep.Complete {
			t.Logf("reindex: %+v %v", rep, err)
		}
		if n := count(t, s.DB, "memory_vectors"); n != 1 {
			t.Fatalf("%d vectors after reindex, want 1", n)
		}
		// A query whose vector is refused answers by words alone.
		out, err := call[memory.SearchOutput](e, alice, "memorySearch", map[string]any{"query": "nan zebra"})
		if err != nil || out.Mode != "fulltext" {
			t.Fatalf("query with a NaN vector: %+v %v", out, err)
		}
	})
}

// mixedEmbedder embeds with dims components, and fewer for one text, as
// a model of its own size (Dimensions 0) might after a change.
type mixedEmbedder struct{}

func (mixedEmbedder) Model() string   { return "mixed" }
func (mixedEmbedder) Dimensions() int { return 0 }
func (mixedEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if strings.Contains(t, "short") {
			out[i] = []float32{1, 0}
		} else {
			out[i] = []float32{1, 0, 0, 0}
		}
	}
	return out, nil
}

// TestVectorsOfAnotherSizeRankNothing: a stored vector of another size
// than the query's is not similar to it (it is not ranked at all, rather
// than ranked with similarity 0 and so returned for any query).
func TestVectorsOfAnotherSizeRankNothing(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, memory.Config{Embedder: mixedEmbedder{}})
		alice := e.user("alice")
		odd := e.save(alice, "a short vector for an unrelated memory")
		out, err := call[memory.SearchOutput](e, alice, "memorySearch", map[string]any{"query": "zebra"})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(foundIDs(out.Memories), odd.ID) {
			t.Fatalf("a vector of another size ranked for an unrelated query: %+v", out)
		}
	})
}

// TestReindexGoesPastRefusedMemories: memories the embedder refuses (a
// user can write as many as they like) do not stop the reindex lane from
// embedding the memories after them.
func TestReindexGoesPastRefusedMemories(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, memory.Config{Embedder: badEmbedder{dims: 4}})
		alice, bob := e.user("alice"), e.user("bob")
		for range 3 {
			e.save(alice, "a nan memory")
		}
		e.save(bob, "a fine memory")
		if _, err := s.DB.NewDelete().TableExpr("memory_vectors").Where("TRUE").Exec(t.Context()); err != nil {
			t.Fatal(err)
		}
		for range 8 {
			_, _ = e.svc.Reindex(t.Context(), 1)
		}
		if n := count(t, s.DB, "memory_vectors"); n != 1 {
			t.Fatalf("%d vectors after reindexing, want bob's memory's", n)
		}
	})
}

// TestSearchRanksByWordsOnSQLite: a memory holding more of the query's
// words (and rarer ones among the user's) ranks before a newer memory
// holding fewer, on every dialect.
func TestSearchRanksByWords(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, memory.Config{})
		alice := e.user("alice")
		best := e.save(alice, "the quarterly report on the kumquat orchard")
		for i := range 4 {
			e.save(alice, fmt.Sprintf("orchard note %d", i))
		}
		res := e.search(alice, map[string]any{"query": "kumquat orchard"})
		if len(res) != 5 || res[0].ID != best.ID || res[0].Score <= res[1].Score {
			t.Fatalf("found %+v, want %s first with the best score", res, best.ID)
		}
	})
}

// TestUpdateRecordsItsWriter: rewriting a memory makes its writer the
// rewriter. Otherwise an agent (or a background run) could reword what
// the person wrote on the web page and it would still show "written by
// web".
func TestUpdateRecordsItsWriter(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, memory.Config{})
		agent := e.user("alice")
		web := agent
		web.Session = true
		m, err := call[memory.Memory](e, web, "memorySave", map[string]any{"text": "I am allergic to peanuts"})
		if err != nil || m.Writer != "web" {
			t.Fatalf("save: %+v %v", m, err)
		}
		background := agent
		background.Interactive = false
		u, err := call[memory.Memory](e, background, "memoryUpdate", map[string]any{"id": m.ID, "text": "I love peanuts"})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := e.svc.Get(t.Context(), owner(agent), m.ID)
		if u.Writer != "background" || got.Writer != "background" {
			t.Fatalf("rewritten by a background run, shown as written by %q (stored %q)", u.Writer, got.Writer)
		}
		// Archiving alone rewrites nothing: the writer stays.
		a, err := call[memory.Memory](e, web, "memoryUpdate", map[string]any{"id": m.ID, "status": "archived"})
		if err != nil || a.Writer != "background" {
			t.Fatalf("archive: %+v %v", a, err)
		}
	})
}

// TestOpenAIEmbedderBounds: the client bounds a request by Timeout even
// with an HTTPClient of its own, follows no redirect (the key and the
// memories' texts would go where the answer points), refuses an answer
// larger than a batch's vectors can be, and refuses more dimensions than
// MaxDimensions.
func TestOpenAIEmbedderBounds(t *testing.T) {
	f := newFakeEmbeddings(t)
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(other.Close)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow/embeddings":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/redirect/embeddings":
			http.Redirect(w, r, other.URL+"/v1/embeddings", http.StatusTemporaryRedirect)
		case "/huge/embeddings":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"data":[{"index":0,"embedding":[`)
			chunk := strings.Repeat("0.125,", 1<<16)
			for range 1 << 10 { // 400 MiB, more than a batch's vectors
				if _, err := io.WriteString(w, chunk); err != nil {
					return
				}
			}
			_, _ = io.WriteString(w, `1]}]}`)
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	slow, err := memory.NewOpenAIEmbedder(memory.EmbeddingsOptions{URL: srv.URL + "/slow", Model: "m", KeyFile: f.keyFile,
		Timeout: 200 * time.Millisecond, HTTPClient: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := slow.Embed(t.Context(), []string{"x"}); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("a slow embeddings API: %v after %s", err, time.Since(start))
	}

	redir, err := memory.NewOpenAIEmbedder(memory.EmbeddingsOptions{URL: srv.URL + "/redirect", Model: "m", KeyFile: f.keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := redir.Embed(t.Context(), []string{"a secret memory"}); err == nil || elsewhere.Load() != 0 {
		t.Fatalf("a redirect was followed (%d requests elsewhere): %v", elsewhere.Load(), err)
	}

	huge, err := memory.NewOpenAIEmbedder(memory.EmbeddingsOptions{URL: srv.URL + "/huge", Model: "m", KeyFile: f.keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := huge.Embed(t.Context(), []string{"x"}); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Fatalf("a huge answer: %v", err)
	}

	if _, err := memory.NewOpenAIEmbedder(memory.EmbeddingsOptions{URL: srv.URL, Model: "m", Dimensions: memory.MaxDimensions + 1}); err == nil {
		t.Fatal("more dimensions than MaxDimensions accepted")
	}
}

// TestSearchScopeWordsCannotBeForged: the index's owner and status words
// ("u<id>", "u<id><status>") in a memory's text or in a query neither
// put a memory in another user's searches nor show an archived memory
// as active; search syntax in a query is words.
func TestSearchScopeWordsCannotBeForged(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, memory.Config{})
		alice, bob := e.user("alice"), e.user("bob")
		a, b := fmt.Sprint(alice.OwnerID), fmt.Sprint(bob.OwnerID)
		planted := e.save(alice, "u"+b+" u"+b+"active u"+b+"archived scope:u"+b+" "+b+"a "+b+"r '"+b+"a planted' planted note")
		archived := e.save(alice, "u"+a+"active archived secret plan")
		if _, err := call[memory.Memory](e, alice, "memoryUpdate", map[string]any{"id": archived.ID, "status": "archived"}); err != nil {
			t.Fatal(err)
		}
		e.save(bob, "bob's own note")
		for _, q := range []string{"planted", "u" + b, "u" + b + "active", `scope:u` + b, `"planted" OR *`, "NEAR(planted note) ^planted -note", "user_id:" + a + " planted", "ｕ" + b + " planted"} {
			for _, st := range []string{"", "all", "archived"} {
				if res := e.search(bob, map[string]any{"query": q, "status": st, "limit": 100}); slices.Contains(foundIDs(res), planted.ID) || slices.Contains(foundIDs(res), archived.ID) {
					t.Fatalf("bob's search %q (%s) found alice's memory: %v", q, st, foundIDs(res))
				}
			}
		}
		for _, q := range []string{"secret plan", "u" + a + "active", "u" + a + "active secret"} {
			if res := e.search(alice, map[string]any{"query": q}); slices.Contains(foundIDs(res), archived.ID) {
				t.Fatalf("an archived memory found as active by %q", q)
			}
		}
		// A query word equal to the owner's scope word matches no memory
		// by itself (it is not in any memory's text or tags).
		if res := e.search(alice, map[string]any{"query": "u" + a, "status": "all"}); len(res) != 0 {
			t.Fatalf("the owner's scope word matched %v", foundIDs(res))
		}
	})
}

// TestPostgresIndexEntriesAreTheOwners: on PostgreSQL every entry of a
// memory in the full-text index is under the memory's owner and status
// (migration 0290), whatever its text; a word's query is built from its
// lexemes, never parsed as tsquery syntax; and the search's expression is
// the index's, so that the index serves it.
func TestPostgresIndexEntriesAreTheOwners(t *testing.T) {
	s := storagetest.Open(t, storage.Postgres) // skips without PostgreSQL
	ctx := context.Background()
	var lexemes []string
	if err := s.DB.NewRaw("SELECT unnest(tsvector_to_array(memory_search_vector(7, 'active', ?, ?)))",
		"2a planted '2r secret' 7r note & !x | y:* <-> z", `["Topic", "2a"]`).Scan(ctx, &lexemes); err != nil {
		t.Fatal(err)
	}
	if len(lexemes) < 5 {
		t.Fatalf("lexemes %q: want the text's and the tags' words", lexemes)
	}
	for _, l := range lexemes {
		if !strings.HasPrefix(l, "7a ") || strings.Contains(l[3:], " ") {
			t.Fatalf("lexeme %q is not under owner 7, active", l)
		}
	}
	matches := func(owner int64, status, text string, qOwner int64, qStatus, word string) bool {
		t.Helper()
		var ok bool
		if err := s.DB.NewRaw("SELECT memory_search_vector(?, ?, ?, '[]') @@ memory_search_query(?, ?, ?)",
			owner, status, text, qOwner, qStatus, word).Scan(ctx, &ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for _, c := range []struct {
		owner         int64
		status, text  string
		qOwner        int64
		qStatus, word string
		want          bool
	}{
		{7, "active", "kumquats in the garden", 7, "active", "kumquat", true},
		{7, "active", "kumquats in the garden", 7, "", "kumquat", true},
		{7, "archived", "kumquats in the garden", 7, "", "kumquat", true},
		{7, "archived", "kumquats in the garden", 7, "active", "kumquat", false},
		{7, "active", "kumquats in the garden", 7, "archived", "kumquat", false},
		{7, "active", "kumquats in the garden", 2, "", "kumquat", false},
		// Another owner's prefix in the text is the writer's words.
		{7, "active", "2a kumquat '2a kumquat'", 2, "", "kumquat", false},
		{7, "active", "plain words", 7, "active", "words' | '7a plain", false},
		{7, "active", "plain words", 7, "active", "!plain", true},
		{7, "active", "plain words", 7, "active", "plain:* & words", true},
		{7, "active", "7a plain words", 7, "active", `\'7a words`, true},
	} {
		if got := matches(c.owner, c.status, c.text, c.qOwner, c.qStatus, c.word); got != c.want {
			t.Errorf("memory of %d (%s) %q, query of %d (%q) %q: match %v, want %v", c.owner, c.status, c.text, c.qOwner, c.qStatus, c.word, got, c.want)
		}
	}
	// With sequential scans priced out, the planner takes the index for
	// the search's expression: it is the index's.
	err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.ExecContext(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			return err
		}
		var plan []string
		if err := tx.NewRaw(`EXPLAIN SELECT m.id FROM memories AS m WHERE (m.user_id + 0) = 7 AND m.status = 'active'
			AND memory_search_vector(m.user_id, m.status, m.text, m.tags) @@ memory_search_query(7, 'active', 'kumquat')`).Scan(ctx, &plan); err != nil {
			return err
		}
		if !strings.Contains(strings.Join(plan, "\n"), "memories_search") {
			t.Errorf("the search does not use the index:\n%s", strings.Join(plan, "\n"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
