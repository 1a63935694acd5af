package cluster_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

const noticeTopic = "caller.invalidate"

// noticeReader is the serving process's side: an SQLNotices on its own
// in-process bus, recording what it delivers and the gaps it signals.
type noticeReader struct {
	n    *cluster.SQLNotices
	mu   sync.Mutex
	got  []string
	gaps int
	now  time.Time
}

func newNoticeReader(t *testing.T, s *storage.Store, o cluster.SQLNoticesOptions) *noticeReader {
	t.Helper()
	r := &noticeReader{now: time.Now()}
	local := cluster.NewLocal()
	o.DB, o.Reader, o.Local, o.Table, o.Topic, o.Logger = s.DB, s.Reader, local, "caller_invalidations", noticeTopic, quiet()
	o.Now = func() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.now }
	n, err := cluster.NewSQLNotices(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	r.n = n
	n.Subscribe(noticeTopic, func(_ string, p []byte) { r.mu.Lock(); r.got = append(r.got, string(p)); r.mu.Unlock() })
	n.OnGap(func() { r.mu.Lock(); r.gaps++; r.mu.Unlock() })
	r.poll(t) // finds where the rows end
	return r
}

func (r *noticeReader) poll(t *testing.T) {
	t.Helper()
	if err := r.n.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (r *noticeReader) advance(d time.Duration) { r.mu.Lock(); r.now = r.now.Add(d); r.mu.Unlock() }

func (r *noticeReader) state() (got []string, gaps int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...), r.gaps
}

// writeNotices writes n rows as another process would, in statements of
// at most 1000 rows.
func writeNotices(t *testing.T, s *storage.Store, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	for start := 0; start < n; start += 1000 {
		var b strings.Builder
		b.WriteString("INSERT INTO caller_invalidations (node, payload, created_at) VALUES ")
		args := []any{}
		for i := start; i < min(n, start+1000); i++ {
			if i > start {
				b.WriteString(", ")
			}
			b.WriteString("('other', ?, ?)")
			args = append(args, fmt.Sprintf("%s%d", prefix, i), now)
		}
		if _, err := s.DB.NewRaw(b.String(), args...).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A flood of notices (any account can make them) is read in one round,
// however many there are: no per-round cap another process can outrun.
func TestSQLNoticesFloodCaughtUpInOneRound(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		r := newNoticeReader(t, s, cluster.SQLNoticesOptions{})
		const flood = 20_000
		writeNotices(t, s, "u:", flood)
		r.poll(t)
		got, gaps := r.state()
		if len(got) != flood {
			t.Fatalf("one round delivered %d of %d notices", len(got), flood)
		}
		for i, p := range got {
			if p != fmt.Sprintf("u:%d", i) {
				t.Fatalf("notice %d is %q", i, p)
			}
		}
		if gaps != 0 || r.n.Missing() != 0 || !r.n.Healthy() {
			t.Fatalf("after catching up: gaps %d, missing %d, healthy %v", gaps, r.n.Missing(), r.n.Healthy())
		}
		// Rows this process wrote are not delivered again.
		if err := r.n.Publish(context.Background(), noticeTopic, []byte("mine")); err != nil {
			t.Fatal(err)
		}
		writeNotices(t, s, "v:", 1)
		r.poll(t)
		if got, _ := r.state(); len(got) != flood+2 || got[flood] != "mine" || got[flood+1] != "v:0" {
			t.Fatalf("after own and one more: %q", got[flood:])
		}
	})
}

// On PostgreSQL an identity is taken before commit: a row can become
// visible long after rows with higher ids were read. It is still
// delivered.
func TestSQLNoticesLateCommitDelivered(t *testing.T) {
	s := storagetest.Open(t, storage.Postgres)
	ctx := context.Background()
	r := newNoticeReader(t, s, cluster.SQLNoticesOptions{})
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.NewRaw("INSERT INTO caller_invalidations (node, payload, created_at) VALUES ('other', 'late', ?)", time.Now().UTC()).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	writeNotices(t, s, "u:", 200) // far more than any look-behind
	r.poll(t)
	if got, _ := r.state(); len(got) != 200 || r.n.Missing() != 1 {
		t.Fatalf("before the late commit: %d delivered, %d missing; want 200 and 1", len(got), r.n.Missing())
	}
	r.poll(t) // still missing, within GapWait: waited for, no gap
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r.poll(t)
	got, gaps := r.state()
	if len(got) != 201 || got[200] != "late" {
		t.Fatalf("the late row was not delivered: %d rows, last %q", len(got), got[len(got)-1])
	}
	if gaps != 0 || r.n.Missing() != 0 {
		t.Fatalf("gaps %d, missing %d after the late row arrived", gaps, r.n.Missing())
	}
}

// An id that never appears (its insert rolled back) is given up after
// GapWait with a gap: the reader neither stalls nor trusts what it may
// have missed.
func TestSQLNoticesRolledBackIDGivenUp(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		r := newNoticeReader(t, s, cluster.SQLNoticesOptions{GapWait: 10 * time.Second})
		tx, err := s.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.NewRaw("INSERT INTO caller_invalidations (node, payload, created_at) VALUES ('other', 'never', ?)", time.Now().UTC()).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		writeNotices(t, s, "u:", 3)
		r.poll(t)
		got, gaps := r.state()
		if len(got) != 3 || gaps != 0 {
			t.Fatalf("%d delivered, %d gaps; want 3 and 0", len(got), gaps)
		}
		wantMissing := 0
		if s.Dialect() == storage.Postgres {
			wantMissing = 1 // SQLite hands the rolled-back id out again
		}
		if r.n.Missing() != wantMissing {
			t.Fatalf("%d ids missing, want %d", r.n.Missing(), wantMissing)
		}
		r.advance(5 * time.Second)
		r.poll(t)
		if _, gaps := r.state(); gaps != 0 || r.n.Missing() != wantMissing {
			t.Fatalf("before GapWait: %d gaps, %d missing", gaps, r.n.Missing())
		}
		r.advance(6 * time.Second)
		r.poll(t)
		_, gaps = r.state()
		if r.n.Missing() != 0 || gaps != wantMissing {
			t.Fatalf("after GapWait: %d missing, %d gaps; want 0 and %d", r.n.Missing(), gaps, wantMissing)
		}
		r.poll(t)
		writeNotices(t, s, "v:", 1)
		r.poll(t)
		got, gaps2 := r.state()
		if gaps2 != gaps || got[len(got)-1] != "v:0" || !r.n.Healthy() {
			t.Fatalf("after giving up: gaps %d -> %d, last %q, healthy %v", gaps, gaps2, got[len(got)-1], r.n.Healthy())
		}
	})
}

// More missing ids than MaxMissing (a jump in the ids) cannot be tracked:
// a gap at once.
func TestSQLNoticesTooManyMissingIsAGap(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		r := newNoticeReader(t, s, cluster.SQLNoticesOptions{MaxMissing: 10})
		writeNotices(t, s, "u:", 1)
		if _, err := s.DB.NewRaw("INSERT INTO caller_invalidations (id, node, payload, created_at) VALUES (100000, 'other', 'far', ?)", time.Now().UTC()).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		epoch := r.n.Epoch()
		r.poll(t)
		got, gaps := r.state()
		if len(got) != 2 || got[1] != "far" || gaps != 1 || r.n.Epoch() == epoch || r.n.Missing() != 0 {
			t.Fatalf("after a jump: %q, %d gaps, %d missing", got, gaps, r.n.Missing())
		}
	})
}

// A read that fails is a gap and makes the notices unhealthy; the next
// good read is another gap and healthy again.
func TestSQLNoticesReadFailureIsAGap(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		r := newNoticeReader(t, s, cluster.SQLNoticesOptions{})
		if !r.n.Healthy() {
			t.Fatal("unhealthy after the first read")
		}
		if _, err := s.DB.NewRaw("ALTER TABLE caller_invalidations RENAME TO caller_invalidations_away").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.n.Poll(ctx); err == nil {
			t.Fatal("a read of a missing table succeeded")
		}
		if _, gaps := r.state(); gaps != 1 || r.n.Healthy() {
			t.Fatalf("after a failed read: %d gaps, healthy %v", gaps, r.n.Healthy())
		}
		if _, err := s.DB.NewRaw("ALTER TABLE caller_invalidations_away RENAME TO caller_invalidations").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		r.poll(t)
		if _, gaps := r.state(); gaps != 2 || !r.n.Healthy() {
			t.Fatalf("after recovering: %d gaps, healthy %v", gaps, r.n.Healthy())
		}
		r.advance(3 * time.Second)
		if r.n.Healthy() {
			t.Fatal("healthy three intervals after the last read")
		}
	})
}

// Two processes on one SQLite database, with no bus between them: what
// one publishes on the notices' topic, the other reads.
func ExampleSQLNotices() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "notices")
	defer os.RemoveAll(dir)
	store, err := storage.Open(ctx, storage.Config{DataDir: dir})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if _, err := migrations.Apply(ctx, store.DB); err != nil {
		panic(err)
	}
	open := func() *cluster.SQLNotices {
		n, err := cluster.NewSQLNotices(cluster.SQLNoticesOptions{DB: store.DB, Reader: store.Reader,
			Local: cluster.NewLocal(), Table: "caller_invalidations", Topic: "caller.invalidate"})
		if err != nil {
			panic(err)
		}
		return n
	}
	operator, server := open(), open()
	server.Subscribe("caller.invalidate", func(_ string, p []byte) { fmt.Printf("server heard %s\n", p) })
	server.Start() // reads every second until Close
	defer server.Close()

	_ = operator.Publish(ctx, "caller.invalidate", []byte("u:42"))
	_ = server.Poll(ctx) // or wait for the next read
	// Output: server heard u:42
}
