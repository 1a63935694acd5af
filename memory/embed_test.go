package memory_test

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// fakeEmbeddings is an OpenAI-compatible embeddings endpoint over HTTP:
// each word of a text (after a small synonym table, so that meaning can
// match without shared words) adds one to a hashed dimension. It counts
// the texts it embeds, per model.
type fakeEmbeddings struct {
	srv     *httptest.Server
	keyFile string
	mu      sync.Mutex
	texts   map[string]int // model → texts embedded
	fail    bool
}

const fakeKey = "sk-test-key"

var synonyms = map[string]string{"automobile": "car", "vehicle": "car", "canine": "dog", "puppy": "dog"}

func newFakeEmbeddings(t *testing.T) *fakeEmbeddings {
	t.Helper()
	f := &fakeEmbeddings{texts: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+fakeKey {
			http.Error(w, `{"error":"bad key"}`, http.StatusUnauthorized)
			return
		}
		var req struct {
			Model      string   `json:"model"`
			Input      []string `json:"input"`
			Dimensions int      `json:"dimensions"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model == "" || len(req.Input) == 0 {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		fail := f.fail
		if !fail {
			f.texts[req.Model] += len(req.Input)
		}
		f.mu.Unlock()
		if fail {
			http.Error(w, `{"error":"overloaded"}`, http.StatusServiceUnavailable)
			return
		}
		dims := req.Dimensions
		if dims == 0 {
			dims = 64
		}
		type item struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var data []item
		for i := len(req.Input) - 1; i >= 0; i-- { // out of order: the client must use index
			data = append(data, item{Object: "embedding", Index: i, Embedding: hashVector(req.Model, req.Input[i], dims)})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "model": req.Model, "data": data})
	}))
	t.Cleanup(f.srv.Close)
	f.keyFile = filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(f.keyFile, []byte(fakeKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func hashVector(model, text string, dims int) []float32 {
	v := make([]float32, dims)
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if s, ok := synonyms[w]; ok {
			w = s
		}
		h := fnv.New32a()
		h.Write([]byte(model + "/" + w))
		v[h.Sum32()%uint32(dims)]++
	}
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	if n > 0 {
		for i := range v {
			v[i] /= float32(math.Sqrt(n))
		}
	}
	return v
}

func (f *fakeEmbeddings) options(model string, dims int) memory.EmbeddingsOptions {
	return memory.EmbeddingsOptions{URL: f.srv.URL + "/v1", Model: model, KeyFile: f.keyFile, Dimensions: dims}
}

func (f *fakeEmbeddings) embedded(model string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.texts[model]
}

func (f *fakeEmbeddings) setFailing(v bool) {
	f.mu.Lock()
	f.fail = v
	f.mu.Unlock()
}

func TestOpenAIEmbedder(t *testing.T) {
	f := newFakeEmbeddings(t)
	e, err := memory.NewOpenAIEmbedder(f.options("m1", 16))
	if err != nil {
		t.Fatal(err)
	}
	texts := make([]string, 70) // more than one request's batch
	for i := range texts {
		texts[i] = strings.Repeat("word ", i+1)
	}
	vs, err := e.Embed(t.Context(), texts)
	if err != nil || len(vs) != len(texts) {
		t.Fatalf("%d vectors, %v", len(vs), err)
	}
	for i, v := range vs {
		if len(v) != 16 || !slices.Equal(v, hashVector("m1", texts[i], 16)) {
			t.Fatalf("vector %d does not match its text", i)
		}
	}
	if e.Model() != "m1" || e.Dimensions() != 16 {
		t.Fatalf("model %q dims %d", e.Model(), e.Dimensions())
	}

	bad := f.options("m1", 0)
	bad.KeyFile = filepath.Join(t.TempDir(), "other")
	_ = os.WriteFile(bad.KeyFile, []byte("wrong"), 0o600)
	e2, err := memory.NewOpenAIEmbedder(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e2.Embed(t.Context(), []string{"x"}); err == nil || strings.Contains(err.Error(), "wrong") || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a refused key: %v", err)
	}

	for name, o := range map[string]memory.EmbeddingsOptions{
		"no model":          {URL: f.srv.URL},
		"no url":            {Model: "m"},
		"http to a host":    {URL: "http://embeddings.example.com/v1", Model: "m"},
		"not a url":         {URL: "::", Model: "m"},
		"missing key file":  {URL: "https://example.com/v1", Model: "m", KeyFile: filepath.Join(t.TempDir(), "none")},
		"negative dims":     {URL: "https://example.com/v1", Model: "m", Dimensions: -1},
		"empty key in file": {URL: "https://example.com/v1", Model: "m", KeyFile: emptyFile(t)},
	} {
		if _, err := memory.NewOpenAIEmbedder(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func emptyFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "empty")
	_ = os.WriteFile(p, []byte("\n"), 0o600)
	return p
}

func TestSemanticSearch(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeEmbeddings(t)
		e := newEnv(t, s, memory.Config{Options: memory.Options{Embeddings: f.options("m1", 0)}})
		alice, bob := e.user("alice"), e.user("bob")
		car := e.save(alice, "Alice parks her car in the garage")
		dog := e.save(alice, "Alice walks the dog at noon")
		bobs := e.save(bob, "Bob sold his automobile")

		out, err := call[memory.SearchOutput](e, alice, "memorySearch", map[string]any{"query": "vehicle"})
		if err != nil {
			t.Fatal(err)
		}
		// No memory holds the word: meaning finds the car, and never bob's.
		if out.Mode != "hybrid" || len(out.Memories) == 0 || out.Memories[0].ID != car.ID || slices.Contains(foundIDs(out.Memories), bobs.ID) {
			t.Fatalf("mode %s, found %v (car %s, dog %s)", out.Mode, foundIDs(out.Memories), car.ID, dog.ID)
		}
		out, _ = call[memory.SearchOutput](e, bob, "memorySearch", map[string]any{"query": "car garage", "limit": 100})
		if slices.Contains(foundIDs(out.Memories), car.ID) {
			t.Fatal("bob's semantic search found alice's memory")
		}

		// With the embeddings service down, search answers by words alone.
		f.setFailing(true)
		out, err = call[memory.SearchOutput](e, alice, "memorySearch", map[string]any{"query": "dog"})
		f.setFailing(false)
		if err != nil || out.Mode != "fulltext" || !slices.Equal(foundIDs(out.Memories), []string{dog.ID}) {
			t.Fatalf("fallback: %+v %v", out, err)
		}
	})
}

func TestFingerprintsAndReindex(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeEmbeddings(t)
		e := newEnv(t, s, memory.Config{Options: memory.Options{Embeddings: f.options("m1", 0)}})
		alice := e.user("alice")
		m := e.save(alice, "the boat is blue")
		e.save(alice, "the kite is red")
		if n := f.embedded("m1"); n != 2 {
			t.Fatalf("embedded %d texts on save", n)
		}

		// Tags, status, the same text again: nothing to embed.
		for _, in := range []map[string]any{
			{"id": m.ID, "tags": []string{"boats"}},
			{"id": m.ID, "status": "archived"},
			{"id": m.ID, "text": "the boat is blue"},
			{"id": m.ID, "status": "active"},
		} {
			if _, err := call[memory.Memory](e, alice, "memoryUpdate", in); err != nil {
				t.Fatal(err)
			}
		}
		rep, err := e.svc.Reindex(t.Context(), 100)
		if err != nil || rep.Embedded != 0 || !rep.Complete || f.embedded("m1") != 2 {
			t.Fatalf("unchanged memories re-embedded: %+v %v, %d texts", rep, err, f.embedded("m1"))
		}
		// A new text is embedded once.
		if _, err := call[memory.Memory](e, alice, "memoryUpdate", map[string]any{"id": m.ID, "text": "the boat is green"}); err != nil {
			t.Fatal(err)
		}
		if n := f.embedded("m1"); n != 3 {
			t.Fatalf("a changed text: %d texts embedded", n)
		}

		// A memory saved while the service is down is embedded by the lane.
		f.setFailing(true)
		late := e.save(alice, "the train is late")
		f.setFailing(false)
		rep, err = e.svc.Reindex(t.Context(), 100)
		if err != nil || rep.Embedded != 1 || !rep.Complete {
			t.Fatalf("reindex after a failure: %+v %v", rep, err)
		}
		out, _ := call[memory.SearchOutput](e, alice, "memorySearch", map[string]any{"query": "train"})
		if out.Mode != "hybrid" || len(out.Memories) == 0 || out.Memories[0].ID != late.ID {
			t.Fatalf("search after reindex: %+v", out)
		}

		// A model change makes every vector stale: the lane rebuilds them,
		// a bounded batch at a time, then has nothing left.
		e2 := newEnv(t, s, memory.Config{Options: memory.Options{Embeddings: f.options("m2", 32)}})
		rep, err = e2.svc.Reindex(t.Context(), 2)
		if err != nil || rep.Embedded != 2 || rep.Complete {
			t.Fatalf("first batch: %+v %v", rep, err)
		}
		rep, err = e2.svc.Reindex(t.Context(), 100)
		if err != nil || rep.Embedded != 1 || !rep.Complete {
			t.Fatalf("second batch: %+v %v", rep, err)
		}
		if rep, _ := e2.svc.Reindex(t.Context(), 100); rep.Embedded != 0 || f.embedded("m2") != 3 {
			t.Fatalf("rebuilt again: %+v, %d texts", rep, f.embedded("m2"))
		}
		var models []string
		if err := s.DB.NewRaw("SELECT DISTINCT model FROM memory_vectors").Scan(t.Context(), &models); err != nil || !slices.Equal(models, []string{"m2"}) {
			t.Fatalf("models %v %v", models, err)
		}
		// Deleting the memory removes its vector.
		if _, err := call[memory.DeleteOutput](e2, alice, "memoryDelete", map[string]any{"id": late.ID}); err != nil {
			t.Fatal(err)
		}
		if n := count(t, s.DB, "memory_vectors"); n != 2 {
			t.Fatalf("vectors after delete: %d", n)
		}
		if _, err := e2.svc.Reindex(t.Context(), 0); err == nil {
			t.Fatal("a zero budget was accepted")
		}
		sched := e2.svc.Schedule()
		if sched.Name != memory.ReindexLane || sched.Every <= 0 || sched.Run == nil {
			t.Fatalf("schedule %+v", sched)
		}
		if _, err := call[memory.Memory](e2, alice, "memoryGet", map[string]any{"id": m.ID}); capabilities.CodeOf(err) == capabilities.CodeNotFound {
			t.Fatal("memory lost")
		}
	})
}
