// Package memorybench builds large sets of memories fast and measures the
// latency of searching them. Package memory's benchmark and the bench
// harness (go run ./bench) share it, so both measure the same corpus.
//
// A corpus is Layout.Total memories in all: each measured user (Layout.Targets)
// owns the number given, and the rest is spread over other users of
// Layout.PerOther memories each. Rows are written in a random order of
// owners, as many users writing over time would, so that one user's rows
// are scattered through the table and its full-text index rather than
// stored together. Texts are 12 to 40 words drawn with a Zipf distribution
// from 8,000 words whose most frequent are common English words, as in
// natural text; a query is one common word and three other words drawn
// the same way.
//
// Build inserts through plain multi-row INSERT statements in large
// transactions (the schema's triggers and indexes do the rest), never
// through the service, so 1M rows take a minute rather than an hour.
// CachedSQLite keeps the SQLite file it built under a directory and
// reuses it while the layout and the schema are unchanged.
package memorybench

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// Layout says how many memories the corpus holds and whose they are.
type Layout struct {
	// Total is the number of memories of every user together.
	Total int
	// Targets are the memory counts of the measured users, in order.
	Targets []int
	// PerOther is how many memories each other user owns. Default 10,000.
	PerOther int
	// Seed makes the corpus reproducible. Default 1.
	Seed uint64
	// Unmerged leaves SQLite's full-text index as the inserts left it,
	// not merged as the server's index lane keeps it.
	Unmerged bool
}

func (l Layout) withDefaults() Layout {
	l.PerOther = cmp.Or(l.PerOther, 10_000)
	l.Seed = cmp.Or(l.Seed, 1)
	return l
}

func (l Layout) check() error {
	sum := 0
	for _, n := range l.Targets {
		if n < 1 {
			return fmt.Errorf("memorybench: target of %d memories: want at least 1", n)
		}
		sum += n
	}
	if l.Total < sum || l.PerOther < 1 {
		return fmt.Errorf("memorybench: %d memories in all cannot hold the targets' %d", l.Total, sum)
	}
	return nil
}

// version changes whenever Build writes a different corpus, so that a
// cached file of an older build is not reused.
const version = 2

// common are the frequent words: the first of the vocabulary, and the
// words memory's search drops from a query that has other words.
var common = strings.Fields(`a about above after again against all am an and any are as at be because been before being
	below between both but by can could did do does doing down during each few for from further had has have having he her
	here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
	once only or other our ours ourselves out over own same she should so some such than that the their theirs them
	themselves then there these they this those through to too under until up very was we were what when where which while
	who whom why will with would you your yours yourself yourselves`)

// Corpus draws texts, tags and queries.
type Corpus struct {
	words []string
	rng   *mrand.Rand
	zipf  *mrand.Zipf
}

// NewCorpus returns a corpus drawing from a fixed vocabulary with seed.
func NewCorpus(seed uint64) *Corpus {
	words := slices.Sorted(slices.Values(common))
	syll := []string{"ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "xe", "zu", "pa", "do", "fi", "ge", "hu", "ja", "qo", "we", "yi", "bo"}
	for i := 0; len(words) < 8000; i++ {
		words = append(words, syll[i%20]+syll[(i/20)%20]+syll[(i/400)%20]+"n")
	}
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &Corpus{words: words, rng: rng, zipf: mrand.NewZipf(rng, 1.07, 2, uint64(len(words)-1))}
}

// Text returns a memory's text: 12 to 40 words.
func (c *Corpus) Text() string {
	ws := make([]string, 12+c.rng.IntN(29))
	for i := range ws {
		ws[i] = c.words[c.zipf.Uint64()]
	}
	return strings.Join(ws, " ")
}

// Tags returns a memory's tags as stored (a JSON array): none to two of 50.
func (c *Corpus) Tags() string {
	var tags []string
	for range c.rng.IntN(3) {
		if t := fmt.Sprintf("topic%02d", c.rng.IntN(50)); !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	if tags == nil {
		return "[]"
	}
	b, _ := json.Marshal(tags)
	return string(b)
}

// Queries returns n queries: a common word and three other words.
func (c *Corpus) Queries(n int) []string {
	out := make([]string, n)
	for i := range out {
		q := []string{c.words[c.rng.IntN(20)]}
		for len(q) < 4 {
			if w := c.words[c.zipf.Uint64()]; !slices.Contains(common, w) && !slices.Contains(q, w) {
				q = append(q, w)
			}
		}
		out[i] = strings.Join(q, " ")
	}
	return out
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// publicID is a memory id of the service's form (mem_ and 24 base32
// characters).
func publicID() string {
	b := make([]byte, 15)
	_, _ = rand.Read(b)
	return "mem_" + strings.ToLower(idEncoding.EncodeToString(b))
}

// Built is what Build made.
type Built struct {
	// Targets are the measured users, in Layout.Targets' order.
	Targets []storage.Owner
	// Rows is the number of memories written.
	Rows int
	// Seconds is how long the build took (0 when a cached file served).
	Seconds float64
	// Cached says a previously built file was reused.
	Cached bool
}

// rowsPerStatement and rowsPerTx bound the bulk insert.
const (
	rowsPerStatement = 250
	rowsPerTx        = 50_000
)

// Build writes l's users and memories into s, a migrated store with no
// memories yet.
func Build(ctx context.Context, s *storage.Store, l Layout) (Built, error) {
	l = l.withDefaults()
	if err := l.check(); err != nil {
		return Built{}, err
	}
	start := time.Now()
	if s.Dialect() == storage.SQLite {
		// The writer's page cache holds the growing indexes (the default
		// 2 MiB makes every insert read index pages from the file); it is
		// set back when the build is done.
		if _, err := s.DB.ExecContext(ctx, "PRAGMA cache_size = -262144"); err != nil {
			return Built{}, err
		}
		defer s.DB.ExecContext(context.WithoutCancel(ctx), "PRAGMA cache_size = -2000")
	}
	counts := slices.Clone(l.Targets)
	rest := l.Total - sumOf(l.Targets)
	for rest > 0 {
		n := min(rest, l.PerOther)
		counts = append(counts, n)
		rest -= n
	}
	var b Built
	owners := make([]int64, len(counts))
	now := time.Now().UTC()
	for i := range counts {
		name := fmt.Sprintf("membench%d", i)
		sum := sha256.Sum256([]byte(name))
		var id int64
		if err := s.DB.NewRaw("INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
			hex.EncodeToString(sum[:]), name+"@example.test", name, now, now).Scan(ctx, &id); err != nil {
			return b, fmt.Errorf("memorybench: add user: %w", err)
		}
		owners[i] = id
		if i < len(l.Targets) {
			b.Targets = append(b.Targets, storage.Owner{ID: id, StableID: hex.EncodeToString(sum[:])})
		}
	}
	// The owner of every row, in a random order.
	order := make([]int32, 0, l.Total)
	for i, n := range counts {
		for range n {
			order = append(order, int32(i))
		}
	}
	c := NewCorpus(l.Seed)
	c.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	// Created times run over the last year, oldest first.
	t0 := now.Add(-365 * 24 * time.Hour)
	step := 365 * 24 * time.Hour / time.Duration(max(1, l.Total))
	for done := 0; done < len(order); {
		end := min(len(order), done+rowsPerTx)
		err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			for at := done; at < end; at += rowsPerStatement {
				stop := min(end, at+rowsPerStatement)
				var q strings.Builder
				q.WriteString("INSERT INTO memories (public_id, user_id, text, tags, source, writer, status, created_at, updated_at) VALUES ")
				args := make([]any, 0, 9*(stop-at))
				for k := at; k < stop; k++ {
					if k > at {
						q.WriteString(", ")
					}
					q.WriteString("(?, ?, ?, ?, '', 'agent', ?, ?, ?)")
					status := "active"
					if c.rng.IntN(20) == 0 {
						status = "archived"
					}
					created := t0.Add(time.Duration(k) * step).Truncate(time.Microsecond)
					args = append(args, publicID(), owners[order[k]], c.Text(), c.Tags(), status, created, created)
				}
				if _, err := tx.NewRaw(q.String(), args...).Exec(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return b, fmt.Errorf("memorybench: insert: %w", err)
		}
		done = end
	}
	b.Rows = len(order)
	// PostgreSQL: as autovacuum would, the planner needs statistics of
	// the filled table. SQLite keeps none unless asked (enclave never
	// asks), so neither does the corpus; its full-text index is merged as
	// the server's index lane keeps it (memory.IndexSchedule), unless
	// l.Unmerged.
	if s.Dialect() == storage.Postgres {
		if _, err := s.DB.ExecContext(ctx, "ANALYZE"); err != nil {
			return b, fmt.Errorf("memorybench: analyze: %w", err)
		}
	} else if !l.Unmerged {
		if _, err := memory.CompactIndex(ctx, s, 0); err != nil {
			return b, err
		}
	}
	b.Seconds = time.Since(start).Seconds()
	return b, nil
}

func sumOf(ns []int) int {
	s := 0
	for _, n := range ns {
		s += n
	}
	return s
}

// CachedSQLite opens a migrated SQLite store holding l's corpus, in a file
// under dir named for the layout and the corpus version: a file an earlier
// call built is reused (migrations added since are applied to it, as to
// any database an upgrade finds; one whose recorded migrations no longer
// match the binary's is built again), otherwise it is built into a
// temporary name and renamed when complete. dataDir holds the store's
// other parts (blobs, key). Close the store when done.
func CachedSQLite(ctx context.Context, dir, dataDir string, l Layout) (*storage.Store, Built, error) {
	l = l.withDefaults()
	if err := l.check(); err != nil {
		return nil, Built{}, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "v%d %d %v %d %d\n", version, l.Total, l.Targets, l.PerOther, l.Seed)
	if l.Unmerged {
		fmt.Fprintln(h, "unmerged")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, Built{}, err
	}
	path := filepath.Join(dir, fmt.Sprintf("memories-%x.db", h.Sum(nil)[:8]))
	meta := path + ".json"
	open := func(p string) (*storage.Store, error) {
		s, err := storage.Open(ctx, storage.Config{DataDir: dataDir, DatabaseURL: "sqlite://" + p})
		if err != nil {
			return nil, err
		}
		if _, err := migrations.Apply(ctx, s.DB); err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	}
	if raw, err := os.ReadFile(meta); err == nil {
		var b Built
		if json.Unmarshal(raw, &b) == nil && len(b.Targets) == len(l.Targets) {
			if s, err := open(path); err == nil {
				b.Cached, b.Seconds = true, 0
				return s, b, nil
			}
		}
	}
	tmp := path + ".building"
	for _, p := range []string{tmp, tmp + "-wal", tmp + "-shm", path, path + "-wal", path + "-shm", meta} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, Built{}, err
		}
	}
	s, err := open(tmp)
	if err != nil {
		return nil, Built{}, err
	}
	b, err := Build(ctx, s, l)
	if err == nil {
		// Fold the WAL into the file, so that the renamed file is whole.
		_, err = s.DB.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return nil, b, err
	}
	_ = os.Remove(tmp + "-wal")
	_ = os.Remove(tmp + "-shm")
	raw, _ := json.Marshal(b)
	if err := os.WriteFile(meta, raw, 0o600); err != nil {
		return nil, b, err
	}
	s, err = open(path)
	return s, b, err
}

// Latency is what Measure found.
type Latency struct {
	Queries   int     `json:"queries"`
	P50ms     float64 `json:"p50_ms"`
	P90ms     float64 `json:"p90_ms"`
	P99ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
	MeanMs    float64 `json:"mean_ms"`
	PerQuery  float64 `json:"results_per_query"`
	Seconds   float64 `json:"seconds"`
	WarmQuery int     `json:"warm_queries"`
}

// Measure runs search once per query, one after the other, after warm
// unmeasured ones (taken from the same queries), and returns the latency
// percentiles. search returns how many memories it found.
func Measure(ctx context.Context, queries []string, warm int, search func(ctx context.Context, query string) (int, error)) (Latency, error) {
	if len(queries) == 0 {
		return Latency{}, errors.New("memorybench: no queries")
	}
	for i := range warm {
		if _, err := search(ctx, queries[i%len(queries)]); err != nil {
			return Latency{}, err
		}
	}
	lat := make([]time.Duration, 0, len(queries))
	found := 0
	start := time.Now()
	for _, q := range queries {
		t := time.Now()
		n, err := search(ctx, q)
		lat = append(lat, time.Since(t))
		if err != nil {
			return Latency{}, fmt.Errorf("memorybench: search %q: %w", q, err)
		}
		found += n
	}
	total := time.Since(start)
	slices.Sort(lat)
	pct := func(p float64) float64 { return ms(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
	return Latency{Queries: len(lat), P50ms: pct(0.50), P90ms: pct(0.90), P99ms: pct(0.99), MaxMs: ms(lat[len(lat)-1]),
		MeanMs: ms(total) / float64(len(lat)), PerQuery: float64(found) / float64(len(lat)), Seconds: total.Seconds(), WarmQuery: warm}, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
