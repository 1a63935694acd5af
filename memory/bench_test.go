package memory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// BenchmarkMemorySearch searches one user's memories among a larger
// total: ENCLAVE_BENCH_MEMORIES of theirs (default 10,000) and as many
// again spread over nine other users. Texts are 12 to 40 words drawn with
// a Zipf distribution from 8,000 words whose most frequent are the
// English stopwords, as in natural text; a query is a stopword and three
// other words drawn the same way. It reports the latency percentiles of
// one search (ms), on SQLite and, when ENCLAVE_TEST_POSTGRES is set,
// PostgreSQL.
func BenchmarkMemorySearch(b *testing.B) {
	n := 10000
	if v := os.Getenv("ENCLAVE_BENCH_MEMORIES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("ENCLAVE_BENCH_MEMORIES=%q: want a positive number", v)
		}
	}
	for _, d := range storagetest.Dialects() {
		b.Run(fmt.Sprintf("%s/%d", d, n), func(b *testing.B) {
			s := storagetest.Open(b, d)
			svc, err := New(Config{Options: Options{MaxMemories: n}, Store: s, Registry: capabilities.NewRegistry(capabilities.Options{}),
				Owners: func(context.Context, capabilities.Caller) (capabilities.Owner, error) {
					return capabilities.Owner{}, nil
				},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			words := vocabulary(8000)
			rng := rand.New(rand.NewPCG(1, 2))
			zipf := rand.NewZipf(rng, 1.07, 2, uint64(len(words)-1))
			text := func(k int) string {
				ws := make([]string, k)
				for i := range ws {
					ws[i] = words[zipf.Uint64()]
				}
				return strings.Join(ws, " ")
			}
			var target storage.Owner
			for u := range 10 {
				o := benchUser(b, s, fmt.Sprintf("user%d", u))
				count := n
				if u > 0 {
					count = n / 9
				}
				if u == 0 {
					target = o
				}
				fill(b, s, o, count, func() string { return text(12 + rng.IntN(29)) })
			}
			if d == storage.Postgres {
				if _, err := s.DB.ExecContext(b.Context(), "ANALYZE memories"); err != nil {
					b.Fatal(err)
				}
			}
			queries := make([]string, 256)
			for i := range queries {
				q := []string{words[rng.IntN(20)]}
				for len(q) < 4 {
					if w := words[zipf.Uint64()]; !stopwords[w] {
						q = append(q, w)
					}
				}
				queries[i] = strings.Join(q, " ")
			}
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			found := 0
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				out, err := svc.Search(ctx, target, SearchInput{Query: queries[i%len(queries)]})
				lat = append(lat, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				found += len(out.Memories)
			}
			b.StopTimer()
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(found)/float64(len(lat)), "results/op")
		})
	}
}

// vocabulary makes n distinct words: the stopwords, then pronounceable
// made-up words.
func vocabulary(n int) []string {
	syll := []string{"ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "xe", "zu", "pa", "do", "fi", "ge", "hu", "ja", "qo", "we", "yi", "bo"}
	out := make([]string, 0, n)
	for w := range stopwords {
		out = append(out, w)
	}
	slices.Sort(out)
	for i := 0; len(out) < n; i++ {
		a, b, c := syll[i%20], syll[(i/20)%20], syll[(i/400)%20]
		out = append(out, a+b+c+"n")
	}
	return out
}

func benchUser(b *testing.B, s *storage.Store, name string) storage.Owner {
	b.Helper()
	sum := sha256.Sum256([]byte(name))
	stable := hex.EncodeToString(sum[:])
	now := time.Now().UTC()
	var id int64
	if err := s.DB.NewRaw("INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
		stable, name+"@example.com", name, now, now).Scan(context.Background(), &id); err != nil {
		b.Fatal(err)
	}
	return storage.Owner{ID: id, StableID: stable}
}

// fill inserts count memories of o, 1,000 per transaction.
func fill(b *testing.B, s *storage.Store, o storage.Owner, count int, text func() string) {
	b.Helper()
	now := time.Now().UTC()
	for done := 0; done < count; {
		batch := make([]row, 0, min(1000, count-done))
		for range cap(batch) {
			batch = append(batch, row{PublicID: newID(), UserID: o.ID, Text: text(), Tags: `["bench"]`, Writer: "agent", Status: StatusActive, CreatedAt: now, UpdatedAt: now})
		}
		err := s.RunInTx(context.Background(), func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewInsert().Model(&batch).Returning("NULL").Exec(ctx)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		done += len(batch)
	}
}
