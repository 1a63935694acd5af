package storage

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/enclave-mcp/enclave/internal/background"
)

// Account write leases fence the writers of an account against its
// deletion. A call that may write an account's data holds a lease on it
// (Store.WriteLease), recorded as a row of account_write_leases. A row is
// inserted only while the account is not marked deleting, in a statement
// that waits for (and then sees) a concurrent marking; while the account
// is not marked it renews itself, and once it is, renewal is refused and
// the context of every call holding it is cancelled, so the calls stop.
// Account deletion marks the account, then stops the writers and waits
// (Store.FenceWriters) until no row of the account is live before it
// removes anything. So a write either happens while its lease is live,
// before the clean-up (which then removes it), or not at all: a writer
// whose lease ended gets the reason from its context (CheckWrite) and
// writes nothing.
//
// The calls of one account in one process share one row: the first takes
// it, the others join it, and it stays for a short while (writeLeaseLinger)
// after the last one ends, for the account's next call; so a burst of
// calls costs one insert, and the delete happens off the calls' path. A
// lease this process holds implies a live row: the row is deleted only
// after the process dropped the lease, and the lease ends (locally) when
// the row could expire.
//
// Writers outside a call (schedules, lanes, jobs) hold no lease, and need
// none for rows: a row of an account's table references users(id) ON
// DELETE CASCADE, or is written by a statement that checks the owner is
// not marked deleting, so a late insert either fails or is removed with
// the account. Blobs have no such reference: code that writes a blob of
// an account outside a call must take a lease itself (WriteLease with the
// job's name as holder) and CheckWrite just before writing.
//
// The rows are shared through SQL, so the fence holds across replicas.
// Expiry is judged by each replica's clock: FenceWriters counts a lease
// live until WriteLeaseSkew after its expiry, so clocks must agree to
// within that (NTP does far better).

// DefaultWriteLeaseTTL is how long a write lease lasts without renewal
// (Config.WriteLeaseTTL): an account's deletion waits at most this long,
// plus WriteLeaseSkew, for a writer that does not stop.
const DefaultWriteLeaseTTL = 20 * time.Second

// WriteLeaseSkew is how long after its expiry a write lease still counts as
// live for FenceWriters: the largest difference between two replicas'
// clocks that the fence tolerates.
const WriteLeaseSkew = 2 * time.Second

// Errors of write leases.
var (
	// ErrWriteFenced: the account is marked deleting (or is gone), so no
	// lease is given, or the one held was not renewed: nothing more may be
	// written to it.
	ErrWriteFenced = errors.New("storage: the account is being deleted: nothing more may be written to it")
	// ErrWriteLeaseExpired: the lease could not be renewed in time (the
	// database did not answer) and ran out; the call must write nothing
	// more.
	ErrWriteLeaseExpired = errors.New("storage: the write lease ran out before it could be renewed")
	// ErrActiveWriters: FenceWriters gave up while leases on the account
	// were still live.
	ErrActiveWriters = errors.New("storage: calls that may write the account's data are still running")
	// errLeaseReleased is the cause of a call's lease context once the
	// call released it, and of a shared lease's once it is dropped.
	errLeaseReleased = errors.New("storage: the write lease was released")
)

// maxHolder bounds the holder recorded with a lease.
const maxHolder = 128

// WriteLeaseTTL is the time to live of the write leases this store gives.
func (s *Store) WriteLeaseTTL() time.Duration {
	if s.leaseTTL <= 0 {
		return DefaultWriteLeaseTTL
	}
	return s.leaseTTL
}

// writeLeaseLinger is how long an account's lease row stays after its last
// call ended, for the account's next call.
func (s *Store) writeLeaseLinger() time.Duration { return min(2*time.Second, s.WriteLeaseTTL()/4) }

// leaseSharing is off only in tests that need a row per lease.
var leaseSharing = true

// leaseSet is the leases a Store holds, by account.
type leaseSet struct {
	mu sync.Mutex
	m  map[int64]*sharedLease
	// writing runs the writes of leases in the background: the deletes
	// of dropped leases' rows (dropLocked), and the renewals (renew, on
	// their timers). Close waits for them before the database closes, and
	// none starts after it.
	writing background.Group
}

// sharedLease is one lease row, held by the calls of its account in this
// process. Fields below mu are guarded by the Store's leaseSet.mu.
type sharedLease struct {
	store *Store
	owner Owner
	token string
	ttl   time.Duration
	// ready is closed once the row is inserted or refused (err).
	ready chan struct{}
	err   error
	// ctx ends when the lease does: ErrWriteFenced, ErrWriteLeaseExpired,
	// or errLeaseReleased once dropped.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// expires is the row's expiry (Unix nanoseconds): past it, the lease
	// is over whether or not its timer has fired yet.
	expires atomic.Int64

	// mu
	users     int         // calls holding it (and joining it)
	renewal   *time.Timer // the next renewal
	lingerGen int         // identifies the current linger timer
	linger    *time.Timer // drops the idle lease
	dropped   bool        // out of the set, row deleted (or left to expire)
}

// callLease is one call's hold on a shared lease.
type callLease struct {
	shared *sharedLease
	ctx    context.Context
}

type leaseKey struct{}

// WriteLease takes a write lease on o's data for holder (a capability's
// name, recorded with the lease) and returns a context that carries it and
// the function that releases it (call it once the writes are done; more
// calls do nothing). The context is cancelled when the lease ends early:
// CheckWrite then returns ErrWriteFenced (the account is being deleted)
// or ErrWriteLeaseExpired.
//
// It returns ErrWriteFenced when o is marked deleting or gone. When ctx
// already carries a live lease on o (a call made from within another call
// of the same account), that lease is used: ctx is returned as it is,
// with a release that does nothing. Take it outside any transaction on
// the primary database (on SQLite it may write through the one writer
// connection).
func (s *Store) WriteLease(ctx context.Context, o Owner, holder string) (context.Context, func(), error) {
	if cl := callLeaseFrom(ctx); cl != nil && cl.shared.owner.ID == o.ID {
		if err := CheckWrite(ctx); err != nil {
			return nil, nil, err
		}
		return ctx, func() {}, nil
	}
	sl, err := s.joinLease(ctx, o, holder)
	if err != nil {
		return nil, nil, err
	}
	cl := &callLease{shared: sl}
	cctx, cancel := context.WithCancelCause(context.WithValue(ctx, leaseKey{}, cl))
	cl.ctx = cctx
	stop := context.AfterFunc(sl.ctx, func() { cancel(context.Cause(sl.ctx)) })
	var once sync.Once
	return cctx, func() {
		once.Do(func() {
			stop()
			cancel(errLeaseReleased)
			s.leaveLease(sl)
		})
	}, nil
}

// joinLease returns o's shared lease, with one more user: the live one
// this process holds, or a new one.
func (s *Store) joinLease(ctx context.Context, o Owner, holder string) (*sharedLease, error) {
	ls := &s.leases
	ls.mu.Lock()
	if ls.m == nil {
		ls.m = map[int64]*sharedLease{}
	}
	if sl := ls.m[o.ID]; sl != nil && leaseSharing {
		sl.users++
		sl.stopLinger()
		ls.mu.Unlock()
		select {
		case <-sl.ready:
		case <-ctx.Done():
			s.leaveLease(sl)
			return nil, ctx.Err()
		}
		if sl.err != nil {
			s.leaveLease(sl)
			return nil, sl.err
		}
		if err := sl.over(); err != nil { // fenced, or ran out just now
			s.leaveLease(sl)
			return nil, err
		}
		return sl, nil
	}
	if len(holder) > maxHolder {
		holder = holder[:maxHolder]
	}
	ttl := s.WriteLeaseTTL()
	now := time.Now().UTC()
	expires := now.Add(ttl)
	sl := &sharedLease{store: s, owner: o, token: rand.Text(), ttl: ttl, ready: make(chan struct{}), users: 1}
	sl.expires.Store(expires.UnixNano())
	sl.ctx, sl.cancel = context.WithCancelCause(context.Background())
	if leaseSharing {
		ls.m[o.ID] = sl
	}
	ls.mu.Unlock()

	// The account's row is share-locked on PostgreSQL, so the insert waits
	// for a marking in flight and then sees it (a marking that starts
	// later waits for this statement instead). SQLite runs one write at a
	// time anyway. Other calls may be waiting for this insert: the
	// caller's cancellation does not stop it.
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), SQLiteBusyTimeout)
	res, err := s.DB.ExecContext(ictx, "INSERT INTO account_write_leases (token, user_id, holder, acquired_at, expires_at) "+
		"SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM users WHERE id = ? AND deleting_at IS NULL"+s.shareLock()+")",
		sl.token, o.ID, holder, now, expires, o.ID)
	cancel()
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	switch {
	case err != nil:
		sl.err = fmt.Errorf("storage: take write lease: %w", err)
	case n != 1:
		sl.err = ErrWriteFenced
	}
	ls.mu.Lock()
	if sl.err != nil {
		// No row: out of the set, so that the next call tries again.
		sl.dropped = true
		if ls.m[o.ID] == sl {
			delete(ls.m, o.ID)
		}
		sl.cancel(sl.err)
	} else {
		sl.renewal = time.AfterFunc(sl.renewEvery(), func() { ls.writing.Go(sl.renew) })
	}
	ls.mu.Unlock()
	close(sl.ready)
	if sl.err != nil {
		s.leaveLease(sl)
		return nil, sl.err
	}
	if err := sl.over(); err != nil { // fenced while it was being taken
		s.leaveLease(sl)
		return nil, err
	}
	return sl, nil
}

// leaveLease takes one user off sl. The last one out of a lease that has
// ended drops it now; of a live lease, after writeLeaseLinger.
func (s *Store) leaveLease(sl *sharedLease) {
	ls := &s.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	sl.users--
	if sl.users > 0 || sl.dropped {
		return
	}
	if sl.ctx.Err() != nil || !leaseSharing {
		sl.dropLocked()
		return
	}
	sl.lingerGen++
	gen := sl.lingerGen
	sl.linger = time.AfterFunc(s.writeLeaseLinger(), func() {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if sl.users == 0 && sl.lingerGen == gen && !sl.dropped {
			sl.dropLocked()
		}
	})
}

// stopLinger cancels a pending drop of an idle lease (mu held).
func (sl *sharedLease) stopLinger() {
	if sl.linger != nil {
		sl.linger.Stop()
		sl.linger = nil
	}
	sl.lingerGen++
}

// dropLocked takes sl out of the set, ends it and deletes its row (mu
// held; the delete runs on its own, unless the store is closing). A row
// whose delete fails (or is not made) expires.
func (sl *sharedLease) dropLocked() {
	ls := &sl.store.leases
	sl.dropped = true
	if ls.m[sl.owner.ID] == sl {
		delete(ls.m, sl.owner.ID)
	}
	sl.stopLinger()
	if sl.renewal != nil {
		sl.renewal.Stop()
	}
	sl.cancel(errLeaseReleased)
	ls.writing.Go(sl.deleteRow) // not once the store closes: the row expires
}

func (sl *sharedLease) deleteRow() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = sl.store.DB.NewDelete().Table("account_write_leases").Where("token = ?", sl.token).Exec(ctx)
}

func (sl *sharedLease) renewEvery() time.Duration { return max(sl.ttl/3, time.Millisecond) }

// renew extends the lease while the account is not marked deleting, and
// ends it early (cancelling its calls' contexts) when it is, or when
// renewals failed until the lease ran out. It runs on leaseSet.writing.
func (sl *sharedLease) renew() {
	ls := &sl.store.leases
	ls.mu.Lock()
	if sl.dropped || sl.ctx.Err() != nil {
		ls.mu.Unlock()
		return
	}
	ls.mu.Unlock()
	expires := time.Unix(0, sl.expires.Load())
	if !time.Now().Before(expires) {
		sl.expire()
		return
	}
	next := time.Now().UTC().Add(sl.ttl)
	// Bounded by the current expiry: a renewal that has not answered by
	// then is a failed one.
	ctx, cancel := context.WithDeadline(context.Background(), expires)
	res, err := sl.store.DB.ExecContext(ctx, "UPDATE account_write_leases SET expires_at = ? WHERE token = ? "+
		"AND EXISTS (SELECT 1 FROM users WHERE id = ? AND deleting_at IS NULL"+sl.store.shareLock()+")",
		next, sl.token, sl.owner.ID)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	cancel()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if sl.dropped {
		return
	}
	switch {
	case err == nil && n == 1:
		sl.expires.Store(next.UnixNano())
		sl.renewal.Reset(sl.renewEvery())
	case err == nil:
		// Marked deleting (or the row is gone): stop the calls now. The
		// row stays until the last of them returns, so that the deletion
		// waits for writes in flight.
		sl.endLocked(ErrWriteFenced)
	default:
		if wait := min(sl.renewEvery(), time.Until(expires)); wait > 0 {
			sl.renewal.Reset(wait)
			return
		}
		sl.endLocked(ErrWriteLeaseExpired)
	}
}

func (sl *sharedLease) expire() {
	ls := &sl.store.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if !sl.dropped {
		sl.endLocked(ErrWriteLeaseExpired)
	}
}

// endLocked ends a lease early (mu held): its calls stop, and it leaves the
// set, so the account's next call asks the database afresh (refused while
// the account is marked deleting). Its row goes once its last call has
// returned.
func (sl *sharedLease) endLocked(cause error) {
	sl.cancel(cause)
	if ls := &sl.store.leases; ls.m[sl.owner.ID] == sl {
		delete(ls.m, sl.owner.ID)
	}
	if sl.users == 0 {
		sl.dropLocked()
	}
}

// dropWriteLeases drops every lease this store holds (at Close): their
// calls stop, and their rows are deleted now rather than left to expire.
// It waits for the deletes already running: none writes once the
// database has closed (or a test's PostgreSQL schema is being dropped).
func (s *Store) dropWriteLeases() error {
	ls := &s.leases
	ls.mu.Lock()
	held := make([]*sharedLease, 0, len(ls.m))
	for _, sl := range ls.m {
		select {
		case <-sl.ready: // one still being taken is its caller's to finish
			held = append(held, sl)
		default:
		}
	}
	for _, sl := range held {
		sl.dropped = true
		delete(ls.m, sl.owner.ID)
		sl.stopLinger()
		if sl.renewal != nil {
			sl.renewal.Stop()
		}
		sl.cancel(errLeaseReleased)
	}
	ls.mu.Unlock()
	for _, sl := range held {
		sl.deleteRow()
	}
	ls.writing.Close() // the deletes of leases dropped meanwhile, renewals
	return nil
}

// CheckWrite reports whether a write may start under the write lease ctx
// carries: nil while it is live, otherwise why not (ErrWriteFenced,
// ErrWriteLeaseExpired, or the context's own cancellation). A context
// without a lease is not checked (nil): code that takes no lease is not
// fenced. Blob writers call it just before writing, and write with ctx,
// so that a write cut short by the lease's end is abandoned too.
func CheckWrite(ctx context.Context) error {
	cl := callLeaseFrom(ctx)
	if cl == nil {
		return nil
	}
	if err := cl.shared.over(); err != nil && !errors.Is(err, errLeaseReleased) {
		return err
	}
	if cl.ctx.Err() != nil {
		return context.Cause(cl.ctx)
	}
	return nil
}

// over returns why the lease is over, or nil while it is live.
func (sl *sharedLease) over() error {
	if sl.ctx.Err() != nil {
		return context.Cause(sl.ctx)
	}
	if time.Now().UnixNano() >= sl.expires.Load() {
		return ErrWriteLeaseExpired
	}
	return nil
}

func callLeaseFrom(ctx context.Context) *callLease {
	cl, _ := ctx.Value(leaseKey{}).(*callLease)
	return cl
}

// shareLock is the locking clause that makes a lease statement wait for a
// concurrent update of the account's row (its marking).
func (s *Store) shareLock() string {
	if s.dialect == Postgres {
		return " FOR SHARE"
	}
	return ""
}

// FenceWriters stops the writers of o and waits until they are done. Call
// it once o is marked deleting, before removing any of its data. It ends
// the lease this process holds on o at once (its calls' contexts are
// cancelled with ErrWriteFenced; an idle one's row goes now), then waits
// until no write lease on o is live in the database: every one released,
// or expired for longer than WriteLeaseSkew. Other replicas' leases end
// at their next renewal, which is refused, and none can be taken after
// the marking, so the wait ends within WriteLeaseTTL plus WriteLeaseSkew
// even for a call that never returns. It returns ErrActiveWriters when
// leases are still live after wait, and ctx's error when ctx ends first.
func (s *Store) FenceWriters(ctx context.Context, o Owner, wait time.Duration) error {
	ls := &s.leases
	ls.mu.Lock()
	if sl := ls.m[o.ID]; sl != nil {
		sl.endLocked(ErrWriteFenced)
	}
	ls.mu.Unlock()
	deadline := time.Now().Add(wait)
	poll := 10 * time.Millisecond
	for {
		now := time.Now()
		var last time.Time
		err := s.DB.NewSelect().Table("account_write_leases").Column("expires_at").
			Where("user_id = ?", o.ID).Where("expires_at > ?", now.Add(-WriteLeaseSkew).UTC()).
			OrderExpr("expires_at DESC").Limit(1).Scan(ctx, &last)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("storage: wait for writers: %w", err)
		}
		if !now.Before(deadline) {
			return ErrActiveWriters
		}
		// Until the next poll (a release ends the wait early), the last
		// lease's expiry, or the deadline, whichever comes first.
		d := max(min(poll, time.Until(last.Add(WriteLeaseSkew)), time.Until(deadline)), time.Millisecond)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		poll = min(2*poll, 250*time.Millisecond)
	}
}
