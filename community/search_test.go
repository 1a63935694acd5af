package community_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// pkgNamed is a package with a description and a source that holds a
// word (secret) found nowhere in its public fields.
func pkgNamed(name, description, secret string) map[string]any {
	return map[string]any{
		"name":  name,
		"files": map[string]string{"main.js": "// " + secret + "\nexport async function run() { return 1; }"},
		"manifest": map[string]any{
			"description": description,
			"exports":     map[string]any{"run": map[string]any{"description": "runs " + secret, "readOnly": true}},
		},
	}
}

func ids(r community.SearchResult) []string {
	out := make([]string, len(r.Listings))
	for i, l := range r.Listings {
		out[i] = l.ID
	}
	return out
}

// The catalogue's full-text search: ranked over public fields only, kept
// in step with publish, republish, delist, unpublish, admin deletion and
// the author's deletion, and hostile query syntax is only words.
func TestCommunitySearchFullText(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob, ada := s.CreateUser(t, "alice"), s.CreateUser(t, "bob"), s.CreateUser(t, "ada", capabilities.RoleAdmin)
		ac, bc, dc := alice.Caller(t), bob.Caller(t), ada.Caller(t)
		search := func(c capabilities.Caller, q string) community.SearchResult {
			t.Helper()
			return must[community.SearchResult](t, s, c, "communitySearch", map[string]any{"query": q})
		}

		save(t, s, ac, pkgNamed("weather", "Forecasts for tomorrow", "zanzibarsource"))
		save(t, s, ac, pkgNamed("notes", "Keeps notes", "zanzibarsource"))
		save(t, s, bc, pkgNamed("tides", "Tide tables", "zanzibarsource"))
		weather := must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": "weather", "readme": "Ask it about the sky."})
		notes := must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": "notes", "readme": "Remembers the weather you tell it."})
		tides := must[community.Listing](t, s, bc, "communityPublish", map[string]any{"package": "tides", "readme": "Harbour times."})

		// Ranked: a name match before a readme match; stemmed; every word.
		if got := ids(search(bc, "Weather")); len(got) != 2 || got[0] != weather.ID || got[1] != notes.ID {
			t.Fatalf("weather: %v, want [%s %s]", got, weather.ID, notes.ID)
		}
		if got := ids(search(bc, "forecast")); len(got) != 1 || got[0] != weather.ID {
			t.Fatalf("a stemmed description word: %v", got)
		}
		if got := ids(search(ac, "bob harbour")); len(got) != 1 || got[0] != tides.ID {
			t.Fatalf("author and readme words: %v", got)
		}
		if got := ids(search(bc, "weather harbour")); len(got) != 0 {
			t.Fatalf("every word must match: %v", got)
		}
		// Sources and export descriptions are not public fields of the
		// catalogue's index.
		if got := ids(search(bc, "zanzibarsource")); len(got) != 0 {
			t.Fatalf("a word of the sources was found: %v", got)
		}
		// The same answer for the author and anyone else.
		if a, b := ids(search(ac, "weather")), ids(search(bc, "weather")); strings.Join(a, ",") != strings.Join(b, ",") {
			t.Fatalf("owner-dependent results: %v vs %v", a, b)
		}

		// U+0000 is refused before search, as in every argument.
		if _, err := call[community.SearchResult](t, s, bc, "communitySearch", map[string]any{"query": "weather\x00sky"}); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("query with NUL: %v, want invalid input", err)
		}
		// Hostile syntax is words: never an error, never more than the words.
		for _, q := range []string{`"`, `"weather`, `weather"`, `NEAR(weather sky)`, `weather*`, `*`, `name:weather`, `{name readme}:weather`,
			`weather OR tides`, `weather NOT sky`, `-weather`, `^weather`, `weather AND`, `(`, `'); DROP TABLE community_listings; --`,
			`%`, `_`, `\`, `weather & !sky | tides`, `weather:*`, `sky <-> weather`, strings.Repeat("weather ", 500),
			strings.Repeat("x", 4000), strings.Repeat(`"*(`, 1300), strings.Repeat("weather sky ", 5000)} {
			res, err := call[community.SearchResult](t, s, bc, "communitySearch", map[string]any{"query": q})
			if err != nil {
				t.Fatalf("query %.40q: %v", q, err)
			}
			for _, l := range res.Listings {
				if l.ID != weather.ID && l.ID != notes.ID && l.ID != tides.ID {
					t.Fatalf("query %.40q found %+v", q, l)
				}
			}
			switch q {
			case `weather OR tides`, `name:weather`:
				// "or" and "name" are words no listing holds.
				if len(res.Listings) != 0 {
					t.Fatalf("OR was an operator: %v", ids(res))
				}
			case `-weather`, `weather*`, `^weather`:
				if got := ids(res); len(got) != 2 {
					t.Fatalf("query %q: %v", q, got)
				}
			case `%`, `*`, `_`, `"`:
				if len(res.Listings) != 0 {
					t.Fatalf("query %q without words found %v", q, ids(res))
				}
			}
		}

		// Kept in step: a new snapshot replaces the words.
		must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": "notes", "readme": "Remembers lighthouses."})
		if got := ids(search(bc, "weather")); len(got) != 1 || got[0] != weather.ID {
			t.Fatalf("after the readme changed: %v", got)
		}
		if got := ids(search(bc, "lighthouse")); len(got) != 1 || got[0] != notes.ID {
			t.Fatalf("the new readme: %v", got)
		}
		// Delisting removes it, listing again brings it back.
		must[community.Listing](t, s, dc, "adminCommunityDelist", map[string]any{"listing": weather.ID, "delisted": true})
		if got := ids(search(ac, "weather")); len(got) != 0 {
			t.Fatalf("a delisted listing is found: %v", got)
		}
		must[community.Listing](t, s, dc, "adminCommunityDelist", map[string]any{"listing": weather.ID, "delisted": false})
		if got := ids(search(bc, "weather")); len(got) != 1 {
			t.Fatalf("listed again: %v", got)
		}
		// Unpublish, admin deletion, the author's deletion.
		must[community.UnpublishOutput](t, s, ac, "communityUnpublish", map[string]any{"listing": weather.ID})
		if got := ids(search(bc, "forecast")); len(got) != 0 {
			t.Fatalf("an unpublished listing is found: %v", got)
		}
		must[community.DeleteOutput](t, s, dc, "adminCommunityDelete", map[string]any{"listing": tides.ID})
		if got := ids(search(bc, "harbour")); len(got) != 0 {
			t.Fatalf("a deleted listing is found: %v", got)
		}
		if res, err := s.Lifecycle().Delete(context.Background(), alice.Owner()); err != nil || !res.Completed {
			t.Fatalf("delete alice: %+v %v", res, err)
		}
		if got := ids(search(bc, "lighthouse")); len(got) != 0 {
			t.Fatalf("a deleted author's listing is found: %v", got)
		}
		if s.Store().Dialect() == "sqlite" {
			var n int
			if err := s.Store().Reader.NewRaw("SELECT count(*) FROM community_listings_fts").Scan(context.Background(), &n); err != nil || n != 0 {
				t.Fatalf("%d index entries left (%v)", n, err)
			}
		}
	})
}

// Search pages through every match once, best first, with cursors bound
// to their query.
func TestCommunitySearchPages(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice := s.CreateUser(t, "alice")
		ac := alice.Caller(t)
		const n = community.PageSize + 7
		for i := range n {
			name := fmt.Sprintf("pkg%02d", i)
			save(t, s, ac, pkgNamed(name, "Harbour "+strings.Repeat("boats ", i%3+1), "x"))
			must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": name})
		}
		seen := map[string]bool{}
		cursor, pages := "", 0
		for {
			res := must[community.SearchResult](t, s, ac, "communitySearch", map[string]any{"query": "boats harbour", "cursor": cursor})
			pages++
			for _, l := range res.Listings {
				if seen[l.ID] {
					t.Fatalf("listing %s on two pages", l.ID)
				}
				seen[l.ID] = true
			}
			if res.NextCursor == "" {
				break
			}
			if pages == 1 {
				if _, err := call[community.SearchResult](t, s, ac, "communitySearch", map[string]any{"query": "harbour", "cursor": res.NextCursor}); code(err) != capabilities.CodeInvalidInput {
					t.Fatalf("a cursor of another query: %v", err)
				}
			}
			cursor = res.NextCursor
		}
		if len(seen) != n || pages != 2 {
			t.Fatalf("%d listings on %d pages, want %d on 2", len(seen), pages, n)
		}
		if _, err := call[community.SearchResult](t, s, ac, "communitySearch", map[string]any{"query": "boats", "cursor": "bm90IGEgY3Vyc29y"}); code(err) != capabilities.CodeInvalidInput {
			t.Fatalf("a forged cursor: %v", err)
		}
	})
}
