package community_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// Words the query splitter keeps but the index's tokenizer reads
// differently (combining marks alone, marks the tokenizer drops, letters
// it splits) are still never an error.
func TestReviewSearchOddWordsNeverFail(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice := s.CreateUser(t, "alice")
		ac := alice.Caller(t)
		save(t, s, ac, pkgNamed("weather", "Forecasts for tomorrow", "x"))
		must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": "weather", "readme": "Ask it about the sky."})
		for _, q := range []string{"\u0301", "\u0301\u0301 weather", "a\u0301", "\u0e31", "\u200d", "ǅ", "the", "the a an", "ⅷ", "١٢٣",
			"\u0301 \u0302 \u0303", "ﬁ", "İ", "ß", "\U0001F600", "日本語", "weather\u0301", "\u093f", "\u0300weather"} {
			if _, err := call[community.SearchResult](t, s, ac, "communitySearch", map[string]any{"query": q}); err != nil {
				t.Errorf("query %+q: %v", q, err)
			}
		}
	})
}

// Ranking cannot be bought by repeating a word: a listing named after the
// word ranks before one that repeats it all over its readme or its
// description (bm25 saturates a word's frequency, so column weights
// alone do not keep a name match first).
func TestReviewSearchStuffingDoesNotOutrankTheName(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, mallory := s.CreateUser(t, "alice"), s.CreateUser(t, "mallory")
		ac, mc := alice.Caller(t), mallory.Caller(t)
		save(t, s, ac, pkgNamed("weather", "Forecasts for tomorrow", "x"))
		weather := must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": "weather", "readme": "Ask it about the sky, the wind and the rain over the coming days."})
		save(t, s, mc, pkgNamed("spamreadme", "Handy tool", "x"))
		must[community.Listing](t, s, mc, "communityPublish", map[string]any{"package": "spamreadme", "readme": strings.Repeat("weather ", community.MaxReadmeBytes/8-1)})
		save(t, s, mc, pkgNamed("spamdesc", strings.TrimSpace(strings.Repeat("weather ", 120)), "x"))
		must[community.Listing](t, s, mc, "communityPublish", map[string]any{"package": "spamdesc", "readme": "Nothing to see."})
		for i := range 5 { // ordinary listings, so that the statistics are not all the attacker's
			name := fmt.Sprintf("tool%d", i)
			save(t, s, ac, pkgNamed(name, "A small helper for lists", "x"))
			must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": name, "readme": "Reads the weather once."})
		}
		res := must[community.SearchResult](t, s, mc, "communitySearch", map[string]any{"query": "weather"})
		if len(res.Listings) != 8 || res.Listings[0].ID != weather.ID {
			var names []string
			for _, l := range res.Listings {
				names = append(names, l.Name)
			}
			t.Fatalf("weather ranks %v: the listing named weather must come first", names)
		}
	})
}

// A fork that races the author's new snapshot or unpublishing either
// forks a snapshot or answers not_found: the superseded snapshot it
// read the listing for is gone, which is no internal error.
func TestReviewForkRacesRepublishAndUnpublish(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		ac, bc := alice.Caller(t), bob.Caller(t)
		save(t, s, ac, greeter("greeter"))
		pub := must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": "greeter", "readme": "v0"})
		forked := 0
		for i := range 16 {
			if i%2 == 1 { // a new version: the next snapshot is a new blob, the old one is deleted
				pkg := greeter("greeter")
				pkg["manifest"].(map[string]any)["description"] = fmt.Sprintf("Friendly greetings, take %d", i)
				save(t, s, ac, pkg)
			}
			var wg sync.WaitGroup
			var forkErr, getErr error
			wg.Go(func() {
				_, forkErr = call[community.Fork](t, s, bc, "communityFork", map[string]any{"listing": pub.ID, "name": fmt.Sprintf("race%d", i)})
			})
			wg.Go(func() {
				_, getErr = call[community.Listing](t, s, bc, "communityGet", map[string]any{"listing": pub.ID})
			})
			wg.Go(func() {
				must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": "greeter", "readme": fmt.Sprintf("v%d", i+1)})
			})
			wg.Wait()
			for what, err := range map[string]error{"fork": forkErr, "get": getErr} {
				if err != nil && code(err) != capabilities.CodeNotFound {
					t.Fatalf("trial %d: %s racing a new snapshot: %v", i, what, err)
				}
			}
			if forkErr == nil {
				forked++
			}
		}
		// Unpublishing: the fork forks or finds nothing.
		var wg sync.WaitGroup
		var forkErr error
		wg.Go(func() {
			_, forkErr = call[community.Fork](t, s, bc, "communityFork", map[string]any{"listing": pub.ID, "name": "last"})
		})
		wg.Go(func() {
			must[community.UnpublishOutput](t, s, ac, "communityUnpublish", map[string]any{"listing": pub.ID})
		})
		wg.Wait()
		if forkErr != nil && code(forkErr) != capabilities.CodeNotFound {
			t.Fatalf("fork racing unpublish: %v", forkErr)
		}
		t.Logf("%d of 16 forks raced a new snapshot and forked", forked)
	})
}

// Two forks of one listing under one name at the same time: one creates
// the package (version 1) and its fork record, the other is a conflict
// that leaves neither a version nor a record.
func TestReviewDoubleForkCreatesOnePackage(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		ac, bc := alice.Caller(t), bob.Caller(t)
		save(t, s, ac, greeter("greeter"))
		pub := must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": "greeter"})
		for i := range 8 {
			name := fmt.Sprintf("twin%d", i)
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for w := range errs {
				wg.Go(func() {
					_, errs[w] = call[community.Fork](t, s, bc, "communityFork", map[string]any{"listing": pub.ID, "name": name})
				})
			}
			wg.Wait()
			ok := 0
			for _, err := range errs {
				switch {
				case err == nil:
					ok++
				case code(err) != capabilities.CodeConflict:
					t.Fatalf("%s: %v", name, err)
				}
			}
			if ok != 1 {
				t.Fatalf("%s: %d forks created", name, ok)
			}
			if _, err := s.CodeMode().Get(context.Background(), bob.Owner(), name, 2); code(err) != capabilities.CodeNotFound {
				t.Fatalf("%s: a second version: %v", name, err)
			}
		}
		own := must[community.OwnOutput](t, s, bc, "communityListOwn", struct{}{})
		if len(own.Forks) != 8 {
			t.Fatalf("%d fork records, want 8", len(own.Forks))
		}
	})
}

// A word search past SearchTimeout is refused with a sentence, not an
// internal error (the catalogue answers visitors too).
func TestSearchTimeoutIsASentence(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice := s.CreateUser(t, "alice")
		ac := alice.Caller(t)
		save(t, s, ac, pkgNamed("weather", "Forecasts for tomorrow", "x"))
		must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": "weather", "readme": "Ask it about the sky."})
		old := community.SearchTimeout
		community.SearchTimeout = time.Nanosecond
		defer func() { community.SearchTimeout = old }()
		_, err := call[community.SearchResult](t, s, ac, "communitySearch", map[string]any{"query": "weather"})
		if capabilities.CodeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), "took too long") {
			t.Fatalf("a search past its time: %v", err)
		}
		community.SearchTimeout = old
		if r, err := call[community.SearchResult](t, s, ac, "communitySearch", map[string]any{"query": "weather"}); err != nil || len(r.Listings) != 1 {
			t.Fatalf("search: %+v %v", r, err)
		}
	})
}
