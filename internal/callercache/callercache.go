// Package callercache keeps verified bearer tokens' callers in process, so
// that a call whose token was checked moments ago does not pay the SQL
// round trip of the check again, without ever serving a revoked token or a
// caller whose roles, permissions or account state changed.
//
// Entries are keyed by the SHA-256 of the token (the token itself is not
// kept) and carry the account and the grant they depend on. They go away:
//
//   - synchronously, on the replica where the change is written, through
//     Invalidator.UserChanged, GrantRevoked or All, called after the
//     writing transaction commits;
//   - on every other replica, through the cluster bus those calls publish
//     on (Attach);
//   - when the bus reports a gap (it may have dropped messages): every
//     entry is dropped, and while the bus is not healthy the cache neither
//     serves nor stores anything;
//   - after the TTL (less up to a fifth, spread by token so that entries
//     loaded together do not expire together; never later than the
//     token's own expiry), whatever happened.
//
// A load that raced with an invalidation is not stored: Begin samples an
// invalidation counter and the bus epoch before the SQL read, and Put
// stores only if neither moved meanwhile. So a read that saw the rows as
// they were before a change committed can never outlive the change's
// invalidation.
package callercache

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/enclave-mcp/enclave/internal/background"
)

// DefaultTTL is how long an entry lives when the configuration says 0.
const DefaultTTL = 30 * time.Second

// DefaultMaxEntries bounds the entries kept when Options says 0.
const DefaultMaxEntries = 100_000

// Bus is what the cache needs of the cluster bus (package cluster's Bus
// satisfies it through an adapter): publish and subscribe small notices,
// and say when messages may have been missed.
type Bus interface {
	Publish(ctx context.Context, topic string, payload []byte) error
	Subscribe(topic string, h func(topic string, payload []byte)) (cancel func())
	OnGap(fn func()) (cancel func())
	Healthy() bool
	Epoch() uint64
}

// Topic is the bus topic of caller invalidations. Payloads are "u:<id>"
// (an account changed), "g:<grant id>" (a grant or its tokens were
// revoked) and "*" (everything: a role's permissions, a client's block).
const Topic = "caller.invalidate"

// Options configure a Cache.
type Options struct {
	// TTL bounds an entry's life. 0 means DefaultTTL; negative disables
	// the cache (every Get misses, Put stores nothing).
	TTL time.Duration
	// MaxEntries bounds memory. 0 means DefaultMaxEntries.
	MaxEntries int
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

type key [sha256.Size]byte

type entry[V any] struct {
	v       V
	user    int64
	grant   string
	expires time.Time
}

// Cache maps token hashes to values of type V (a verified token's caller).
// It is safe for concurrent use.
type Cache[V any] struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu      sync.RWMutex
	entries map[key]*entry[V]
	byUser  map[int64]map[key]struct{}
	byGrant map[string]map[key]struct{}
	seq     uint64 // bumped by every invalidation, under mu

	bus atomic.Pointer[busRef]

	hits, misses, invalidations atomic.Int64
}

// busRef is the bus a cache is attached to, with the retries of the
// invalidations that failed to publish on it (invalidate), each on a
// goroutine of its own. Detaching cancels them and waits for them: each
// writes through the bus (with SQL notices, to the database), which its
// owner closes once the cache is detached. None starts after that.
type busRef struct {
	b       Bus
	stop    context.Context // cancelled when detached
	cancel  context.CancelFunc
	retries background.Group
}

// New returns an empty cache.
func New[V any](o Options) *Cache[V] {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Cache[V]{ttl: o.TTL, max: o.MaxEntries, now: o.Now, entries: map[key]*entry[V]{},
		byUser: map[int64]map[key]struct{}{}, byGrant: map[string]map[key]struct{}{}}
}

// Enabled reports whether the cache stores anything at all.
func (c *Cache[V]) Enabled() bool { return c != nil && c.ttl > 0 }

// TTL is the longest an entry lives.
func (c *Cache[V]) TTL() time.Duration { return c.ttl }

func hashToken(token string) key { return sha256.Sum256([]byte(token)) }

// trusted reports whether cached entries may be used now: the cache is on
// and the bus (if any) is receiving other replicas' invalidations.
func (c *Cache[V]) trusted() bool {
	if !c.Enabled() {
		return false
	}
	if r := c.bus.Load(); r != nil && !r.b.Healthy() {
		return false
	}
	return true
}

// Get returns the value cached for token, if there is a live one and the
// cache may be trusted now.
func (c *Cache[V]) Get(token string) (V, bool) {
	var zero V
	if !c.Enabled() {
		return zero, false
	}
	if !c.trusted() {
		c.misses.Add(1) // the bus may be missing invalidations
		return zero, false
	}
	k := hashToken(token)
	now := c.now()
	c.mu.RLock()
	e := c.entries[k]
	c.mu.RUnlock()
	if e == nil || !now.Before(e.expires) {
		c.misses.Add(1)
		return zero, false
	}
	c.hits.Add(1)
	return e.v, true
}

// Ticket is what Begin saw; Put stores only if nothing was invalidated
// since.
type Ticket struct {
	seq   uint64
	epoch uint64
	at    time.Time
	ok    bool
}

// Begin is called before loading what Put will store.
func (c *Cache[V]) Begin() Ticket {
	if !c.trusted() {
		return Ticket{}
	}
	t := Ticket{at: c.now(), ok: true}
	if r := c.bus.Load(); r != nil {
		t.epoch = r.b.Epoch()
	}
	c.mu.RLock()
	t.seq = c.seq
	c.mu.RUnlock()
	return t
}

// Put caches v for token, loaded after t was taken, for account user and
// grant (either may be zero), until the TTL after t or expires, whichever
// is first (a zero expires means the TTL alone). It stores nothing when an
// invalidation or a bus gap happened since Begin, or the bus is unhealthy.
func (c *Cache[V]) Put(t Ticket, token string, user int64, grant string, expires time.Time, v V) {
	if !t.ok || !c.trusted() {
		return
	}
	k := hashToken(token)
	// Up to a fifth off the TTL, differing per token: entries loaded
	// together (a burst of new sessions, a flush) do not all expire in the
	// same instant and send every caller to SQL at once.
	spread := time.Duration(binary.LittleEndian.Uint64(k[:8]) % uint64(c.ttl/5+1))
	end := t.at.Add(c.ttl - spread)
	if !expires.IsZero() && expires.Before(end) {
		end = expires
	}
	if !c.now().Before(end) {
		return
	}
	var epoch uint64
	r := c.bus.Load()
	if r != nil {
		epoch = r.b.Epoch()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seq != t.seq || epoch != t.epoch {
		return
	}
	if old := c.entries[k]; old != nil {
		c.unindex(k, old)
	}
	if len(c.entries) >= c.max {
		c.evict()
	}
	e := &entry[V]{v: v, user: user, grant: grant, expires: end}
	c.entries[k] = e
	if user != 0 {
		addIndex(c.byUser, user, k)
	}
	if grant != "" {
		addIndex(c.byGrant, grant, k)
	}
}

func addIndex[K comparable](m map[K]map[key]struct{}, id K, k key) {
	s := m[id]
	if s == nil {
		s = map[key]struct{}{}
		m[id] = s
	}
	s[k] = struct{}{}
}

func dropIndex[K comparable](m map[K]map[key]struct{}, id K, k key) {
	if s := m[id]; s != nil {
		delete(s, k)
		if len(s) == 0 {
			delete(m, id)
		}
	}
}

func (c *Cache[V]) unindex(k key, e *entry[V]) {
	if e.user != 0 {
		dropIndex(c.byUser, e.user, k)
	}
	if e.grant != "" {
		dropIndex(c.byGrant, e.grant, k)
	}
}

// evict makes room: expired entries first, then any others until a
// sixteenth of the bound is free. Under mu. It walks the whole map, so it
// frees room for many stores at once: a full cache (a flood of distinct
// valid tokens) does not walk it again on every miss while every reader
// waits for the lock.
func (c *Cache[V]) evict() {
	now := c.now()
	for k, e := range c.entries {
		if !now.Before(e.expires) {
			delete(c.entries, k)
			c.unindex(k, e)
		}
	}
	target := c.max - max(1, c.max/16)
	for k, e := range c.entries {
		if len(c.entries) <= target {
			return
		}
		delete(c.entries, k)
		c.unindex(k, e)
	}
}

// Len is the number of entries held (live or not yet swept).
func (c *Cache[V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}

// Stats are counters since New.
type Stats struct{ Hits, Misses, Invalidations int64 }

// Stats returns the counters.
func (c *Cache[V]) Stats() Stats {
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Invalidations: c.invalidations.Load()}
}

// dropUser, dropGrant and Flush change this replica only.
func (c *Cache[V]) dropUser(user int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.invalidations.Add(1)
	for k := range c.byUser[user] {
		if e := c.entries[k]; e != nil {
			delete(c.entries, k)
			c.unindex(k, e)
		}
	}
	delete(c.byUser, user)
}

func (c *Cache[V]) dropGrant(grant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.invalidations.Add(1)
	for k := range c.byGrant[grant] {
		if e := c.entries[k]; e != nil {
			delete(c.entries, k)
			c.unindex(k, e)
		}
	}
	delete(c.byGrant, grant)
}

// Flush drops every entry on this replica.
func (c *Cache[V]) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.invalidations.Add(1)
	clear(c.entries)
	clear(c.byUser)
	clear(c.byGrant)
}

// apply runs one invalidation payload on this replica.
func (c *Cache[V]) apply(payload string) {
	switch {
	case payload == "*":
		c.Flush()
	case strings.HasPrefix(payload, "u:"):
		id, err := strconv.ParseInt(payload[2:], 10, 64)
		if err != nil {
			c.Flush() // unreadable: be safe
			return
		}
		c.dropUser(id)
	case strings.HasPrefix(payload, "g:"):
		c.dropGrant(payload[2:])
	default:
		c.Flush()
	}
}

// Attach subscribes the cache to b's invalidations and gaps, and makes
// every later invalidation publish on b. A gap flushes the cache; while b
// is unhealthy nothing is served or stored. The returned function
// detaches: it also ends the retries of failed publications and waits for
// them, so that nothing is published on b once it has returned.
func (c *Cache[V]) Attach(b Bus) (detach func()) {
	unsub := b.Subscribe(Topic, func(_ string, payload []byte) { c.apply(string(payload)) })
	ungap := b.OnGap(c.Flush)
	ref := &busRef{b: b}
	ref.stop, ref.cancel = context.WithCancel(context.Background())
	c.bus.Store(ref)
	c.Flush() // anything stored before the bus was watched is suspect
	return func() {
		unsub()
		ungap()
		c.bus.CompareAndSwap(ref, nil)
		ref.cancel() // a retry started from now on ends at once
		ref.retries.Close()
	}
}

// UserChanged drops every entry of account user here, then tells the
// other replicas. Call it after the change committed.
func (c *Cache[V]) UserChanged(ctx context.Context, user int64) {
	c.invalidate(ctx, "u:"+strconv.FormatInt(user, 10))
}

// GrantRevoked drops every entry of a grant here, then tells the other
// replicas. Call it after the revocation committed.
func (c *Cache[V]) GrantRevoked(ctx context.Context, grant string) {
	c.invalidate(ctx, "g:"+grant)
}

// All drops every entry on every replica (a role's permissions changed, a
// client was blocked). Call it after the change committed.
func (c *Cache[V]) All(ctx context.Context) { c.invalidate(ctx, "*") }

func (c *Cache[V]) invalidate(ctx context.Context, payload string) {
	if c == nil {
		return
	}
	c.apply(payload) // this replica, synchronously
	r := c.bus.Load()
	if r == nil {
		return
	}
	// The bus runs local subscribers too: applying twice is harmless. One
	// attempt waits at most publishTimeout: the change committed and its
	// caller is waiting for the answer. A failed publish is tried again in
	// the background until it goes through or the TTL, which ends every
	// entry it was meant to drop, has passed; until then the other replicas
	// (whose own bus may look healthy) can serve what it ends.
	ctx = context.WithoutCancel(ctx)
	if c.publish(ctx, r.b, payload) == nil {
		return
	}
	// The retries end when the cache is detached from r (see busRef).
	r.retries.Go(func() {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(r.stop, cancel)()
		deadline := time.Now().Add(c.ttl)
		backoff := 50 * time.Millisecond
		for time.Now().Add(backoff).Before(deadline) {
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			if c.publish(ctx, r.b, payload) == nil {
				return
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	})
}

// publishTimeout bounds one attempt to publish an invalidation.
var publishTimeout = 5 * time.Second

// publish makes one attempt; ctx ends it early (a retry when the cache is
// detached).
func (c *Cache[V]) publish(ctx context.Context, b Bus, payload string) error {
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	return b.Publish(pctx, Topic, []byte(payload))
}
