package mail_test

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// BenchmarkMailDeliver stores inbound messages of about 100 KB (a text
// body and an attachment) in one user's mailbox through Deliver (raw MIME
// and attachment to blobs, then the graph in one transaction), on SQLite
// and, when ENCLAVE_TEST_POSTGRES is set, PostgreSQL. It reports
// deliveries/s (target: 200/s or more on SQLite), with deliveries on
// 4×GOMAXPROCS concurrent connections as an SMTP listener receives them.
func BenchmarkMailDeliver(b *testing.B) {
	for _, d := range storagetest.Dialects() {
		b.Run(string(d), func(b *testing.B) {
			s := storagetest.Open(b, d)
			svc, err := mail.New(mail.Config{Options: mail.Options{Domain: domain}, Store: s, Owners: owners, Logger: quiet()})
			if err != nil {
				b.Fatal(err)
			}
			benchUser(b, s, "alice")
			body := string(bytes.Repeat([]byte("All work and no play makes a long message. "), 1400)) // ~60 KB
			att := bytes.Repeat([]byte{0xA5, 0x5A, 0x00, 0xFF}, 7500)                                 // 30 KB, ~40 KB base64
			// Deliveries arrive on several SMTP connections at once.
			b.SetParallelism(4)
			var seq atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					raw := message(fmt.Sprintf("bench-%d@x.test", seq.Add(1)), "bench", "", body, att)
					if _, err := svc.Deliver(b.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}

// BenchmarkMailList lists the first inbox page (50 messages) of a user
// holding ENCLAVE_BENCH_MAIL_MESSAGES messages (default 100,000) and
// reports the p50 and p99 latency (ms).
func BenchmarkMailList(b *testing.B) {
	total := 100_000
	if v := os.Getenv("ENCLAVE_BENCH_MAIL_MESSAGES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("ENCLAVE_BENCH_MAIL_MESSAGES=%q: want a positive count", v)
		}
		total = n
	}
	for _, d := range storagetest.Dialects() {
		b.Run(string(d), func(b *testing.B) {
			s := storagetest.Open(b, d)
			svc, err := mail.New(mail.Config{Options: mail.Options{Domain: domain}, Store: s, Owners: owners, Logger: quiet()})
			if err != nil {
				b.Fatal(err)
			}
			caller := benchUser(b, s, "alice")
			benchUser(b, s, "bob")
			fill(b, s, caller.OwnerID, total)
			reg := newRegistry(b, svc)
			var lat []float64
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				res, err := reg.Invoke(b.Context(), caller, "mailList", []byte(`{}`))
				if err != nil || res.IsError {
					b.Fatal(err)
				}
				lat = append(lat, float64(time.Since(start).Microseconds())/1000)
			}
			slices.Sort(lat)
			b.ReportMetric(lat[len(lat)/2], "p50-ms")
			b.ReportMetric(lat[len(lat)*99/100], "p99-ms")
		})
	}
}

// fill inserts n messages for owner in one thread, in one statement.
func fill(b *testing.B, s *storage.Store, owner int64, n int) {
	b.Helper()
	ctx := b.Context()
	now := time.Now().UTC()
	var thread int64
	if err := s.DB.NewRaw("INSERT INTO mail_threads (public_id, user_id, subject, message_count, last_message_at, created_at) VALUES ('thr_bench', ?, 'bench', ?, ?, ?) RETURNING id",
		owner, n, now, now).Scan(ctx, &thread); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if _, err := s.DB.NewRaw(`INSERT INTO mail_messages (public_id, user_id, thread_id, folder, delivery_key, message_id, from_addr, rcpt, subject, text_body, size_bytes, received_at)
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		SELECT 'msg_bench' || i, ?, ?, 'inbox', 'key' || i, 'id' || i || '@x.test', 'sender' || i || '@x.test', 'alice@mail.example.test',
			'subject of message ' || i, 'a short body of message ' || i, 1000, ? FROM n`, n, owner, thread, now).Exec(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d messages inserted in %.1f s", n, time.Since(start).Seconds())
}

func benchUser(b *testing.B, s *storage.Store, name string) capabilities.Caller {
	b.Helper()
	e := &env{store: s}
	return e.userTB(b, name)
}

func newRegistry(b *testing.B, svc *mail.Service) *capabilities.Registry {
	b.Helper()
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quiet()})
	if err := reg.Register(svc.Capabilities()...); err != nil {
		b.Fatal(err)
	}
	return reg
}
