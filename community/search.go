package community

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
)

// queryWords splits a search query into its words: runs of letters,
// digits and combining marks, lowercased, without duplicates, the first
// MaxQueryWords of at most MaxWordBytes each (longer ones are left out).
// Everything else (quotes, parentheses, '*', '-', ':', '^', '%') only
// separates words, and a word is passed to the index as a quoted string
// (SQLite) or to plainto_tsquery (PostgreSQL), so that no query can be
// search syntax: "NEAR", "OR" or "name" are words like any other.
func queryWords(query string) []string {
	if len(query) > MaxQueryBytes {
		query = query[:MaxQueryBytes]
	}
	var out []string
	for _, w := range strings.FieldsFunc(query, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.Is(unicode.Mn, r)
	}) {
		w = strings.ToLower(w)
		if len(w) > MaxWordBytes || slices.Contains(out, w) {
			continue
		}
		out = append(out, w)
		if len(out) == MaxQueryWords {
			break
		}
	}
	return out
}

// ftsQuote is w as an FTS5 string: in double quotes, a quote inside
// doubled, so that the tokenizer reads it as words only.
func ftsQuote(w string) string { return `"` + strings.ReplaceAll(w, `"`, `""`) + `"` }

// scoreScale turns the index's floating-point rank into the integer a
// cursor keeps exactly.
const scoreScale = 1_000_000

// tierScale puts SQLite's word tiers (at most 10 a word) above any bm25
// score times scoreScale.
const tierScale = 1_000_000_000_000

// searchCursor is the position after the last listing of a page: its
// score and row id, and a digest of the query's words (a cursor of
// another query is refused).
type searchCursor struct {
	Kind  string `json:"k"`
	Query string `json:"q"`
	Score int64  `json:"s"`
	ID    int64  `json:"i"`
}

const searchCursorKind = "community-fulltext"

func queryDigest(words []string) string {
	sum := sha256.Sum256([]byte(strings.Join(words, " ")))
	return hex.EncodeToString(sum[:8])
}

func (c searchCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeSearchCursor(s, digest string) (searchCursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return searchCursor{}, storage.ErrInvalidCursor
	}
	var c searchCursor
	if err := json.Unmarshal(raw, &c); err != nil || c.Kind != searchCursorKind || c.Query != digest || c.ID <= 0 {
		return searchCursor{}, storage.ErrInvalidCursor
	}
	return c, nil
}

// hit is a listing the index found, with its score (higher is better).
type hit struct {
	ID    int64 `bun:"id"`
	Score int64 `bun:"score"`
}

// fullText runs one page of a word search: the matching public listings,
// best first, and the next page's cursor.
func (s *Service) fullText(ctx context.Context, words []string, cursor string) ([]listingRow, string, error) {
	if len(words) == 0 {
		return nil, "", nil
	}
	digest := queryDigest(words)
	var after *searchCursor
	if cursor != "" {
		c, err := decodeSearchCursor(cursor, digest)
		if err != nil {
			return nil, "", err
		}
		after = &c
	}
	var inner string
	var args []any
	switch s.store.Dialect() {
	case storage.Postgres:
		// The match is the expression of community_listings_search
		// (migration 0380) verbatim, with status = 'public', so that the
		// index serves it. The rank reads the short fields only (name,
		// then description and author): ranking by the whole vector
		// would compute every matching readme's vector again, thousands
		// of them for a common word. A match in the readme alone ranks
		// after those, newest first.
		inner = `SELECT l.id, CAST(round(ts_rank(setweight(to_tsvector('english'::regconfig, l.name), 'A')
				|| setweight(to_tsvector('english'::regconfig, l.description), 'B')
				|| setweight(to_tsvector('english'::regconfig, l.author_username), 'B'), q.q) * ?) AS BIGINT) AS score
			FROM community_listings AS l, plainto_tsquery('english'::regconfig, ?) AS q(q)
			WHERE l.status = 'public' AND community_search_vector(l.name, l.description, l.readme, l.author_username) @@ q.q`
		args = []any{scoreScale, strings.Join(words, " ")}
	default:
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = ftsQuote(w)
		}
		// The score is tiered, as PostgreSQL's: each word adds 10 when the
		// name holds it, else 4 when the description or the author does
		// (a match in the readme alone adds nothing), and bm25 over the
		// short fields only orders listings of the same tier. bm25 alone
		// would not keep a name match first: it saturates a word's
		// frequency, so a description or readme repeating the word
		// outranks the listing named after it whatever the column
		// weights. bm25 is lower for better matches; its weights are those
		// of the columns name, description, readme, author.
		var tier strings.Builder
		for i, w := range quoted {
			if i > 0 {
				tier.WriteString(" + ")
			}
			tier.WriteString(`(CASE WHEN rowid IN (SELECT rowid FROM community_listings_fts WHERE community_listings_fts MATCH ?) THEN 10
				WHEN rowid IN (SELECT rowid FROM community_listings_fts WHERE community_listings_fts MATCH ?) THEN 4 ELSE 0 END)`)
			args = append(args, "{name} : "+w, "{description author} : "+w)
		}
		inner = `SELECT rowid AS id, (` + tier.String() + `) * ? + CAST(-bm25(community_listings_fts, 10.0, 4.0, 0.0, 4.0) * ? AS INTEGER) AS score
			FROM community_listings_fts WHERE community_listings_fts MATCH ?`
		args = append(args, tierScale, scoreScale, strings.Join(quoted, " AND "))
	}
	q := "SELECT h.id, h.score FROM (" + inner + ") AS h"
	if after != nil {
		q += " WHERE h.score < ? OR (h.score = ? AND h.id < ?)"
		args = append(args, after.Score, after.Score, after.ID)
	}
	q += " ORDER BY h.score DESC, h.id DESC LIMIT ?"
	args = append(args, PageSize+1)
	var hits []hit
	if err := s.store.Reader.NewRaw(q, args...).Scan(ctx, &hits); err != nil {
		return nil, "", fmt.Errorf("community: search: %w", err)
	}
	next := ""
	if len(hits) > PageSize {
		hits = hits[:PageSize]
		last := hits[PageSize-1]
		next = searchCursor{Kind: searchCursorKind, Query: digest, Score: last.Score, ID: last.ID}.encode()
	}
	if len(hits) == 0 {
		return nil, next, nil
	}
	ids := make([]int64, len(hits))
	for i, h := range hits {
		ids[i] = h.ID
	}
	var rows []listingRow
	if err := s.store.Reader.NewSelect().Model(&rows).Column(searchColumns...).
		Where("l.id IN (?) AND l.status = ?", bun.In(ids), StatusPublic).Scan(ctx); err != nil {
		return nil, "", fmt.Errorf("community: search: %w", err)
	}
	byID := make(map[int64]listingRow, len(rows))
	for _, r := range rows {
		byID[r.ID] = r
	}
	out := make([]listingRow, 0, len(hits))
	for _, h := range hits {
		if r, ok := byID[h.ID]; ok {
			out = append(out, r)
		}
	}
	return out, next, nil
}
