package enclave

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/internal/callercache"
	"github.com/enclave-mcp/enclave/storage"
)

// sqlNoticeInterval is how often a process reads the invalidations other
// processes wrote to caller_invalidations: the longest an operator
// command's change (enclave user suspend, admin revoke, user delete, run in
// a process of its own) can be served from the cache of a running server
// that shares the database but no cluster bus.
const sqlNoticeInterval = time.Second

// sqlNotices carries caller-cache invalidations between processes that
// share a database but not a cluster bus (SQLite, where the bus is
// in-process; or --bus-url local). It is a callercache.Bus: Publish
// delivers on the in-process bus and writes a row; a poller reads the rows
// of other processes and delivers them here. While the poller cannot read
// (or has not read for three intervals) it reports itself unhealthy, so
// the cache serves nothing; the failure and the recovery are gaps (the
// cache is flushed).
type sqlNotices struct {
	local cluster.Bus
	store *storage.Store
	log   *slog.Logger
	node  string

	ok      atomic.Bool
	lastOK  atomic.Int64 // unix nanoseconds of the last successful read
	epoch   atomic.Uint64
	mu      sync.Mutex
	gaps    map[int]func()
	nextID  int
	last    int64              // highest row id read
	applied map[int64]struct{} // ids above last-lookBehind already delivered

	stop context.CancelFunc
	done chan struct{}
}

// lookBehind is how far below the highest id read each read looks again.
const lookBehind = 64

type invalidationRow struct {
	ID      int64  `bun:"id"`
	Node    string `bun:"node"`
	Payload string `bun:"payload"`
}

// newSQLNotices returns the writer of notices; poll starts reading those
// of other processes (only a process that caches needs to).
func newSQLNotices(store *storage.Store, local cluster.Bus, log *slog.Logger) *sqlNotices {
	return &sqlNotices{local: local, store: store, log: log, node: local.Node(), gaps: map[int]func(){}, applied: map[int64]struct{}{}}
}

// poll reads from the newest row on, every sqlNoticeInterval, until Close.
// The first read runs before poll returns; until one succeeds the bus is
// unhealthy (the cache serves nothing).
func (n *sqlNotices) poll() {
	n.last = -1
	pctx, stop := context.WithCancel(context.Background())
	n.stop, n.done = stop, make(chan struct{})
	n.readOnce(pctx)
	go func() {
		defer close(n.done)
		t := time.NewTicker(sqlNoticeInterval)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			n.readOnce(pctx)
		}
	}()
}

// readOnce delivers the rows other processes wrote since the last read (on
// the first, it only finds where the rows end).
func (n *sqlNotices) readOnce(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 2*sqlNoticeInterval)
	defer cancel()
	var err error
	var rows []invalidationRow
	if n.last < 0 {
		var last int64
		err = n.store.Reader.NewSelect().Table("caller_invalidations").ColumnExpr("COALESCE(MAX(id), 0)").Scan(rctx, &last)
		if err == nil {
			n.last = last
		}
	} else {
		// On PostgreSQL identities are handed out before commit, so a row
		// may become visible after one with a higher id: read a little
		// behind the highest id seen and skip the rows already applied.
		err = n.store.Reader.NewSelect().Table("caller_invalidations").Column("id", "node", "payload").
			Where("id > ?", n.last-lookBehind).OrderExpr("id").Limit(1000).Scan(rctx, &rows)
	}
	if err != nil {
		if ctx.Err() == nil && n.ok.Swap(false) {
			n.log.Warn("enclave: caller cache: cannot read other processes' invalidations; cache bypassed", "err", err)
			n.gap()
		}
		return
	}
	for _, r := range rows {
		if _, done := n.applied[r.ID]; done {
			continue
		}
		n.applied[r.ID] = struct{}{}
		n.last = max(n.last, r.ID)
		if r.Node != n.node {
			_ = n.local.Publish(ctx, callercache.Topic, []byte(r.Payload))
		}
	}
	for id := range n.applied {
		if id <= n.last-lookBehind {
			delete(n.applied, id)
		}
	}
	n.lastOK.Store(time.Now().UnixNano())
	if !n.ok.Swap(true) {
		n.gap() // rows may have been purged meanwhile: start afresh
	}
}

func (n *sqlNotices) gap() {
	n.epoch.Add(1)
	n.mu.Lock()
	fns := make([]func(), 0, len(n.gaps))
	for _, f := range n.gaps {
		fns = append(fns, f)
	}
	n.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// Publish delivers payload here and writes it for the other processes.
func (n *sqlNotices) Publish(ctx context.Context, topic string, payload []byte) error {
	err := n.local.Publish(ctx, topic, payload)
	if topic != callercache.Topic {
		return err
	}
	_, werr := n.store.DB.NewRaw("INSERT INTO caller_invalidations (node, payload, created_at) VALUES (?, ?, ?)",
		n.node, string(payload), time.Now().UTC()).Exec(ctx)
	if werr != nil {
		n.log.Warn("enclave: caller cache: invalidation not written for other processes", "payload", string(payload), "err", werr)
		return werr
	}
	return err
}

func (n *sqlNotices) Subscribe(topic string, h func(topic string, payload []byte)) func() {
	return n.local.Subscribe(topic, cluster.Handler(h))
}

func (n *sqlNotices) OnGap(fn func()) func() {
	unlocal := n.local.OnGap(fn)
	n.mu.Lock()
	n.nextID++
	id := n.nextID
	n.gaps[id] = fn
	n.mu.Unlock()
	return func() {
		unlocal()
		n.mu.Lock()
		delete(n.gaps, id)
		n.mu.Unlock()
	}
}

// Healthy is false while the poller fails or lags three intervals behind.
func (n *sqlNotices) Healthy() bool {
	if !n.local.Healthy() || !n.ok.Load() {
		return false
	}
	return time.Since(time.Unix(0, n.lastOK.Load())) < 3*sqlNoticeInterval
}

func (n *sqlNotices) Epoch() uint64 { return n.local.Epoch() + n.epoch.Load() }

// Close stops the poller.
func (n *sqlNotices) Close() {
	if n.stop != nil {
		n.stop()
		<-n.done
	}
}

var _ callercache.Bus = (*sqlNotices)(nil)
