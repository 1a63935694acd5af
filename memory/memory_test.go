package memory_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// env is a migrated store with the memory service registered in a
// registry, and callers made straight from users rows.
type env struct {
	t     *testing.T
	store *storage.Store
	reg   *capabilities.Registry
	svc   *memory.Service
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// owners resolves a caller from the ids it carries, as the server's does.
func owners(_ context.Context, c capabilities.Caller) (capabilities.Owner, error) {
	if c.OwnerID == 0 {
		return capabilities.Owner{}, capabilities.Errorf(capabilities.CodeNotFound, "no such account")
	}
	return capabilities.Owner{ID: c.OwnerID, StableID: c.UserID}, nil
}

func newEnv(t *testing.T, s *storage.Store, cfg memory.Config) *env {
	t.Helper()
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quiet()})
	cfg.Store, cfg.Registry, cfg.Owners, cfg.Logger = s, reg, owners, quiet()
	svc, err := memory.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(svc.Capabilities()...); err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterResource(svc.Resources()...); err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterPrompt(svc.Prompts()...); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, store: s, reg: reg, svc: svc}
}

// user inserts an account and returns an agent's caller for it.
func (e *env) user(name string) capabilities.Caller {
	e.t.Helper()
	return addUser(e.t, e.store, name)
}

func addUser(t testing.TB, s *storage.Store, name string) capabilities.Caller {
	t.Helper()
	sum := sha256.Sum256([]byte(name))
	stable := hex.EncodeToString(sum[:])
	now := time.Now().UTC()
	var id int64
	err := s.DB.NewRaw("INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
		stable, name+"@example.com", name, now, now).Scan(context.Background(), &id)
	if err != nil {
		t.Fatal(err)
	}
	return capabilities.Caller{UserID: stable, OwnerID: id, Username: name, Roles: []string{"user"},
		Permissions: []capabilities.Permission{capabilities.ReadUserOwn, capabilities.UpdateUserOwn},
		AllScopes:   true, State: capabilities.AccountActive, Interactive: true}
}

func owner(c capabilities.Caller) storage.Owner {
	return storage.Owner{ID: c.OwnerID, StableID: c.UserID}
}

// call invokes a capability through the registry and decodes its answer.
func call[T any](e *env, c capabilities.Caller, name string, in any) (T, error) {
	e.t.Helper()
	var out T
	raw, err := json.Marshal(in)
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.reg.Invoke(e.t.Context(), c, name, raw)
	if err != nil {
		return out, err
	}
	b, _ := json.Marshal(res.Structured)
	if err := json.Unmarshal(b, &out); err != nil {
		e.t.Fatalf("%s answered %s: %v", name, b, err)
	}
	return out, nil
}

func (e *env) save(c capabilities.Caller, text string, tags ...string) memory.Memory {
	e.t.Helper()
	m, err := call[memory.Memory](e, c, "memorySave", map[string]any{"text": text, "tags": tags})
	if err != nil {
		e.t.Fatalf("save %q: %v", text, err)
	}
	return m
}

func (e *env) search(c capabilities.Caller, in map[string]any) []memory.Found {
	e.t.Helper()
	out, err := call[memory.SearchOutput](e, c, "memorySearch", in)
	if err != nil {
		e.t.Fatalf("search %v: %v", in, err)
	}
	return out.Memories
}

func foundIDs(fs []memory.Found) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.ID
	}
	return out
}

// count counts rows of table.
func count(t *testing.T, db bun.IDB, table string) int {
	t.Helper()
	n, err := db.NewSelect().TableExpr(table).Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

func wantCode(t *testing.T, err error, code capabilities.Code) {
	t.Helper()
	if capabilities.CodeOf(err) != code {
		t.Fatalf("got %v, want %s", err, code)
	}
}

func TestMemories(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, memory.Config{})
		alice, bob := e.user("alice"), e.user("bob")

		t.Run("save, get, list, update, delete", func(t *testing.T) {
			m, err := call[memory.Memory](e, alice, "memorySave", map[string]any{
				"text": "  Alice prefers tea over coffee in the morning  ", "tags": []string{"Preferences", "drinks", "preferences"}, "source": "chat on 2026-11-30"})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(m.ID, "mem_") || m.Text != "Alice prefers tea over coffee in the morning" ||
				!slices.Equal(m.Tags, []string{"preferences", "drinks"}) || m.Source != "chat on 2026-11-30" ||
				m.Writer != "agent" || m.Status != memory.StatusActive || m.CreatedAt.IsZero() || !m.UpdatedAt.Equal(m.CreatedAt) {
				t.Fatalf("saved %+v", m)
			}
			got, err := call[memory.Memory](e, alice, "memoryGet", map[string]any{"id": m.ID})
			if err != nil || got.Text != m.Text || got.ID != m.ID {
				t.Fatalf("get %+v %v", got, err)
			}
			up, err := call[memory.Memory](e, alice, "memoryUpdate", map[string]any{"id": m.ID, "text": "Alice prefers green tea", "tags": []string{}, "status": "archived"})
			if err != nil || up.Text != "Alice prefers green tea" || len(up.Tags) != 0 || up.Status != memory.StatusArchived || up.Source != m.Source {
				t.Fatalf("update %+v %v", up, err)
			}
			if res := e.search(alice, map[string]any{"query": "green tea"}); len(res) != 0 {
				t.Fatalf("an archived memory was found by default: %v", foundIDs(res))
			}
			if res := e.search(alice, map[string]any{"query": "green tea", "status": "archived"}); !slices.Equal(foundIDs(res), []string{m.ID}) {
				t.Fatalf("archived search: %v", foundIDs(res))
			}
			list, err := call[memory.ListOutput](e, alice, "memoryList", map[string]any{})
			if err != nil || len(list.Memories) != 1 || list.Memories[0].ID != m.ID {
				t.Fatalf("list %+v %v", list, err)
			}
			del, err := call[memory.DeleteOutput](e, alice, "memoryDelete", map[string]any{"id": m.ID})
			if err != nil || !del.Deleted {
				t.Fatalf("delete %+v %v", del, err)
			}
			del, err = call[memory.DeleteOutput](e, alice, "memoryDelete", map[string]any{"id": m.ID})
			if err != nil || del.Deleted {
				t.Fatalf("second delete %+v %v", del, err)
			}
			_, err = call[memory.Memory](e, alice, "memoryGet", map[string]any{"id": m.ID})
			wantCode(t, err, capabilities.CodeNotFound)
		})

		t.Run("the writer comes from the caller", func(t *testing.T) {
			web := alice
			web.Session = true
			bg := alice
			bg.Interactive = false
			key := alice
			key.Credential = "wk:42"
			for c, want := range map[*capabilities.Caller]string{&web: "web", &bg: "background", &key: "credential:wk"} {
				if m := e.save(*c, "written by "+want); m.Writer != want {
					t.Errorf("writer %q, want %q", m.Writer, want)
				}
			}
		})

		t.Run("list pages newest first and filters by tag and status", func(t *testing.T) {
			c := e.user("carol")
			var saved []string
			for i := range 5 {
				tags := []string{"n" + fmt.Sprint(i%2)}
				saved = append(saved, e.save(c, fmt.Sprintf("note number %d", i), tags...).ID)
			}
			slices.Reverse(saved)
			var got []string
			cursor := ""
			for {
				page, err := call[memory.ListOutput](e, c, "memoryList", map[string]any{"limit": 2, "cursor": cursor})
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range page.Memories {
					got = append(got, m.ID)
				}
				if cursor = page.NextCursor; cursor == "" {
					break
				}
			}
			if !slices.Equal(got, saved) {
				t.Fatalf("pages %v, want %v", got, saved)
			}
			page, err := call[memory.ListOutput](e, c, "memoryList", map[string]any{"tags": []string{"n0"}})
			if err != nil || len(page.Memories) != 3 {
				t.Fatalf("tag filter: %d %v", len(page.Memories), err)
			}
			page, err = call[memory.ListOutput](e, c, "memoryList", map[string]any{"status": "archived"})
			if err != nil || len(page.Memories) != 0 {
				t.Fatalf("status filter: %d %v", len(page.Memories), err)
			}
		})

		t.Run("another user's memory is not found, for every capability and the resources", func(t *testing.T) {
			m := e.save(alice, "Alice's locker code is 4711", "secret-ish")
			missing := "mem_" + strings.Repeat("a", 24)
			for _, id := range []string{m.ID, missing, "nonsense", ""} {
				_, errGet := call[memory.Memory](e, bob, "memoryGet", map[string]any{"id": id})
				wantCode(t, errGet, capabilities.CodeNotFound)
				_, errUp := call[memory.Memory](e, bob, "memoryUpdate", map[string]any{"id": id, "text": "Bob was here"})
				wantCode(t, errUp, capabilities.CodeNotFound)
				del, err := call[memory.DeleteOutput](e, bob, "memoryDelete", map[string]any{"id": id})
				if err != nil || del.Deleted {
					t.Fatalf("bob deleted %q: %+v %v", id, del, err)
				}
				_, err = e.reg.ReadResource(t.Context(), bob, memory.ResourceURI(id))
				wantCode(t, err, capabilities.CodeNotFound)
			}
			// The answers for alice's id and for a missing one are the same
			// but for the id.
			_, e1 := call[memory.Memory](e, bob, "memoryGet", map[string]any{"id": m.ID})
			_, e2 := call[memory.Memory](e, bob, "memoryGet", map[string]any{"id": missing})
			if strings.ReplaceAll(e1.Error(), m.ID, "ID") != strings.ReplaceAll(e2.Error(), missing, "ID") {
				t.Fatalf("distinguishable: %v / %v", e1, e2)
			}
			if res := e.search(bob, map[string]any{"query": "locker code 4711", "status": "all"}); len(res) != 0 {
				t.Fatalf("bob found alice's memory: %v", foundIDs(res))
			}
			list, err := call[memory.ListOutput](e, bob, "memoryList", map[string]any{})
			if err != nil || slices.ContainsFunc(list.Memories, func(x memory.Memory) bool { return x.ID == m.ID }) {
				t.Fatalf("bob's list shows alice's memory: %v", err)
			}
			got, err := call[memory.Memory](e, alice, "memoryGet", map[string]any{"id": m.ID})
			if err != nil || got.Text != "Alice's locker code is 4711" {
				t.Fatalf("alice's memory changed: %+v %v", got, err)
			}
			// Resources: alice reads hers; bob's index lists none of hers.
			cs, err := e.reg.ReadResource(t.Context(), alice, memory.ResourceURI(m.ID))
			if err != nil || len(cs) != 1 || !strings.Contains(cs[0].Text, "4711") {
				t.Fatalf("alice reads her resource: %+v %v", cs, err)
			}
			cs, err = e.reg.ReadResource(t.Context(), alice, memory.IndexURI)
			if err != nil || !strings.Contains(cs[0].Text, memory.ResourceURI(m.ID)) {
				t.Fatalf("alice's index: %+v %v", cs, err)
			}
			cs, err = e.reg.ReadResource(t.Context(), bob, memory.IndexURI)
			if err != nil || strings.Contains(cs[0].Text, m.ID) {
				t.Fatalf("bob's index: %+v %v", cs, err)
			}
			if e.reg.CanRead(t.Context(), bob, memory.ResourceURI(m.ID)) || !e.reg.CanRead(t.Context(), alice, memory.ResourceURI(m.ID)) {
				t.Fatal("CanRead disagrees with ownership")
			}
			ids, err := e.reg.CompleteResource(t.Context(), bob, memory.ResourceTemplate, "id", "mem_")
			if err != nil || slices.Contains(ids, m.ID) {
				t.Fatalf("bob's completion offers alice's id: %v %v", ids, err)
			}
			ids, err = e.reg.CompleteResource(t.Context(), alice, memory.ResourceTemplate, "id", m.ID[:6])
			if err != nil || !slices.Contains(ids, m.ID) {
				t.Fatalf("alice's completion: %v %v", ids, err)
			}
			// The prompt: alice's memory for alice, nothing of it for bob.
			p, err := e.reg.GetPrompt(t.Context(), alice, memory.PromptName, map[string]string{"topic": "locker"})
			if err != nil || len(p.Messages) != 1 || !strings.Contains(p.Messages[0].Content.(capabilities.Text).Text, "4711") {
				t.Fatalf("alice's prompt: %+v %v", p, err)
			}
			p, err = e.reg.GetPrompt(t.Context(), bob, memory.PromptName, map[string]string{"query": "locker code 4711"})
			if err != nil || strings.Contains(p.Messages[0].Content.(capabilities.Text).Text, m.ID) || strings.Contains(p.Messages[0].Content.(capabilities.Text).Text, "Alice") {
				t.Fatalf("bob's prompt: %+v %v", p, err)
			}
		})

		t.Run("bad input is refused and writes nothing", func(t *testing.T) {
			d := e.user("dave")
			big := strings.Repeat("x", memory.MaxTextBytes+1)
			manyTags := make([]string, memory.MaxTags+1)
			for i := range manyTags {
				manyTags[i] = fmt.Sprint("t", i)
			}
			for name, in := range map[string]map[string]any{
				"empty text":    {"text": "   "},
				"text too long": {"text": big},
				"NUL in text":   {"text": "a\x00b"},
				"too many tags": {"text": "ok", "tags": manyTags},
				"long tag":      {"text": "ok", "tags": []string{strings.Repeat("t", memory.MaxTagBytes+1)}},
				"odd tag":       {"text": "ok", "tags": []string{"no spaces"}},
				"empty tag":     {"text": "ok", "tags": []string{" "}},
				"long source":   {"text": "ok", "source": strings.Repeat("s", memory.MaxSourceBytes+1)},
				"no text":       {"tags": []string{"a"}},
				"text a number": {"text": 5},
			} {
				_, err := call[memory.Memory](e, d, "memorySave", in)
				if capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
					t.Errorf("%s: %v", name, err)
				}
			}
			if page, _ := e.svc.List(t.Context(), owner(d), memory.Filter{}, storage.PageRequest{}); len(page.Items) != 0 {
				t.Fatalf("refused saves wrote %d memories", len(page.Items))
			}
			m := e.save(d, "dave's only memory")
			for name, in := range map[string]map[string]any{
				"nothing":     {"id": m.ID},
				"bad status":  {"id": m.ID, "status": "deleted"},
				"blank text":  {"id": m.ID, "text": " "},
				"bad tag":     {"id": m.ID, "tags": []string{"a b"}},
				"long text":   {"id": m.ID, "text": big},
				"status type": {"id": m.ID, "status": 1},
			} {
				_, err := call[memory.Memory](e, d, "memoryUpdate", in)
				if capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
					t.Errorf("update %s: %v", name, err)
				}
			}
			if got, _ := e.svc.Get(t.Context(), owner(d), m.ID); got.Text != m.Text || !got.UpdatedAt.Equal(m.UpdatedAt) {
				t.Fatalf("a refused update changed the memory: %+v", got)
			}
			for name, in := range map[string]map[string]any{
				"empty query": {"query": " "},
				"long query":  {"query": strings.Repeat("q", memory.MaxQueryBytes+1)},
				"limit":       {"query": "x", "limit": memory.MaxSearchLimit + 1},
				"neg limit":   {"query": "x", "limit": -1},
				"status":      {"query": "x", "status": "gone"},
			} {
				_, err := call[memory.SearchOutput](e, d, "memorySearch", in)
				if capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
					t.Errorf("search %s: %v", name, err)
				}
			}
			_, err := call[memory.ListOutput](e, d, "memoryList", map[string]any{"cursor": "forged"})
			wantCode(t, err, capabilities.CodeInvalidInput)
		})

		t.Run("the per-user count is bounded", func(t *testing.T) {
			small := newEnv(t, s, memory.Config{Options: memory.Options{MaxMemories: 2}})
			f := e.user("frank")
			small.save(f, "one")
			small.save(f, "two")
			_, err := call[memory.Memory](small, f, "memorySave", map[string]any{"text": "three"})
			wantCode(t, err, capabilities.CodeConflict)
			// Another user's count is their own.
			small.save(e.user("gina"), "one")
		})

		t.Run("a deleting account may read but not write", func(t *testing.T) {
			h := e.user("hank")
			m := e.save(h, "before deletion")
			h.State = capabilities.AccountDeleting
			_, err := call[memory.Memory](e, h, "memorySave", map[string]any{"text": "during deletion"})
			wantCode(t, err, capabilities.CodeAccountDeleting)
			if _, err := call[memory.Memory](e, h, "memoryGet", map[string]any{"id": m.ID}); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func TestSearch(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, memory.Config{})
		alice, bob := e.user("alice"), e.user("bob")
		tea := e.save(alice, "Alice drinks green tea every morning", "drinks")
		hike := e.save(alice, "Alice went hiking in the Alps with her sister", "travel")
		both := e.save(alice, "Green tea on the hiking trail in the Alps", "travel", "drinks")
		bobs := e.save(bob, "Bob drinks green tea every morning in the Alps while hiking", "drinks", "travel")

		t.Run("ranks memories holding more of the words first", func(t *testing.T) {
			res := e.search(alice, map[string]any{"query": "green tea hiking alps"})
			if len(res) != 3 || res[0].ID != both.ID {
				t.Fatalf("order %v, want %s first of 3", foundIDs(res), both.ID)
			}
			for i := 1; i < len(res); i++ {
				if res[i].Score > res[i-1].Score {
					t.Fatalf("scores not descending: %+v", res)
				}
			}
		})

		t.Run("stemming and any-word matching", func(t *testing.T) {
			res := e.search(alice, map[string]any{"query": "What did Alice drink? hikes"})
			got := foundIDs(res)
			if !slices.Contains(got, tea.ID) || !slices.Contains(got, hike.ID) {
				t.Fatalf("got %v", got)
			}
		})

		t.Run("tags and limit narrow the results", func(t *testing.T) {
			res := e.search(alice, map[string]any{"query": "green tea alps", "tags": []string{"travel", "drinks"}})
			if !slices.Equal(foundIDs(res), []string{both.ID}) {
				t.Fatalf("tags: %v", foundIDs(res))
			}
			if res := e.search(alice, map[string]any{"query": "alice alps tea", "limit": 1}); len(res) != 1 {
				t.Fatalf("limit: %v", foundIDs(res))
			}
		})

		t.Run("another user's memory with the exact words is never returned", func(t *testing.T) {
			res := e.search(alice, map[string]any{"query": "Bob drinks green tea every morning in the Alps while hiking", "limit": 100, "status": "all"})
			if slices.Contains(foundIDs(res), bobs.ID) {
				t.Fatal("alice's search returned bob's memory")
			}
			res = e.search(bob, map[string]any{"query": "Alice sister hiking", "limit": 100})
			if !slices.Equal(foundIDs(res), []string{bobs.ID}) {
				t.Fatalf("bob's search: %v", foundIDs(res))
			}
		})

		t.Run("query text is never search syntax", func(t *testing.T) {
			hostile := []string{
				`"`, `""`, `"green`, `*`, `tea*`, `NEAR(`, `NEAR(green tea)`, `NEAR(green tea, 1)`, `user_id:1`, `user_id:`,
				`text:green`, `tags:drinks`, `{text tags}:tea`, `- tea`, `^green`, `OR`, `AND`, `NOT`, `green OR`, `OR OR OR`,
				`tea AND NOT alps`, `(`, `)`, `green) OR (1=1`, `'`, `\`, `';--`, `%`, `_`, `rowid:1`, `memory_fts:x`,
				`!tea`, `tea & alps`, `tea | bob`, `tea <-> alps`, `tea:*`, `'tea':A`, `--`, `\x00`,
				`$$`, `websearch "or" -alps`, strings.Repeat("(", 500),
			}
			for _, q := range hostile {
				out, err := call[memory.SearchOutput](e, alice, "memorySearch", map[string]any{"query": q, "status": "all", "limit": 100})
				if err != nil {
					t.Errorf("query %q: %v", q, err)
					continue
				}
				for _, f := range out.Memories {
					if f.ID == bobs.ID {
						t.Errorf("query %q returned bob's memory", q)
					}
				}
			}
			// U+0000 is refused before search, as in every argument.
			if _, err := call[memory.SearchOutput](e, alice, "memorySearch", map[string]any{"query": "tea\u0000"}); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
				t.Errorf("query with NUL: %v, want invalid input", err)
			}
			// A column filter or an operator is just words: "text:green"
			// finds what "text green" finds, and "NOT" excludes nothing.
			got := foundIDs(e.search(alice, map[string]any{"query": "tea AND NOT alps"}))
			if !slices.Contains(got, both.ID) {
				t.Fatalf("NOT was read as an operator: %v", got)
			}
			if got := foundIDs(e.search(alice, map[string]any{"query": `green"`})); len(got) != 2 {
				t.Fatalf("a quote broke the query: %v", got)
			}
		})

		t.Run("updating the text updates the index", func(t *testing.T) {
			c := e.user("cleo")
			m := e.save(c, "the parrot is called Kiwi")
			if _, err := call[memory.Memory](e, c, "memoryUpdate", map[string]any{"id": m.ID, "text": "the parrot is called Mango"}); err != nil {
				t.Fatal(err)
			}
			if res := e.search(c, map[string]any{"query": "kiwi"}); len(res) != 0 {
				t.Fatalf("old text still found: %v", foundIDs(res))
			}
			if res := e.search(c, map[string]any{"query": "mango"}); len(res) != 1 {
				t.Fatalf("new text not found: %v", foundIDs(res))
			}
			if _, err := call[memory.Memory](e, c, "memoryUpdate", map[string]any{"id": m.ID, "tags": []string{"birds"}}); err != nil {
				t.Fatal(err)
			}
			if res := e.search(c, map[string]any{"query": "birds"}); len(res) != 1 {
				t.Fatalf("a tag is searchable: %v", foundIDs(res))
			}
		})
	})
}

// Deleting an account through the inventory removes its memories, their
// vectors and their full-text entries, and leaves other accounts' alone;
// the export carries the memories without the vectors.
func TestInventoryExportAndDeletion(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		emb := newFakeEmbeddings(t)
		e := newEnv(t, s, memory.Config{Options: memory.Options{Embeddings: emb.options("m1", 0)}})
		alice, bob := e.user("alice"), e.user("bob")
		for i := range 3 {
			e.save(alice, fmt.Sprintf("alice remembers the harbour %d", i))
		}
		e.save(bob, "bob remembers the harbour too")
		inv := storage.NewInventory()
		if err := memory.RegisterInventory(inv); err != nil {
			t.Fatal(err)
		}
		if count(t, s.DB, "memory_vectors") != 4 {
			t.Fatalf("vectors: %d", count(t, s.DB, "memory_vectors"))
		}
		mt, _ := inv.Table("memories")
		page, err := storage.ExportRows(t.Context(), s.Reader, mt, owner(alice), storage.PageRequest{})
		if err != nil || len(page.Items) != 3 || !strings.Contains(fmt.Sprint(page.Items[0]["text"]), "harbour") {
			t.Fatalf("export %+v %v", page.Items, err)
		}
		vt, _ := inv.Table("memory_vectors")
		if !vt.SkipExport {
			t.Fatal("vectors are exported")
		}
		err = s.RunInTx(t.Context(), func(ctx context.Context, tx bun.Tx) error {
			_, err := inv.DeleteRows(ctx, tx, owner(alice))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := count(t, s.DB, "memories"); n != 1 {
			t.Fatalf("memories left: %d", n)
		}
		if n := count(t, s.DB, "memory_vectors"); n != 1 {
			t.Fatalf("vectors left: %d", n)
		}
		if s.Dialect() == storage.SQLite {
			// The full-text index holds bob's memory alone: integrity-check
			// compares it with the memories table, and "harbour" matches
			// one row.
			if _, err := s.DB.ExecContext(t.Context(), "INSERT INTO memory_fts (memory_fts, rank) VALUES ('integrity-check', 1)"); err != nil {
				t.Fatalf("full-text index out of step: %v", err)
			}
			var n int
			if err := s.DB.NewRaw(`SELECT count(*) FROM memory_fts WHERE memory_fts MATCH '"harbour"'`).Scan(t.Context(), &n); err != nil || n != 1 {
				t.Fatalf("full-text rows matching: %d %v", n, err)
			}
		}
		if res := e.search(bob, map[string]any{"query": "harbour"}); len(res) != 1 {
			t.Fatalf("bob's memory: %v", foundIDs(res))
		}
	})
}
