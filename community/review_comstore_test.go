package community_test

import (
	"testing"

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
