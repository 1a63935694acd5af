package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing/fstest"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// benchMigrations holds the bench's own tables: the SQL quota counter and
// the user-owned rows of the scaling run.
var benchMigrations = migrations.Source{Name: "bench", FS: fstest.MapFS{
	"sqlite/0001_bench.up.sql": {Data: []byte(`
CREATE TABLE bench_quota (
    subject      TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    calls        BIGINT NOT NULL,
    PRIMARY KEY (subject, window_start)
);
CREATE TABLE bench_items (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id),
    title      TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL
);
CREATE INDEX bench_items_user_id ON bench_items (user_id, id);
`)},
	"postgres/0001_bench.up.sql": {Data: []byte(`
CREATE TABLE bench_quota (
    subject      TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    calls        BIGINT NOT NULL,
    PRIMARY KEY (subject, window_start)
);
CREATE TABLE bench_items (
    id         BIGINT PRIMARY KEY,
    user_id    BIGINT NOT NULL REFERENCES users (id),
    title      TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX bench_items_user_id ON bench_items (user_id, id);
`)},
}}

// quotaLimit is far above what the bench reaches: the counter is counted
// on every call, and never refuses one.
const quotaLimit = 1 << 40

// lazyQuota lets the quota be chosen after the store is open.
type lazyQuota struct {
	q atomic.Pointer[capabilities.Quota]
}

func (l *lazyQuota) Allow(ctx context.Context, c capabilities.Caller, name string) error {
	if q := l.q.Load(); q != nil {
		return (*q).Allow(ctx, c, name)
	}
	return nil
}

func (l *lazyQuota) set(q capabilities.Quota) { l.q.Store(&q) }

// memoryQuota counts calls per user in one-minute windows, in process.
type memoryQuota struct{ m sync.Map } // subject → *window

type window struct {
	mu    sync.Mutex
	start int64
	calls int64
}

func newMemoryQuota() *memoryQuota { return &memoryQuota{} }

func (q *memoryQuota) Allow(_ context.Context, c capabilities.Caller, _ string) error {
	now := time.Now().Unix() / 60
	v, _ := q.m.LoadOrStore(c.UserID, &window{})
	w := v.(*window)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.start != now {
		w.start, w.calls = now, 0
	}
	w.calls++
	if w.calls > quotaLimit {
		return fmt.Errorf("quota: %d calls this minute", w.calls)
	}
	return nil
}

// sqlQuota counts calls per user in one-minute windows with one UPSERT per
// call: what replicas sharing a database would need.
type sqlQuota struct{ st *storage.Store }

func sqlQuotaFor(st *storage.Store) *sqlQuota { return &sqlQuota{st: st} }

func (q *sqlQuota) Allow(ctx context.Context, c capabilities.Caller, _ string) error {
	var calls int64
	err := q.st.DB.NewRaw(`INSERT INTO bench_quota (subject, window_start, calls) VALUES (?, ?, 1)
		ON CONFLICT (subject, window_start) DO UPDATE SET calls = bench_quota.calls + 1 RETURNING calls`,
		c.UserID, time.Now().Unix()/60).Scan(ctx, &calls)
	if err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	if calls > quotaLimit {
		return fmt.Errorf("quota: %d calls this minute", calls)
	}
	return nil
}

// pgSchema creates a schema for one run in the database at base and
// returns a URL whose search_path is that schema, and a func dropping it.
func pgSchema(ctx context.Context, dataDir, base string) (string, func(), error) {
	admin, err := storage.Open(ctx, storage.Config{DataDir: dataDir, DatabaseURL: base})
	if err != nil {
		return "", nil, fmt.Errorf("postgres: %w", err)
	}
	schema := fmt.Sprintf("bench_%d_%d", time.Now().UnixNano(), time.Now().Nanosecond()%1000)
	if _, err := admin.DB.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("postgres: create schema: %w", err)
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.DB.ExecContext(dctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "bench: drop schema %s: %v\n", schema, err)
		}
		admin.Close()
	}
	u, err := url.Parse(base)
	if err != nil {
		drop()
		return "", nil, err
	}
	qv := u.Query()
	qv.Set("search_path", schema)
	u.RawQuery = qv.Encode()
	return u.String(), drop, nil
}
