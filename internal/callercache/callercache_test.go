package callercache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTest(ttl time.Duration) (*Cache[string], *clock) {
	clk := &clock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	return New[string](Options{TTL: ttl, Now: clk.now}), clk
}

func put(c *Cache[string], token string, user int64, grant string, v string) {
	c.Put(c.Begin(), token, user, grant, time.Time{}, v)
}

func TestHitMissAndTTL(t *testing.T) {
	c, clk := newTest(30 * time.Second)
	if _, ok := c.Get("tok"); ok {
		t.Fatal("hit on an empty cache")
	}
	put(c, "tok", 1, "g1", "alice")
	if v, ok := c.Get("tok"); !ok || v != "alice" {
		t.Fatalf("get: %q %v", v, ok)
	}
	if _, ok := c.Get("other"); ok {
		t.Fatal("another token hit")
	}
	clk.add(23 * time.Second)
	if _, ok := c.Get("tok"); !ok {
		t.Fatal("entry gone before four fifths of its TTL")
	}
	clk.add(7 * time.Second)
	if _, ok := c.Get("tok"); ok {
		t.Fatal("entry served at its TTL")
	}
}

// Entries stored together expire at different times, all within the TTL.
func TestExpirySpread(t *testing.T) {
	c, clk := newTest(30 * time.Second)
	tk := c.Begin()
	for i := range 100 {
		c.Put(tk, fmt.Sprint("tok", i), 1, "", time.Time{}, "v")
	}
	ends := map[time.Time]bool{}
	for _, e := range c.entries {
		if e.expires.After(clk.now().Add(30*time.Second)) || e.expires.Before(clk.now().Add(24*time.Second)) {
			t.Fatalf("expiry %v outside [TTL×4/5, TTL]", e.expires.Sub(clk.now()))
		}
		ends[e.expires] = true
	}
	if len(ends) < 50 {
		t.Fatalf("100 entries stored together expire at %d instants", len(ends))
	}
}

func TestNeverOutlivesTheToken(t *testing.T) {
	c, clk := newTest(30 * time.Second)
	c.Put(c.Begin(), "tok", 1, "g", clk.now().Add(5*time.Second), "v")
	clk.add(5 * time.Second)
	if _, ok := c.Get("tok"); ok {
		t.Fatal("entry served after the token expired")
	}
	c.Put(c.Begin(), "late", 1, "g", clk.now(), "v") // already expired
	if c.Len() != 1 {
		t.Fatalf("an expired token was stored: %d entries", c.Len())
	}
}

func TestTTLCountsFromTheLoadNotTheStore(t *testing.T) {
	c, clk := newTest(10 * time.Second)
	tk := c.Begin()
	clk.add(8 * time.Second) // a slow load
	c.Put(tk, "tok", 1, "", time.Time{}, "v")
	clk.add(2 * time.Second)
	if _, ok := c.Get("tok"); ok {
		t.Fatal("entry outlived the TTL counted from its load")
	}
}

func TestInvalidation(t *testing.T) {
	ctx := context.Background()
	c, _ := newTest(time.Minute)
	put(c, "a1", 1, "ga", "a")
	put(c, "a2", 1, "gb", "a")
	put(c, "b1", 2, "gc", "b")
	c.GrantRevoked(ctx, "ga")
	if _, ok := c.Get("a1"); ok {
		t.Fatal("revoked grant's token served")
	}
	if _, ok := c.Get("a2"); !ok {
		t.Fatal("another grant's token dropped")
	}
	c.UserChanged(ctx, 1)
	if _, ok := c.Get("a2"); ok {
		t.Fatal("changed user's token served")
	}
	if _, ok := c.Get("b1"); !ok {
		t.Fatal("another user's token dropped")
	}
	c.All(ctx)
	if c.Len() != 0 {
		t.Fatalf("All left %d entries", c.Len())
	}
	if len(c.byUser) != 0 || len(c.byGrant) != 0 {
		t.Fatalf("indexes not emptied: %v %v", c.byUser, c.byGrant)
	}
}

// A load that started before an invalidation may have read the rows as
// they were before the change: it is not stored.
func TestLoadRacingAnInvalidationIsNotStored(t *testing.T) {
	ctx := context.Background()
	c, _ := newTest(time.Minute)
	tk := c.Begin()
	c.UserChanged(ctx, 7) // committed while the load ran
	c.Put(tk, "tok", 1, "", time.Time{}, "stale")
	if _, ok := c.Get("tok"); ok {
		t.Fatal("a load older than an invalidation was stored")
	}
	put(c, "tok", 1, "", "fresh")
	if v, ok := c.Get("tok"); !ok || v != "fresh" {
		t.Fatal("a load after the invalidation was not stored")
	}
}

func TestDisabled(t *testing.T) {
	c, _ := newTest(-1)
	put(c, "tok", 1, "", "v")
	if _, ok := c.Get("tok"); ok || c.Len() != 0 {
		t.Fatal("a disabled cache stored")
	}
	var nilCache *Cache[string]
	nilCache.Put(nilCache.Begin(), "tok", 1, "", time.Time{}, "v")
	if _, ok := nilCache.Get("tok"); ok {
		t.Fatal("nil cache hit")
	}
	nilCache.UserChanged(context.Background(), 1)
}

func TestBounded(t *testing.T) {
	clk := &clock{t: time.Now()}
	c := New[int](Options{TTL: time.Minute, MaxEntries: 3, Now: clk.now})
	for i := range 10 {
		c.Put(c.Begin(), string(rune('a'+i)), int64(i), "", time.Time{}, i)
	}
	if c.Len() > 3 {
		t.Fatalf("%d entries, bound 3", c.Len())
	}
}

// A full cache of live entries makes room for many stores at once, not one
// at a time (each eviction walks the whole map under the write lock).
func TestEvictionMakesRoomInBatches(t *testing.T) {
	clk := &clock{t: time.Now()}
	const bound = 1600
	c := New[int](Options{TTL: time.Minute, MaxEntries: bound, Now: clk.now})
	for i := range bound {
		c.Put(c.Begin(), fmt.Sprint("tok", i), int64(i), "", time.Time{}, i)
	}
	if c.Len() != bound {
		t.Fatalf("%d entries, want %d", c.Len(), bound)
	}
	c.Put(c.Begin(), "one more", 1, "", time.Time{}, 1)
	if n := c.Len(); n > bound-bound/16+1 {
		t.Fatalf("%d entries after the cache overflowed: room made for one store only", n)
	}
	if _, ok := c.Get("one more"); !ok {
		t.Fatal("the new entry was not stored")
	}
}

// fakeBus is an in-process bus shared by several caches ("replicas").
type fakeBus struct {
	hub     *fakeHub
	healthy atomic.Bool
	epoch   atomic.Uint64
	mu      sync.Mutex
	subs    []func(string, []byte)
	gaps    []func()
}

type fakeHub struct {
	mu    sync.Mutex
	buses []*fakeBus
}

func (h *fakeHub) bus() *fakeBus {
	b := &fakeBus{hub: h}
	b.healthy.Store(true)
	h.mu.Lock()
	h.buses = append(h.buses, b)
	h.mu.Unlock()
	return b
}

func (b *fakeBus) Publish(_ context.Context, topic string, payload []byte) error {
	b.hub.mu.Lock()
	buses := append([]*fakeBus(nil), b.hub.buses...)
	b.hub.mu.Unlock()
	for _, o := range buses {
		if o != b && (!o.healthy.Load() || !b.healthy.Load()) {
			continue // a broken link drops messages
		}
		o.mu.Lock()
		subs := append([]func(string, []byte){}, o.subs...)
		o.mu.Unlock()
		for _, s := range subs {
			s(topic, payload)
		}
	}
	return nil
}

func (b *fakeBus) Subscribe(_ string, h func(string, []byte)) func() {
	b.mu.Lock()
	b.subs = append(b.subs, h)
	b.mu.Unlock()
	return func() {}
}

func (b *fakeBus) OnGap(fn func()) func() {
	b.mu.Lock()
	b.gaps = append(b.gaps, fn)
	b.mu.Unlock()
	return func() {}
}

func (b *fakeBus) Healthy() bool { return b.healthy.Load() }
func (b *fakeBus) Epoch() uint64 { return b.epoch.Load() }

// setHealthy changes the link's state and, like a real bus, signals a gap.
func (b *fakeBus) setHealthy(ok bool) {
	b.healthy.Store(ok)
	b.epoch.Add(1)
	b.mu.Lock()
	gaps := append([]func(){}, b.gaps...)
	b.mu.Unlock()
	for _, g := range gaps {
		g()
	}
}

func TestInvalidationReachesOtherReplicas(t *testing.T) {
	ctx := context.Background()
	hub := &fakeHub{}
	a, _ := newTest(time.Minute)
	b, _ := newTest(time.Minute)
	a.Attach(hub.bus())
	bb := hub.bus()
	b.Attach(bb)
	put(a, "tok", 1, "g", "v")
	put(b, "tok", 1, "g", "v")
	a.UserChanged(ctx, 1)
	if _, ok := b.Get("tok"); ok {
		t.Fatal("replica B still serves a user changed on A")
	}
	put(b, "tok", 1, "g", "v")
	a.GrantRevoked(ctx, "g")
	if _, ok := b.Get("tok"); ok {
		t.Fatal("replica B still serves a grant revoked on A")
	}
}

// While the bus may be missing messages, nothing cached is served and
// nothing is stored; a gap flushes everything.
func TestGapFlushesAndBypasses(t *testing.T) {
	ctx := context.Background()
	hub := &fakeHub{}
	a, _ := newTest(time.Minute)
	b, _ := newTest(time.Minute)
	a.Attach(hub.bus())
	bb := hub.bus()
	b.Attach(bb)
	put(b, "tok", 1, "g", "v")
	tk := b.Begin() // a load in flight when the link breaks

	bb.setHealthy(false)
	a.UserChanged(ctx, 1) // B does not hear this
	if _, ok := b.Get("tok"); ok {
		t.Fatal("served from the cache while the bus is down")
	}
	put(b, "tok", 1, "g", "v")
	if b.Len() != 0 {
		t.Fatal("stored while the bus is down")
	}

	bb.setHealthy(true)
	b.Put(tk, "tok", 1, "g", time.Time{}, "from before the gap")
	if _, ok := b.Get("tok"); ok {
		t.Fatal("a load that spanned a gap was stored")
	}
	put(b, "tok", 1, "g", "v")
	if _, ok := b.Get("tok"); !ok {
		t.Fatal("not caching again once the bus is healthy")
	}
}

// stuckBus is a bus whose transport hangs (publish waits for its context)
// for the first stuck attempts, then delivers.
type stuckBus struct {
	*fakeBus
	stuck    atomic.Int32
	attempts atomic.Int32
}

func (b *stuckBus) Publish(ctx context.Context, topic string, payload []byte) error {
	b.attempts.Add(1)
	if b.stuck.Add(-1) >= 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	return b.fakeBus.Publish(ctx, topic, payload)
}

// A hung transport does not hold the change's caller (the change has
// committed; its answer waits), and the notice reaches the other replicas
// once the transport works again.
func TestPublishIsBoundedAndRetried(t *testing.T) {
	defer func(d time.Duration) { publishTimeout = d }(publishTimeout)
	publishTimeout = 100 * time.Millisecond
	hub := &fakeHub{}
	a, _ := newTest(time.Minute)
	b, _ := newTest(time.Minute)
	sb := &stuckBus{fakeBus: hub.bus()}
	sb.stuck.Store(2)
	a.Attach(sb)
	b.Attach(hub.bus())
	put(b, "tok", 1, "g", "v")

	done := make(chan struct{})
	go func() {
		a.UserChanged(context.Background(), 1)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("UserChanged still waiting for a hung bus after 3 s")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := b.Get("tok"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica B still serves the user after %d publish attempts", sb.attempts.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countingBus is a stuck bus that counts the publications in flight.
type countingBus struct {
	stuckBus
	inFlight atomic.Int32
}

func (b *countingBus) Publish(ctx context.Context, topic string, payload []byte) error {
	b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	return b.stuckBus.Publish(ctx, topic, payload)
}

// Detaching ends the retries of a failed publication and waits for them:
// with SQL notices each one writes to the database, which is closed once
// the cache is detached (or a test's schema dropped).
func TestDetachEndsAndWaitsForTheRetries(t *testing.T) {
	defer func(d time.Duration) { publishTimeout = d }(publishTimeout)
	publishTimeout = time.Second
	hub := &fakeHub{}
	a, _ := newTest(time.Minute)
	cb := &countingBus{stuckBus: stuckBus{fakeBus: hub.bus()}}
	cb.stuck.Store(1_000_000) // never delivers
	detach := a.Attach(cb)
	a.UserChanged(context.Background(), 1) // fails once, then retries
	deadline := time.Now().Add(5 * time.Second)
	for cb.attempts.Load() < 2 || cb.inFlight.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no retry in flight after %d attempts", cb.attempts.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}

	start := time.Now()
	detach()
	if n := cb.inFlight.Load(); n != 0 {
		t.Fatalf("detach returned with %d publications in flight", n)
	}
	if d := time.Since(start); d > publishTimeout/2 {
		t.Errorf("detach waited %v: the retry in flight was not cancelled", d)
	}
	attempts := cb.attempts.Load()
	time.Sleep(500 * time.Millisecond) // longer than the backoff reached
	if n := cb.attempts.Load(); n != attempts {
		t.Fatalf("%d publications after detach returned", n-attempts)
	}
	a.UserChanged(context.Background(), 1) // not published: detached
	if n := cb.attempts.Load(); n != attempts {
		t.Fatalf("an invalidation after detach was published (%d attempts)", n-attempts)
	}
}
