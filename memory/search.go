package memory

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/enclave-mcp/enclave/storage"
)

// maxTerms bounds the words of a query that search uses; maxTermBytes
// each word.
const (
	maxTerms     = 32
	maxTermBytes = 64
	// candidates is how many results each ranking contributes to the
	// fusion, per result asked for (at least minCandidates).
	candidates    = 4
	minCandidates = 50
	// rrfK is the constant of reciprocal rank fusion.
	rrfK = 60
)

// SearchInput is the input of memorySearch.
type SearchInput struct {
	Query  string   `json:"query" jsonschema:"what to recall, in plain words (no search syntax: every word counts, memories holding more of them rank first)"`
	Tags   []string `json:"tags,omitempty" jsonschema:"only memories holding every one of these tags"`
	Limit  int      `json:"limit,omitempty" jsonschema:"how many memories to return, 1 to 100 (default 10)"`
	Status string   `json:"status,omitempty" jsonschema:"active (default), archived or all"`
}

// Found is a memory a search found, with its score (higher is better;
// only the order means something).
type Found struct {
	Memory
	Score float64 `json:"score"`
}

// SearchOutput is the output of memorySearch.
type SearchOutput struct {
	Memories []Found `json:"memories"`
	// Mode is "fulltext", or "hybrid" when embeddings ranked too.
	Mode string `json:"mode"`
}

// stopwords are English words too common to say what a memory is about.
// A query drops them unless it has no other word (PostgreSQL's english
// configuration drops them too).
var stopwords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a about above after again against all am an and any are as at be because been before being
		below between both but by can could did do does doing down during each few for from further had has have having he her
		here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
		once only or other our ours ourselves out over own same she should so some such than that the their theirs them
		themselves then there these they this those through to too under until up very was we were what when where which while
		who whom why will with would you your yours yourself yourselves`) {
		m[w] = true
	}
	return m
}()

// queryTerms is terms without the stopwords, unless that leaves none.
func queryTerms(query string) []string {
	all := terms(query)
	kept := slices.DeleteFunc(slices.Clone(all), func(w string) bool { return stopwords[w] })
	if len(kept) == 0 {
		return all
	}
	return kept
}

// terms splits a query into its words: runs of letters, digits and
// combining marks, lowercased, without duplicates. Everything else
// (quotes, operators, parentheses, colons) separates words, so no word
// can carry search syntax.
func terms(query string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(query, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.Is(unicode.Mn, r)
	}) {
		w = strings.ToLower(w)
		if len(w) > maxTermBytes || slices.Contains(out, w) {
			continue
		}
		out = append(out, w)
		if len(out) == maxTerms {
			break
		}
	}
	return out
}

// quote is w as an FTS5 string: in quotes, a quote inside doubled (the
// FTS5 escape), so that it is only ever words to the tokenizer.
func quote(w string) string { return `"` + strings.ReplaceAll(w, `"`, `""`) + `"` }

// ftsScope is the start of every FTS5 MATCH expression of a search of
// o: the owner's scope word (with the status, when one is asked for) and
// each tag's words (a superset of the exact tag, which the query then
// checks), each quoted. The scope words are in the scope column only, so
// no text (of a memory or of a query) can put a row in another owner's
// scope or forge its status.
func ftsScope(o storage.Owner, f Filter) string {
	parts := []string{"scope : " + quote("u"+strconv.FormatInt(o.ID, 10)+f.Status)}
	for _, t := range f.Tags {
		for _, w := range terms(t) {
			parts = append(parts, "tags : "+quote(w))
		}
	}
	return strings.Join(parts, " AND ")
}

// pgVector is the expression of memories_fts, the GIN index: searches use
// it verbatim so that the index serves them.
const pgVector = "to_tsvector('english'::regconfig, m.text || ' ' || m.tags)"

// ranked is a memory's row id with its score in one ranking.
type ranked struct {
	ID    int64   `bun:"id"`
	Score float64 `bun:"score"`
}

// fullText ranks o's memories matching f against words, best first.
func (s *Service) fullText(ctx context.Context, o storage.Owner, words []string, f Filter, limit int) ([]ranked, error) {
	if len(words) == 0 {
		return nil, nil
	}
	cond, args := s.where(f)
	var out []ranked
	var err error
	switch s.store.Dialect() {
	case storage.Postgres:
		// Each word through plainto_tsquery (which reads no syntax),
		// joined with || (or).
		parts := make([]string, len(words))
		qargs := make([]any, 0, len(words)+len(args)+2)
		for i, w := range words {
			parts[i] = "plainto_tsquery('english'::regconfig, ?)"
			qargs = append(qargs, w)
		}
		qargs = append(qargs, o.ID)
		qargs = append(qargs, args...)
		qargs = append(qargs, limit)
		err = s.store.Reader.NewRaw(`SELECT m.id, ts_rank(`+pgVector+`, q.query) AS score
			FROM memories AS m, (SELECT `+strings.Join(parts, " || ")+` AS query) AS q
			WHERE m.user_id = ? AND `+cond+` AND `+pgVector+` @@ q.query
			ORDER BY score DESC, m.id DESC LIMIT ?`, qargs...).Scan(ctx, &out)
	default:
		out, err = s.fts5(ctx, o, f, words, cond, args, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("memory: search: %w", err)
	}
	return out, nil
}

// fts5 ranks o's memories matching f by the query's words with
// statistics of o's memories only: each word scores its inverse document
// frequency among them (the text counting twice the tags) in every
// memory that holds it. The index's own BM25 is not used: it weighs
// words by how many memories of every user hold them, which would tell a
// user about other users' memories through scores and order (and with
// detail=column on a contentless table it scores every row 0 anyway).
// Each word reads its owner's entries only (scope words), and the join
// keeps the owner filter and checks status and tags exactly.
func (s *Service) fts5(ctx context.Context, o storage.Owner, f Filter, words []string, cond string, args []any, limit int) ([]ranked, error) {
	total, err := s.store.Reader.NewSelect().TableExpr("memories AS m").Where("m.user_id = ?", o.ID).Where(cond, args...).Count(ctx)
	if err != nil {
		return nil, err
	}
	scope := ftsScope(o, f)
	score := map[int64]float64{}
	for _, w := range words {
		var hits []struct {
			ID     int64   `bun:"id"`
			Weight float64 `bun:"weight"`
		}
		qargs := append([]any{scope + " AND text : " + quote(w), scope + " AND tags : " + quote(w), o.ID}, args...)
		err := s.store.Reader.NewRaw(`SELECT m.id, f.weight
			FROM (SELECT rowid, 2.0 AS weight FROM memory_fts WHERE memory_fts MATCH ?
				UNION ALL SELECT rowid, 1.0 AS weight FROM memory_fts WHERE memory_fts MATCH ?) AS f
			JOIN memories AS m ON m.id = f.rowid
			WHERE m.user_id = ? AND `+cond, qargs...).Scan(ctx, &hits)
		if err != nil {
			return nil, err
		}
		docs := map[int64]bool{}
		for _, h := range hits {
			docs[h.ID] = true
		}
		n := float64(len(docs))
		idf := math.Log(1 + (float64(total)-n+0.5)/(n+0.5))
		for _, h := range hits {
			score[h.ID] += idf * h.Weight
		}
	}
	out := make([]ranked, 0, len(score))
	for id, sc := range score {
		out = append(out, ranked{ID: id, Score: sc})
	}
	slices.SortFunc(out, func(a, b ranked) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	return out[:min(limit, len(out))], nil
}

// Search returns o's memories most relevant to in.Query: full-text
// ranking, fused with embedding similarity when an embedder is set.
func (s *Service) Search(ctx context.Context, o storage.Owner, in SearchInput) (SearchOutput, error) {
	limit := in.Limit
	switch {
	case limit == 0:
		limit = DefaultSearchLimit
	case limit < 0 || limit > MaxSearchLimit:
		return SearchOutput{}, invalid("limit must be between 1 and %d", MaxSearchLimit)
	}
	if len(in.Query) > MaxQueryBytes {
		return SearchOutput{}, invalid("query is longer than %d bytes", MaxQueryBytes)
	}
	if strings.TrimSpace(in.Query) == "" {
		return SearchOutput{}, invalid("query is empty")
	}
	f, err := Filter{Tags: in.Tags, Status: in.Status}.check(true)
	if err != nil {
		return SearchOutput{}, err
	}
	n := max(limit*candidates, minCandidates)
	text, err := s.fullText(ctx, o, queryTerms(in.Query), f, n)
	if err != nil {
		return SearchOutput{}, err
	}
	out := SearchOutput{Mode: "fulltext"}
	lists := [][]ranked{text}
	if s.embed != nil {
		near, err := s.nearest(ctx, o, in.Query, f, n)
		if err != nil {
			// Recall still works without the embedding service.
			s.log.WarnContext(ctx, "memory: semantic search failed; answering with full-text ranking only", "err", err)
		} else {
			lists = append(lists, near)
			out.Mode = "hybrid"
		}
	}
	best := fuse(lists, limit)
	ids := make([]int64, len(best))
	for i, b := range best {
		ids[i] = b.ID
	}
	rows, err := s.byIDs(ctx, o, ids)
	if err != nil {
		return SearchOutput{}, err
	}
	score := make(map[int64]float64, len(best))
	for _, b := range best {
		score[b.ID] = b.Score
	}
	out.Memories = make([]Found, 0, len(rows))
	for _, r := range rows {
		out.Memories = append(out.Memories, Found{Memory: r.memory(), Score: score[r.ID]})
	}
	return out, nil
}

// fuse merges rankings by reciprocal rank fusion: each memory scores the
// sum of 1/(rrfK+rank) over the rankings it appears in. A single ranking
// keeps its own order (and scores).
func fuse(lists [][]ranked, limit int) []ranked {
	if len(lists) == 1 {
		return lists[0][:min(limit, len(lists[0]))]
	}
	score := map[int64]float64{}
	for _, l := range lists {
		for i, r := range l {
			score[r.ID] += 1.0 / float64(rrfK+i+1)
		}
	}
	out := make([]ranked, 0, len(score))
	for id, sc := range score {
		out = append(out, ranked{ID: id, Score: sc})
	}
	slices.SortFunc(out, func(a, b ranked) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	return out[:min(limit, len(out))]
}
