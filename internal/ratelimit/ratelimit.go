// Package ratelimit counts requests per bucket in SQL (the rate_limit_hits
// table, which it owns), so every replica sharing the database shares a
// limit. The web shell's credential endpoints share one per-client bucket
// through it, and the OAuth client registration endpoint has its own.
package ratelimit

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
)

// Limit is a rate limit: at most Requests in any Window.
type Limit struct {
	// Requests is how many requests a bucket admits per Window. Default
	// DefaultRequests (10).
	Requests int
	// Window is the length of the sliding window. Default
	// DefaultWindow (60 s).
	Window time.Duration
}

// Defaults of a Limit (those of the shared credential bucket).
const (
	DefaultRequests = 10
	DefaultWindow   = time.Minute
)

// WithDefaults fills the zero fields with DefaultRequests and
// DefaultWindow.
func (l Limit) WithDefaults() Limit {
	if l.Requests <= 0 {
		l.Requests = DefaultRequests
	}
	if l.Window <= 0 {
		l.Window = DefaultWindow
	}
	return l
}

// Decision is the outcome of one rate-limit check.
type Decision struct {
	// Allowed reports whether the request was admitted (and counted).
	Allowed bool
	// Remaining is how many more requests the bucket admits now.
	Remaining int
	// RetryAfter is, for a refused request, how long until the bucket admits
	// one again. Zero when Allowed.
	RetryAfter time.Duration
}

// Limiter counts requests per bucket in SQL, so every replica sharing the
// database shares the limit. It is a sliding log: each admitted request is
// one row, and a request is admitted when fewer than Limit.Requests rows of
// its bucket are younger than Limit.Window. Refused requests are not
// recorded, so RetryAfter is exact: it is when the oldest counted request
// leaves the window.
//
// The check and the insert run in one transaction that is serialized per
// bucket (SQLite takes the database write lock at BEGIN; PostgreSQL takes a
// transaction-scoped advisory lock on the bucket), so concurrent requests
// from any number of replicas never admit more than the limit.
type Limiter struct {
	store     *storage.Store
	now       func() time.Time
	lastSweep atomic.Int64 // Unix ms of the last sweep of expired rows
}

// New returns a limiter on store's SQL database. now is the clock (nil:
// time.Now).
func New(store *storage.Store, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{store: store, now: now}
}

// sweepEvery bounds how often Allow deletes the expired rows of every
// bucket.
const sweepEvery = time.Minute

// maxSweptWindow is how old a row must be before a sweep deletes it: rows
// younger than the longest window anyone should configure are kept.
const maxSweptWindow = 24 * time.Hour

// Allow checks and, when admitted, counts one request against bucket.
func (l *Limiter) Allow(ctx context.Context, bucket string, lim Limit) (Decision, error) {
	lim = lim.WithDefaults()
	now := l.now()
	nowMS := now.UnixMilli()
	since := nowMS - lim.Window.Milliseconds()
	var d Decision
	err := l.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if l.store.Dialect() == storage.Postgres {
			if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(?)", lockKey(bucket)); err != nil {
				return fmt.Errorf("lock bucket: %w", err)
			}
		}
		if _, err := tx.NewDelete().Table("rate_limit_hits").
			Where("bucket = ?", bucket).Where("at_ms <= ?", since).Exec(ctx); err != nil {
			return fmt.Errorf("expire hits: %w", err)
		}
		var stat struct {
			N      int   `bun:"n"`
			Oldest int64 `bun:"oldest"`
		}
		if err := tx.NewSelect().Table("rate_limit_hits").
			ColumnExpr("count(*) AS n").ColumnExpr("coalesce(min(at_ms), 0) AS oldest").
			Where("bucket = ?", bucket).Scan(ctx, &stat); err != nil {
			return fmt.Errorf("count hits: %w", err)
		}
		if stat.N >= lim.Requests {
			// The window may also hold hits stamped later than now by a
			// replica whose clock runs ahead; wait at least a second.
			wait := time.Duration(stat.Oldest-since) * time.Millisecond
			d = Decision{RetryAfter: max(wait, time.Second)}
			return nil
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO rate_limit_hits (bucket, at_ms) VALUES (?, ?)", bucket, nowMS); err != nil {
			return fmt.Errorf("record hit: %w", err)
		}
		d = Decision{Allowed: true, Remaining: lim.Requests - stat.N - 1}
		return nil
	})
	if err != nil {
		return Decision{}, fmt.Errorf("ratelimit: %s: %w", bucket, err)
	}
	l.maybeSweep(ctx, now)
	return d, nil
}

// maybeSweep deletes expired rows of every bucket, at most once per
// sweepEvery per process. A failure is harmless (the next sweep retries) and
// is not reported.
func (l *Limiter) maybeSweep(ctx context.Context, now time.Time) {
	last := l.lastSweep.Load()
	if now.UnixMilli()-last < sweepEvery.Milliseconds() || !l.lastSweep.CompareAndSwap(last, now.UnixMilli()) {
		return
	}
	_ = l.Sweep(ctx, now.Add(-maxSweptWindow))
}

// Sweep deletes every counted request older than before, from all buckets.
func (l *Limiter) Sweep(ctx context.Context, before time.Time) error {
	if _, err := l.store.DB.NewDelete().Table("rate_limit_hits").
		Where("at_ms < ?", before.UnixMilli()).Exec(ctx); err != nil {
		return fmt.Errorf("ratelimit: sweep: %w", err)
	}
	return nil
}

// lockKey maps a bucket name to a PostgreSQL advisory-lock key.
func lockKey(bucket string) int64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte("enclave/rate-limit\x00" + bucket))
	return int64(f.Sum64() & math.MaxInt64)
}
