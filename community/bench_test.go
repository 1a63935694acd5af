package community_test

import (
	"context"
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
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// noPackages is the code mode of a benchmark that only searches.
type noPackages struct{}

func (noPackages) Get(context.Context, storage.Owner, string, int) (codemode.Version, error) {
	return codemode.Version{}, capabilities.Errorf(capabilities.CodeNotFound, "no packages here")
}

func (noPackages) Create(context.Context, capabilities.Caller, storage.Owner, string, map[string]string, codemode.Manifest) (codemode.Version, error) {
	return codemode.Version{}, capabilities.Errorf(capabilities.CodeNotFound, "no packages here")
}

// benchVocabulary is n made-up words; word i is drawn with a Zipf-like
// frequency (a few common words, many rare ones), like a catalogue's.
func benchVocabulary(n int) []string {
	syl := []string{"ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "xe", "zu", "bra", "cle", "dro", "fli", "gra", "pla"}
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for j, k := 0, i+n; j < 3 || k > 0; j++ {
			b.WriteString(syl[k%len(syl)])
			k /= len(syl)
		}
		out[i] = b.String()
	}
	return out
}

// BenchmarkCommunitySearch searches a catalogue of 10,000 public
// listings (ENCLAVE_BENCH_LISTINGS) by 200 authors with one- and
// two-word queries, on SQLite and, when ENCLAVE_TEST_POSTGRES is set,
// PostgreSQL, and reports the latency percentiles of one search (ms) and
// the listings a page holds.
func BenchmarkCommunitySearch(b *testing.B) {
	total := 10_000
	if v := os.Getenv("ENCLAVE_BENCH_LISTINGS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("ENCLAVE_BENCH_LISTINGS=%q: want a positive number", v)
		}
		total = n
	}
	vocab := benchVocabulary(3000)
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := func() string { return vocab[int(float64(len(vocab))*rng.Float64()*rng.Float64()*rng.Float64())] }
	text := func(n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = zipf()
		}
		return strings.Join(w, " ")
	}
	type listing struct{ name, description, readme string }
	corpus := make([]listing, total)
	for i := range corpus {
		corpus[i] = listing{fmt.Sprintf("%s-%d", zipf(), i), text(12), text(150)}
	}
	queries := make([]string, 500)
	for i := range queries {
		if i%2 == 0 {
			queries[i] = zipf()
		} else {
			queries[i] = zipf() + " " + zipf()
		}
	}
	for _, d := range storagetest.Dialects() {
		b.Run(string(d), func(b *testing.B) {
			ctx := context.Background()
			s := storagetest.Open(b, d)
			start := time.Now()
			const authors = 200
			owners := make([]int64, authors)
			now := time.Now().UTC()
			for i := range owners {
				if err := s.DB.NewRaw("INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
					fmt.Sprintf("%064d", i), fmt.Sprintf("u%d@example.test", i), fmt.Sprintf("author%d", i), now, now).Scan(ctx, &owners[i]); err != nil {
					b.Fatal(err)
				}
			}
			for lo := 0; lo < total; lo += 500 {
				err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
					for i := lo; i < min(lo+500, total); i++ {
						l := corpus[i]
						if _, err := tx.ExecContext(ctx, `INSERT INTO community_listings (public_id, user_id, package_name, package_version, name, description,
							readme, author_username, source_blob, status, published_at, updated_at) VALUES (?, ?, ?, 1, ?, ?, ?, ?, 'x', 'public', ?, ?)`,
							fmt.Sprintf("lst_%d", i), owners[i%authors], l.name, l.name, l.description, l.readme, fmt.Sprintf("author%d", i%authors), now, now); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			if d == storage.Postgres {
				if _, err := s.DB.ExecContext(ctx, "ANALYZE community_listings"); err != nil {
					b.Fatal(err)
				}
			}
			b.Logf("%s: %d listings built in %.1f s", d, total, time.Since(start).Seconds())
			svc, err := community.New(community.Config{Store: s, Packages: noPackages{},
				Owners: func(context.Context, capabilities.Caller) (capabilities.Owner, error) {
					return capabilities.Owner{}, nil
				},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			viewer := storage.Owner{ID: owners[0]}
			for _, q := range queries[:20] { // warm the caches
				if _, err := svc.Search(ctx, viewer, q, ""); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			found := 0
			for i := 0; b.Loop(); i++ {
				t0 := time.Now()
				res, err := svc.Search(ctx, viewer, queries[i%len(queries)], "")
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				found += len(res.Listings)
			}
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
