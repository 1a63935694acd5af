package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"
)

// SQLNoticesOptions configure NewSQLNotices.
type SQLNoticesOptions struct {
	// DB writes the rows. Required.
	DB *bun.DB
	// Reader reads them. Default DB.
	Reader *bun.DB
	// Local delivers in this process (its subscribers, its gaps) and names
	// this process's rows (its Node). Required.
	Local Bus
	// Table holds the rows: id (ascending: an identity or autoincrement
	// key), node, payload and created_at columns. Required.
	Table string
	// Topic is the one topic carried through the table; the others travel
	// on Local only. Required.
	Topic string
	// Interval is how often Start reads. Default 1 s.
	Interval time.Duration
	// Batch is the number of rows one query reads; a read goes on with the
	// next batch until it has caught up. Default 1000.
	Batch int
	// GapWait is how long an id missing below the highest one read is
	// looked for again before it is given up with a gap. Default two
	// intervals.
	GapWait time.Duration
	// MaxMissing bounds the missing ids tracked; more signal a gap at once.
	// Default 1000.
	MaxMissing int
	// Logger receives read failures and gaps. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// SQLNotices carries the notices of one topic between processes that share
// a database but no bus (SQLite, whose bus is in process, or a deployment
// run with the local bus): an operator command run in a process of its own
// reaches the serving process through it. It is a Bus: Publish delivers on
// Local and, for Topic, also writes a row; Poll reads the rows other
// processes wrote and delivers them on Local.
//
// A notice must be published after the change it announces has committed
// (so its row's id is taken after the change is visible). Then a gap
// covers every notice whose id was taken before it, and that is what makes
// reading safe where ids are not handed out in commit order (PostgreSQL
// allocates identities before commit, and a rolled-back insert leaves an
// id that never appears): a read catches up completely, however many rows
// were written (no per-read cap another process could outrun); an id
// missing below the highest one read is looked for again on every read,
// and when it has not appeared within GapWait (or too many are missing, or
// a read fails) a gap is signalled, so a subscriber that caches drops
// everything it held.
//
// Healthy is false until the first read, while reads fail, and when the
// last complete read is three intervals old.
type SQLNotices struct {
	o      SQLNoticesOptions
	node   string
	ok     atomic.Bool
	caught atomic.Int64 // unix nanoseconds of the last caught-up read
	epoch  atomic.Uint64

	mu     sync.Mutex
	gaps   map[int]func()
	nextID int

	// read state, owned by Poll (one at a time)
	pollMu  sync.Mutex
	started bool
	max     int64               // highest id read
	missing map[int64]time.Time // ids below max not read yet, and since when

	runMu sync.Mutex
	stop  context.CancelFunc
	done  chan struct{}
}

// NewSQLNotices returns the writer and reader of notices; Start (or Poll)
// reads those of other processes: only a process that acts on them needs
// to.
func NewSQLNotices(o SQLNoticesOptions) (*SQLNotices, error) {
	if o.DB == nil || o.Local == nil || o.Table == "" {
		return nil, errors.New("cluster: SQL notices need DB, Local and Table")
	}
	if err := ValidTopic(o.Topic); err != nil {
		return nil, err
	}
	if o.Reader == nil {
		o.Reader = o.DB
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Batch <= 0 {
		o.Batch = 1000
	}
	if o.GapWait <= 0 {
		o.GapWait = 2 * o.Interval
	}
	if o.MaxMissing <= 0 {
		o.MaxMissing = 1000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &SQLNotices{o: o, node: o.Local.Node(), gaps: map[int]func(){}, missing: map[int64]time.Time{}}, nil
}

// Start reads once (before it returns; until a read succeeds the notices
// are unhealthy) and then every Interval until Close.
func (n *SQLNotices) Start() {
	n.runMu.Lock()
	defer n.runMu.Unlock()
	if n.stop != nil {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	n.stop, n.done = stop, make(chan struct{})
	_ = n.Poll(ctx)
	go func() {
		defer close(n.done)
		t := time.NewTicker(n.o.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_ = n.Poll(ctx)
		}
	}()
}

type noticeRow struct {
	ID      int64  `bun:"id"`
	Node    string `bun:"node"`
	Payload string `bun:"payload"`
}

// Poll is one read: the first finds where the rows end; each later one
// delivers every row other processes wrote since, batch after batch until
// it has caught up, and the late rows of ids it found missing before. A
// failure, or an id given up, signals a gap.
func (n *SQLNotices) Poll(ctx context.Context) error {
	n.pollMu.Lock()
	defer n.pollMu.Unlock()
	err := n.read(ctx)
	if err != nil {
		if ctx.Err() == nil && n.ok.Swap(false) {
			n.o.Logger.Warn("cluster: cannot read other processes' notices; treated as a gap", "table", n.o.Table, "err", err)
			n.gap()
		}
		return err
	}
	n.caught.Store(n.o.Now().UnixNano())
	if !n.ok.Swap(true) && n.started {
		// Back after a failure: rows may have been missed (or purged)
		// meanwhile. The gap covers every id taken so far.
		n.gap()
		clear(n.missing)
	}
	n.started = true
	return nil
}

func (n *SQLNotices) query(ctx context.Context, fn func(ctx context.Context) error) error {
	qctx, cancel := context.WithTimeout(ctx, 2*n.o.Interval)
	defer cancel()
	return fn(qctx)
}

func (n *SQLNotices) read(ctx context.Context) error {
	if !n.started {
		var last int64
		err := n.query(ctx, func(ctx context.Context) error {
			return n.o.Reader.NewSelect().Table(n.o.Table).ColumnExpr("COALESCE(MAX(id), 0)").Scan(ctx, &last)
		})
		if err != nil {
			return fmt.Errorf("cluster: read %s: %w", n.o.Table, err)
		}
		n.max = last
		return nil
	}
	// Late rows first: ids skipped by an earlier read.
	if len(n.missing) > 0 {
		ids := make([]int64, 0, len(n.missing))
		for id := range n.missing {
			ids = append(ids, id)
		}
		var rows []noticeRow
		err := n.query(ctx, func(ctx context.Context) error {
			return n.o.Reader.NewSelect().Table(n.o.Table).Column("id", "node", "payload").
				Where("id IN (?)", bun.In(ids)).OrderExpr("id").Scan(ctx, &rows)
		})
		if err != nil {
			return fmt.Errorf("cluster: read %s: %w", n.o.Table, err)
		}
		for _, r := range rows {
			if _, ok := n.missing[r.ID]; ok {
				delete(n.missing, r.ID)
				n.deliver(ctx, r)
			}
		}
	}
	overflow := false
	for {
		var rows []noticeRow
		err := n.query(ctx, func(ctx context.Context) error {
			return n.o.Reader.NewSelect().Table(n.o.Table).Column("id", "node", "payload").
				Where("id > ?", n.max).OrderExpr("id").Limit(int64(n.o.Batch)).Scan(ctx, &rows)
		})
		if err != nil {
			return fmt.Errorf("cluster: read %s: %w", n.o.Table, err)
		}
		now := n.o.Now()
		for _, r := range rows {
			if r.ID <= n.max {
				continue
			}
			// Ids skipped here may still commit (or were rolled back).
			if skipped := r.ID - n.max - 1; skipped > 0 {
				if overflow || int64(len(n.missing))+skipped > int64(n.o.MaxMissing) {
					overflow = true
				} else {
					for id := n.max + 1; id < r.ID; id++ {
						n.missing[id] = now
					}
				}
			}
			n.max = r.ID
			n.deliver(ctx, r)
		}
		if len(rows) < n.o.Batch {
			break
		}
	}
	expired := 0
	now := n.o.Now()
	for id, since := range n.missing {
		if now.Sub(since) >= n.o.GapWait {
			expired++
			delete(n.missing, id)
		}
	}
	if overflow || expired > 0 {
		n.o.Logger.Info("cluster: notice ids missing (rolled back, or committing late); treated as a gap",
			"table", n.o.Table, "given_up", expired, "too_many", overflow)
		// The gap covers every id taken before now, missing or not.
		n.gap()
		clear(n.missing)
	}
	return nil
}

func (n *SQLNotices) deliver(ctx context.Context, r noticeRow) {
	if r.Node != n.node {
		_ = n.o.Local.Publish(ctx, n.o.Topic, []byte(r.Payload))
	}
}

// Missing is the number of ids below the highest one read that have not
// been read yet (and not given up).
func (n *SQLNotices) Missing() int {
	n.pollMu.Lock()
	defer n.pollMu.Unlock()
	return len(n.missing)
}

func (n *SQLNotices) gap() {
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

// Publish delivers payload here and, for Topic, writes it for the other
// processes.
func (n *SQLNotices) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := checkMessage(topic, payload); err != nil {
		return err
	}
	err := n.o.Local.Publish(ctx, topic, payload)
	if topic != n.o.Topic {
		return err
	}
	_, werr := n.o.DB.NewRaw("INSERT INTO ? (node, payload, created_at) VALUES (?, ?, ?)",
		bun.Ident(n.o.Table), n.node, string(payload), time.Now().UTC()).Exec(ctx)
	if werr != nil {
		n.o.Logger.Warn("cluster: notice not written for other processes", "table", n.o.Table, "payload", string(payload), "err", werr)
		return fmt.Errorf("cluster: write notice: %w", werr)
	}
	return err
}

func (n *SQLNotices) Subscribe(topic string, h Handler) func() { return n.o.Local.Subscribe(topic, h) }

// OnGap registers fn for the gaps of Local and of the reads.
func (n *SQLNotices) OnGap(fn func()) func() {
	if fn == nil {
		return func() {}
	}
	unlocal := n.o.Local.OnGap(fn)
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

// Healthy is false while reads fail or lag three intervals behind.
func (n *SQLNotices) Healthy() bool {
	if !n.o.Local.Healthy() || !n.ok.Load() {
		return false
	}
	return n.o.Now().Sub(time.Unix(0, n.caught.Load())) < 3*n.o.Interval
}

func (n *SQLNotices) Epoch() uint64 { return n.o.Local.Epoch() + n.epoch.Load() }
func (n *SQLNotices) Node() string  { return n.node }

// Close stops reading (Local stays open: it is its owner's to close).
func (n *SQLNotices) Close() error {
	n.runMu.Lock()
	defer n.runMu.Unlock()
	if n.stop != nil {
		n.stop()
		<-n.done
		n.stop = nil
	}
	return nil
}

var _ Bus = (*SQLNotices)(nil)
