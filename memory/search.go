package memory

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/schedules"
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
	Limit  int      `json:"limit,omitempty" jsonschema:"how many memories to return, 1 to 100 (default 10)" schema:"minimum=1,maximum=100,default=10"`
	Status string   `json:"status,omitempty" jsonschema:"which memories to search (default active)" schema:"enum=active|archived|all,default=active"`
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
	Mode string `json:"mode" jsonschema:"fulltext, or hybrid when embeddings ranked too" schema:"enum=fulltext|hybrid"`
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

// pgVector is the expression of memories_search, the GIN index
// (migration 0290): every lexeme under the row's owner and status.
// Searches use it verbatim so that the index serves them.
const pgVector = "memory_search_vector(m.user_id, m.status, m.text, m.tags)"

// pgQuery is the tsquery of one word (an argument) under an owner and a
// status (arguments before it; "" for either status): built from the
// lexemes the English configuration makes of the word, never parsed as
// tsquery syntax. Its arguments are constants, so the planner folds it
// and the index serves it.
const pgQuery = "memory_search_query(?, ?, ?)"

// The SQLite full-text index's rowids (migration 0250): the owner, the
// status and the memory's row id in one integer, so that one owner's
// entries of one status are a contiguous range of every word's list.
const (
	ftsOwnerShift = 33
	ftsArchived   = int64(1) << 32
	ftsIDMask     = ftsArchived - 1
)

// ftsRange is the rowid range of o's index entries with status ("" for
// every status).
func ftsRange(o storage.Owner, status string) (lo, hi int64) {
	lo = o.ID << ftsOwnerShift
	switch status {
	case StatusActive:
		return lo, lo + ftsArchived - 1
	case StatusArchived:
		return lo + ftsArchived, lo + 2*ftsArchived - 1
	}
	return lo, lo + 2*ftsArchived - 1
}

// Bounds of the work one search does per word.
const (
	// maxHits is how many of a word's memories a search reads on SQLite,
	// newest first (PostgreSQL reads them all: pgRanked). A word in more
	// of the caller's memories is common among them and weighs little;
	// its other memories are only checked among the best candidates
	// (recheckMin).
	maxHits = 2000
	// recheckMin is how many of the best candidates, at least, are
	// checked for the common words.
	recheckMin = 200
)

// ranked is a memory's row id with its score in one ranking.
type ranked struct {
	ID    int64   `bun:"id"`
	Score float64 `bun:"score"`
}

// hits are the memories of the caller holding one query word: how many
// (docs) and the row ids of the newest maxHits of them (more says
// whether there are others).
type hits struct {
	docs int64
	ids  []int64
	more bool
}

// fullText ranks o's memories matching f by the query's words, best
// first, with statistics of o's memories only: each word scores its
// inverse document frequency among them, log(1 + (N − n + ½)/(n + ½))
// for N memories of which n hold it, in every memory that holds it (in
// the text or the tags). A ranking with the whole index's statistics (the
// database's BM25) would weigh words by how many memories of every user
// hold them and tell a user about other users' memories through scores
// and order. Every query the ranking runs is bounded to o's memories: on
// SQLite by o's range of the index's rowids (the index seeks to it and
// stops after it), on PostgreSQL by the owner column, and the memories
// returned are read again with the owner filter.
func (s *Service) fullText(ctx context.Context, o storage.Owner, words []string, f Filter, limit int) ([]ranked, error) {
	if len(words) == 0 {
		return nil, nil
	}
	total, err := s.countOf(ctx, o, f.Status)
	if err != nil || total == 0 {
		return nil, err
	}
	if s.store.Dialect() == storage.Postgres {
		out, err := s.pgRanked(ctx, o, words, f, total, limit)
		if err != nil {
			return nil, fmt.Errorf("memory: search: %w", err)
		}
		return out, nil
	}
	lists, err := s.ftsHits(ctx, o, words, f)
	if err != nil {
		return nil, fmt.Errorf("memory: search: %w", err)
	}
	idf := make([]float64, len(words))
	score := map[int64]float64{}
	for i, l := range lists {
		n := float64(l.docs)
		idf[i] = math.Log(1 + (max(float64(total), n)-n+0.5)/(n+0.5))
		for _, id := range l.ids {
			score[id] += idf[i]
		}
	}
	out := sortRanked(score)
	// A common word's memories were read only in part: check the best
	// candidates for it, so that a memory holding a rare word and a
	// common one ranks above one holding the rare word alone.
	top := out[:min(len(out), max(limit, recheckMin))]
	rechecked := false
	for i, l := range lists {
		if !l.more {
			continue
		}
		have := make(map[int64]bool, len(l.ids))
		for _, id := range l.ids {
			have[id] = true
		}
		// The list is the word's newest memories: one newer than its
		// oldest and not in it does not hold the word. (On SQLite, when
		// both statuses are searched, the list is in rowid order, which
		// puts the archived first.)
		cutoff := int64(math.MaxInt64)
		if len(l.ids) > 0 && f.Status != "" {
			cutoff = l.ids[len(l.ids)-1]
		}
		var missing []int64
		for _, r := range top {
			if !have[r.ID] && r.ID < cutoff {
				missing = append(missing, r.ID)
			}
		}
		if len(missing) == 0 {
			continue
		}
		found, err := s.holding(ctx, o, words[i], f, missing)
		if err != nil {
			return nil, fmt.Errorf("memory: search: %w", err)
		}
		for _, id := range found {
			score[id] += idf[i]
			rechecked = true
		}
	}
	if rechecked {
		out = sortRanked(score)
	}
	return out[:min(limit, len(out))], nil
}

// sortRanked is score best first, the newest first among equals.
func sortRanked(score map[int64]float64) []ranked {
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
	return out
}

// countOf is how many memories o keeps with status ("": every status).
func (s *Service) countOf(ctx context.Context, o storage.Owner, status string) (int64, error) {
	var c struct {
		Active   int64 `bun:"active"`
		Archived int64 `bun:"archived"`
	}
	err := s.store.Reader.NewSelect().Table("memory_counts").Column("active", "archived").Where("user_id = ?", o.ID).Scan(ctx, &c)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("memory: count: %w", err)
	}
	switch status {
	case StatusActive:
		return c.Active, nil
	case StatusArchived:
		return c.Archived, nil
	}
	return c.Active + c.Archived, nil
}

// ftsMatch is the FTS5 expression of word w with f's tags: each tag's
// words in the tags column (a superset of the exact tag, which
// exactTags then checks), w in the text or the tags. Every part is
// quoted: a word is only ever a word.
func ftsMatch(w string, f Filter) string {
	var parts []string
	for _, t := range f.Tags {
		for _, tw := range terms(t) {
			parts = append(parts, "tags : "+quote(tw))
		}
	}
	return strings.Join(append(parts, "{text tags} : "+quote(w)), " AND ")
}

// ftsHits reads, for each word, o's memories holding it from the SQLite
// index, within o's rowid range.
func (s *Service) ftsHits(ctx context.Context, o storage.Owner, words []string, f Filter) ([]hits, error) {
	lo, hi := ftsRange(o, f.Status)
	out := make([]hits, len(words))
	for i, w := range words {
		match := ftsMatch(w, f)
		var rowids []int64
		if err := s.store.Reader.NewRaw(`SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? AND rowid BETWEEN ? AND ?
			ORDER BY rowid DESC LIMIT ?`, match, lo, hi, maxHits+1).Scan(ctx, &rowids); err != nil {
			return nil, err
		}
		h := hits{docs: int64(len(rowids))}
		if len(rowids) > maxHits {
			rowids, h.more = rowids[:maxHits], true
			if err := s.store.Reader.NewRaw(`SELECT COUNT(*) FROM memory_fts WHERE memory_fts MATCH ? AND rowid BETWEEN ? AND ?`,
				match, lo, hi).Scan(ctx, &h.docs); err != nil {
				return nil, err
			}
		}
		h.ids = make([]int64, len(rowids))
		for k, r := range rowids {
			h.ids[k] = r & ftsIDMask
		}
		out[i] = h
	}
	if len(f.Tags) == 0 {
		return out, nil
	}
	// The index holds the tags' words; keep the memories with the exact
	// tags.
	var all []int64
	for _, h := range out {
		all = append(all, h.ids...)
	}
	exact, err := s.exactTags(ctx, o, f, all)
	if err != nil {
		return nil, err
	}
	for i := range out {
		before := len(out[i].ids)
		out[i].ids = slices.DeleteFunc(out[i].ids, func(id int64) bool { return !exact[id] })
		if !out[i].more {
			out[i].docs -= int64(before - len(out[i].ids))
		}
	}
	return out, nil
}

// exactTags reports which of ids are o's memories matching f exactly.
func (s *Service) exactTags(ctx context.Context, o storage.Owner, f Filter, ids []int64) (map[int64]bool, error) {
	cond, args := s.where(f)
	out := map[int64]bool{}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 1000)]
		ids = ids[len(chunk):]
		var ok []int64
		if err := s.store.Reader.NewSelect().TableExpr("memories AS m").ColumnExpr("m.id").
			Where("m.user_id = ? AND m.id IN (?)", o.ID, bun.In(chunk)).Where(cond, args...).Scan(ctx, &ok); err != nil {
			return nil, err
		}
		for _, id := range ok {
			out[id] = true
		}
	}
	return out, nil
}

// pgRanked ranks o's memories matching f by words on PostgreSQL, in one
// statement: per word, o's memories holding it (one owner's entry of the
// index each); each word's inverse document frequency among o's total
// memories; each memory's sum of them; the best limit. Counting a word's
// memories reads every one of them from the table (GIN keeps no counts),
// so the database sums the scores too: every memory holding a word counts,
// however common, and only limit rows come back.
func (s *Service) pgRanked(ctx context.Context, o storage.Owner, words []string, f Filter, total int64, limit int) ([]ranked, error) {
	cond, args := s.where(f)
	parts := make([]string, len(words))
	var qargs []any
	for i, w := range words {
		// memory_search_query reads no syntax: a word is only ever a word.
		// The owner filter is (m.user_id + 0) so that the planner does not
		// AND the word's entry with the owner's whole memories_user range.
		parts[i] = `SELECT ` + strconv.Itoa(i) + ` AS w, m.id FROM memories AS m
			WHERE (m.user_id + 0) = ? AND ` + cond + ` AND ` + pgVector + ` @@ ` + pgQuery
		qargs = append(qargs, o.ID)
		qargs = append(qargs, args...)
		qargs = append(qargs, o.ID, f.Status, w)
	}
	qargs = append(qargs, float64(total), limit)
	var out []ranked
	err := s.store.Reader.NewRaw(`WITH h AS MATERIALIZED (`+strings.Join(parts, " UNION ALL ")+`),
		d AS (SELECT w, ln(1 + (GREATEST(?::float8, COUNT(*)::float8) - COUNT(*)::float8 + 0.5) / (COUNT(*)::float8 + 0.5)) AS idf
			FROM h GROUP BY w)
		SELECT h.id, SUM(d.idf) AS score FROM h JOIN d ON d.w = h.w GROUP BY h.id ORDER BY score DESC, h.id DESC LIMIT ?`,
		qargs...).Scan(ctx, &out)
	return out, err
}

// holding returns which of ids (o's candidates) hold word w, on SQLite.
func (s *Service) holding(ctx context.Context, o storage.Owner, w string, f Filter, ids []int64) ([]int64, error) {
	var out []int64
	lo, hi := ftsRange(o, f.Status)
	rowids := make([]int64, 0, 2*len(ids))
	for _, id := range ids {
		// The candidate's rowid under the status asked for (either, for
		// every status).
		if f.Status != StatusArchived {
			rowids = append(rowids, o.ID<<ftsOwnerShift+id)
		}
		if f.Status != StatusActive {
			rowids = append(rowids, o.ID<<ftsOwnerShift+ftsArchived+id)
		}
	}
	var found []int64
	if err := s.store.Reader.NewRaw(`SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? AND rowid IN (?) AND rowid BETWEEN ? AND ?`,
		"{text tags} : "+quote(w), bun.In(rowids), lo, hi).Scan(ctx, &found); err != nil {
		return nil, err
	}
	for _, r := range found {
		out = append(out, r&ftsIDMask)
	}
	return out, nil
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

// IndexLane names the schedule that keeps the SQLite full-text index
// compact (IndexSchedule).
const IndexLane = "memory-index"

// indexStepPages bounds the pages one merge step writes, in its own short
// write transaction.
const indexStepPages = 1000

// CompactIndex merges the segments of the SQLite full-text index of
// memories, one bounded step at a time (each in its own short write
// transaction, so that saves wait at most one step), until nothing is
// left to merge or budget has passed (budget 0: until done). It reports
// whether the index is fully merged. FTS5 merges a few segments on every
// write already, but an index grown by many small transactions keeps
// dozens of them, and every search word seeks into each: merged, a
// search at 100,000 memories costs about half the CPU. On PostgreSQL
// there is nothing to do.
func CompactIndex(ctx context.Context, s *storage.Store, budget time.Duration) (bool, error) {
	if s.Dialect() != storage.SQLite {
		return true, nil
	}
	start := time.Now()
	for budget == 0 || time.Since(start) < budget {
		worked := false
		err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			var before, after int64
			if err := tx.NewRaw("SELECT total_changes()").Scan(ctx, &before); err != nil {
				return err
			}
			// A negative page count merges segments even where fewer than
			// the automatic merge's share wait on a level.
			if _, err := tx.ExecContext(ctx, "INSERT INTO memory_fts (memory_fts, rank) VALUES ('merge', ?)", -indexStepPages); err != nil {
				return err
			}
			if err := tx.NewRaw("SELECT total_changes()").Scan(ctx, &after); err != nil {
				return err
			}
			// FTS5: fewer than two changes means the merge found nothing.
			worked = after-before >= 2
			return nil
		})
		if err != nil {
			return false, fmt.Errorf("memory: compact the full-text index: %w", err)
		}
		if !worked {
			return true, nil
		}
	}
	return false, nil
}

// IndexSchedule returns the lane that compacts the SQLite full-text index
// (CompactIndex) for up to two seconds every half hour.
func (s *Service) IndexSchedule() schedules.Schedule {
	return schedules.Schedule{Name: IndexLane, Every: 30 * time.Minute, Run: func(ctx context.Context, _ schedules.Tick) error {
		_, err := CompactIndex(ctx, s.store, 2*time.Second)
		return err
	}}
}
