package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/enclave-mcp/enclave/internal/background"
	"github.com/enclave-mcp/enclave/internal/clientnet"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// Defaults of BurstOptions: 50 denials within an hour raise the alert,
// then the same subject stays quiet for six hours.
const (
	DefaultBurstThreshold = 50
	DefaultBurstWindow    = time.Hour
	DefaultBurstCooldown  = 6 * time.Hour
	// maxBurstKeys bounds each table of a DenialBursts (users, networks):
	// when it is full, idle subjects are dropped, and denials of new ones
	// are counted together as the untracked subject until room frees up.
	maxBurstKeys = 50000
)

// UntrackedSubject is the Subject of a burst counted over the subjects a
// full counter could not track one by one.
const UntrackedSubject = "untracked"

// BurstOptions configure DenialBursts. Zero fields take the defaults.
type BurstOptions struct {
	// Threshold is how many denials of one subject within Window raise
	// the alert. Default 50.
	Threshold int
	// Window is the sliding window denials are counted in. Default 1 h.
	Window time.Duration
	// Cooldown is how long a subject that raised the alert stays quiet.
	// Default 6 h.
	Cooldown time.Duration
}

func (o BurstOptions) withDefaults() BurstOptions {
	if o.Threshold <= 0 {
		o.Threshold = DefaultBurstThreshold
	}
	if o.Window <= 0 {
		o.Window = DefaultBurstWindow
	}
	if o.Cooldown <= 0 {
		o.Cooldown = DefaultBurstCooldown
	}
	return o
}

// BurstAlert is the data of a security.denial_burst event. It names the
// subject only by a keyed hash (the audit log's scheme, so an admin can
// find its rows there): never a user id, address, token or capability
// argument.
type BurstAlert struct {
	// Scope is "user" (one account) or "network" (one client network: an
	// IPv4 /24 or an IPv6 /64).
	Scope string `json:"scope"`
	// Subject is the keyed hash of the user id or of the network, or
	// UntrackedSubject: the subjects of that scope counted together
	// because the counter was full (a flood of distinct users or
	// networks).
	Subject string `json:"subject"`
	// Count is the number of denials in the window when the alert fired.
	Count int `json:"count"`
	// Threshold and WindowSeconds are the rule that fired.
	Threshold     int       `json:"threshold"`
	WindowSeconds int64     `json:"windowSeconds"`
	ObservedAt    time.Time `json:"observedAt"`
}

// DenialBursts counts denials per user and per client network and reports
// a burst once per subject, then holds a cooldown. It is safe for
// concurrent use. NewDenialBursts counts in memory, per process;
// NewSharedDenialBursts counts in SQL, shared by every replica on the
// database, so a burst spread over replicas fires once (see Shared).
//
// In memory:
// Users and networks are counted in separate tables of at most
// maxBurstKeys subjects each, so a flood of networks (an IPv6 sender holds
// tens of thousands of /64s) never crowds users out. When a table is full,
// denials of subjects it cannot track are counted together under one
// "untracked" subject of that scope (Burst.Key ""), which fires like any
// other: a flood meant to hide a burst raises one itself.
type DenialBursts struct {
	opts BurstOptions

	mu    sync.Mutex
	users burstTable
	nets  burstTable

	// shared mode: the counters are rows of BurstTable in store.
	store     *storage.Store
	nextClaim map[string]time.Time // scope:subject → when to try claiming the alert again
}

// burstTable is one scope's subjects. The key "" is the untracked subject.
type burstTable struct {
	keys      map[string]*burstKey
	lastSweep time.Time
}

type burstKey struct {
	times     []time.Time // the denials within the window, oldest first
	quietTill time.Time
}

// NewDenialBursts returns a counter with opts.
func NewDenialBursts(opts BurstOptions) *DenialBursts {
	return &DenialBursts{opts: opts.withDefaults(),
		users: burstTable{keys: map[string]*burstKey{}}, nets: burstTable{keys: map[string]*burstKey{}}}
}

// NewSharedDenialBursts returns a counter that keeps its counts in the
// BurstTable of store's database: every replica on that database counts
// into the same rows, so their denials add up, and the alert of a subject
// is published by exactly one replica (see CountShared). Count subjects
// with CountShared (Record counts in memory only).
func NewSharedDenialBursts(store *storage.Store, opts BurstOptions) *DenialBursts {
	d := NewDenialBursts(opts)
	d.store, d.nextClaim = store, map[string]time.Time{}
	return d
}

// Shared reports whether d counts in SQL (NewSharedDenialBursts).
func (d *DenialBursts) Shared() bool { return d.store != nil }

// Options returns the options in force, defaults filled in.
func (d *DenialBursts) Options() BurstOptions { return d.opts }

// Network returns the client network of an address, as counted: the /24
// of an IPv4 address, the /64 of an IPv6 one; "" for an unparsable one.
// A prefix ("2001:db8::/64") counts as its address. It is the grouping the
// audit log hashes a client by (audit.Log.HashIP), so a network alert's
// subject is the IPHash of that network's audit rows.
func Network(ip string) string { return clientnet.Network(ip) }

// Burst is a subject that just crossed the threshold.
type Burst struct {
	Scope string // "user" or "network"
	// Key is the stable user id or the network, in clear (hash it before
	// publishing); "" for the subjects a full table could not track.
	Key   string
	Count int
}

// Record counts one denial of userID (may be "") from client address ip
// (may be "") at now and returns the subjects that reached the threshold
// with it and are not in their cooldown.
func (d *DenialBursts) Record(now time.Time, userID, ip string) []Burst {
	var out []Burst
	d.mu.Lock()
	defer d.mu.Unlock()
	if userID != "" {
		if key, n, ok := d.count(&d.users, now, userID); ok {
			out = append(out, Burst{Scope: "user", Key: key, Count: n})
		}
	}
	if net := Network(ip); net != "" {
		if key, n, ok := d.count(&d.nets, now, net); ok {
			out = append(out, Burst{Scope: "network", Key: key, Count: n})
		}
	}
	return out
}

// count records a denial of key in table t and reports the subject it was
// counted under ("" when t is full) and whether it fires.
func (d *DenialBursts) count(t *burstTable, now time.Time, key string) (string, int, bool) {
	k, ok := t.keys[key]
	if !ok {
		// A full table is swept at most once a minute: a stream of new
		// subjects never costs a scan of the table each.
		if len(t.keys) >= maxBurstKeys && now.Sub(t.lastSweep) >= time.Minute {
			t.lastSweep = now
			d.sweep(t, now)
		}
		if len(t.keys) >= maxBurstKeys {
			key = ""
			k = t.keys[key]
		}
		if k == nil {
			k = &burstKey{}
			t.keys[key] = k
		}
	}
	cut := now.Add(-d.opts.Window)
	i := 0
	for i < len(k.times) && !k.times[i].After(cut) {
		i++
	}
	k.times = append(k.times[i:], now)
	if len(k.times) > d.opts.Threshold {
		k.times = k.times[len(k.times)-d.opts.Threshold:]
	}
	if len(k.times) < d.opts.Threshold || now.Before(k.quietTill) {
		return key, 0, false
	}
	k.quietTill = now.Add(d.opts.Cooldown)
	return key, len(k.times), true
}

// sweep drops the subjects of t with no denial in the window and no
// cooldown.
func (d *DenialBursts) sweep(t *burstTable, now time.Time) {
	cut := now.Add(-d.opts.Window)
	for key, k := range t.keys {
		if now.After(k.quietTill) && (len(k.times) == 0 || !k.times[len(k.times)-1].After(cut)) {
			delete(t.keys, key)
		}
	}
}

// BurstTable is the SQL table of shared denial counters (migration
// 0270): one row per scope, subject (the keyed hash an alert names) and
// fixed window, holding no id or address in clear.
const BurstTable = "denial_burst_counts"

// BurstRetention is the retention of BurstTable under opts: a window's row
// is kept for the window and the cooldown (the row that fired starts the
// cooldown), then removed.
func BurstRetention(opts BurstOptions) retention.Policy {
	o := opts.withDefaults()
	return retention.Age(BurstTable, "window_start", o.Window+o.Cooldown).In(retention.UnixMillis).
		Because("denial-burst counters shared by the replicas: keyed hashes of users and client networks, per window")
}

// CountShared counts one denial of subject (a keyed hash, or
// UntrackedSubject) in scope at now, in SQL, and reports the window's count
// and whether this call publishes the alert. The count is one atomic upsert
// of the window's row; at or past the threshold, the replica that marks
// the row as fired (a conditional update no other replica's can also win,
// refused while the subject fired within the cooldown) is the one that
// publishes. Windows are fixed: they start at multiples of Window since
// the Unix epoch.
func (d *DenialBursts) CountShared(ctx context.Context, now time.Time, scope, subject string) (int, bool, error) {
	return d.countShared(ctx, now, scope, subject, 1)
}

// countShared is CountShared for k denials at once.
func (d *DenialBursts) countShared(ctx context.Context, now time.Time, scope, subject string, k int) (int, bool, error) {
	if d.store == nil {
		return 0, false, fmt.Errorf("events: count denial: not a shared counter")
	}
	win := d.opts.Window.Milliseconds()
	if win <= 0 {
		win = 1
	}
	ms := now.UnixMilli()
	start := ms - ms%win
	var n int
	err := d.store.DB.NewRaw(`INSERT INTO denial_burst_counts (scope, subject, window_start, count, fired_at) VALUES (?, ?, ?, ?, 0)
ON CONFLICT (scope, subject, window_start) DO UPDATE SET count = denial_burst_counts.count + ?
RETURNING count`, scope, subject, start, k, k).Scan(ctx, &n)
	if err != nil {
		return 0, false, fmt.Errorf("events: count denial: %w", err)
	}
	if n < d.opts.Threshold {
		return n, false, nil
	}
	// Past the threshold, each replica tries to claim the alert at most
	// once a minute per subject (and not at all in a cooldown it won), so
	// a sustained flood costs one write per denial, not two.
	key := scope + ":" + subject
	d.mu.Lock()
	if next, ok := d.nextClaim[key]; ok && now.Before(next) {
		d.mu.Unlock()
		return n, false, nil
	}
	d.mu.Unlock()
	res, err := d.store.DB.NewRaw(`UPDATE denial_burst_counts SET fired_at = ?
WHERE scope = ? AND subject = ? AND window_start = ? AND fired_at = 0
AND NOT EXISTS (SELECT 1 FROM denial_burst_counts AS f WHERE f.scope = ? AND f.subject = ? AND f.fired_at > ?)`,
		ms, scope, subject, start, scope, subject, now.Add(-d.opts.Cooldown).UnixMilli()).Exec(ctx)
	if err != nil {
		return n, false, fmt.Errorf("events: claim denial burst: %w", err)
	}
	won, _ := res.RowsAffected()
	next := now.Add(time.Minute)
	if won == 1 {
		next = now.Add(d.opts.Cooldown)
	}
	d.mu.Lock()
	if len(d.nextClaim) >= maxBurstKeys {
		for k, t := range d.nextClaim {
			if !now.Before(t) {
				delete(d.nextClaim, k)
			}
		}
		if len(d.nextClaim) >= maxBurstKeys {
			clear(d.nextClaim) // a claim tried again costs one update, nothing more
		}
	}
	d.nextClaim[key] = next
	d.mu.Unlock()
	return n, won == 1, nil
}

// BurstPublisher turns bursts into security.denial_burst events.
type BurstPublisher struct {
	Bus         *Bus
	Bursts      *DenialBursts
	HashUser    func(string) string
	HashNetwork func(string) string

	// A shared counter's denials, gathered in memory and written by one
	// flush at a time (see Observe).
	mu       sync.Mutex
	pending  map[pendingKey]*pendingCount
	flushing bool        // a flush is scheduled or running
	timer    *time.Timer // the scheduled flush
	closed   bool        // Close ran: denials are no longer gathered
	idle     *sync.Cond  // signalled when flushing ends (on mu)

	// The alerts being published, each on a goroutine of its own (see
	// publish): Close waits for them, since each writes to the store its
	// server closes next; an alert after that is not published.
	publishing background.Group
}

// sharedFlushEvery is how long a shared counter gathers denials before it
// writes them: a flood of refusals (a made-up token costs the sender
// nothing) costs one upsert per subject per interval, off the requests'
// path, not one or two per request on the database's writer.
var sharedFlushEvery = 250 * time.Millisecond

// pendingKey is a subject's window in the shared counter's gathered
// denials.
type pendingKey struct {
	scope, subject string
	window         int64
}

// pendingCount is the denials gathered for one pendingKey, the last at at.
type pendingCount struct {
	n  int
	at time.Time
}

// maxPendingSubjects bounds the subjects one flush writes: past it, the
// denials of new subjects are gathered as UntrackedSubject, so a flood
// from ever new networks (an IPv6 sender holds tens of thousands of /64s)
// costs at most this many writes per flush, and still counts (its
// untracked total raises an alert of its own).
const maxPendingSubjects = 1024

// gather adds one denial of subject to the pending ones and schedules a
// flush when none is (see maxPendingSubjects).
func (p *BurstPublisher) gather(now time.Time, scope, subject string) {
	win := p.Bursts.opts.Window.Milliseconds()
	if win <= 0 {
		win = 1
	}
	ms := now.UnixMilli()
	k := pendingKey{scope, subject, ms - ms%win}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if p.pending == nil {
		p.pending = map[pendingKey]*pendingCount{}
	}
	c := p.pending[k]
	if c == nil && len(p.pending) >= maxPendingSubjects {
		k.subject = UntrackedSubject
		c = p.pending[k]
	}
	if c == nil {
		c = &pendingCount{}
		p.pending[k] = c
	}
	c.n++
	if now.After(c.at) {
		c.at = now
	}
	if !p.flushing {
		p.flushing = true
		p.timer = time.AfterFunc(sharedFlushEvery, p.flush)
	}
}

// Close writes the denials gathered so far (a shared counter's), stops
// gathering (denials observed after it are not counted) and waits for the
// alerts being published. Call it before the store closes, so a shutdown
// loses none of the counts and no alert still writes to a closed store
// (or to a PostgreSQL schema being dropped). A nil publisher has none.
func (p *BurstPublisher) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	if p.idle == nil {
		p.idle = sync.NewCond(&p.mu)
	}
	if p.flushing && p.timer != nil && p.timer.Stop() {
		p.flushing = false // the scheduled flush will not run: run it here
	}
	for p.flushing {
		p.idle.Wait() // a flush is running: let it end
	}
	pending := len(p.pending) > 0
	if pending {
		p.flushing = true
	}
	p.mu.Unlock()
	if pending {
		p.flush()
	}
	p.publishing.Close()
}

// flush writes the gathered denials, one upsert per subject, publishes
// the alerts they complete, and schedules the next flush when more were
// gathered meanwhile.
func (p *BurstPublisher) flush() {
	p.mu.Lock()
	batch := p.pending
	p.pending = nil
	p.mu.Unlock()
	o := p.Bursts.Options()
	for k, c := range batch {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, fire, err := p.Bursts.countShared(ctx, c.at, k.scope, k.subject, c.n)
		cancel()
		if err != nil {
			p.Bus.log.Error("events: count denial", "scope", k.scope, "err", err)
			continue
		}
		if fire {
			// The count of the denial that crossed the threshold, as a
			// counter that wrote each denial at once would say.
			count := n
			if n-c.n < o.Threshold {
				count = min(n, o.Threshold)
			}
			p.publish(context.Background(), c.at, BurstAlert{Scope: k.scope, Subject: k.subject, Count: count})
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) > 0 && !p.closed {
		p.timer = time.AfterFunc(sharedFlushEvery, p.flush)
		return
	}
	p.flushing = false
	if p.idle != nil {
		p.idle.Broadcast()
	}
}

// publish publishes alert in the background (the denial that completed
// it is on a request's path), unless Close has stopped publishing; Close
// waits for it.
func (p *BurstPublisher) publish(ctx context.Context, now time.Time, alert BurstAlert) {
	o := p.Bursts.Options()
	alert.Threshold, alert.WindowSeconds, alert.ObservedAt = o.Threshold, int64(o.Window/time.Second), now.UTC()
	p.publishing.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := p.Bus.PublishNow(ctx, SecurityDenialBurst, alert); err != nil {
			p.Bus.log.ErrorContext(ctx, "events: publish denial burst", "scope", alert.Scope, "err", err)
		}
	})
}

// subject names a subject in an alert: the keyed hash of the user id or of
// the client network (HashNetwork is given the address; audit.Log.HashIP
// groups it by network itself), or (without a hasher) a plain SHA-256.
func (p *BurstPublisher) subject(scope, key string) string {
	if key == "" {
		return UntrackedSubject
	}
	if scope == "user" && p.HashUser != nil {
		return p.HashUser(key)
	}
	if scope == "network" && p.HashNetwork != nil {
		return p.HashNetwork(key)
	}
	sum := sha256.Sum256([]byte(scope + ":" + key))
	return hex.EncodeToString(sum[:16])
}

// Observe records one denial (at the choke point, or a refused /mcp token)
// of userID (may be "") from client address ip (may be "") and publishes
// an event for each burst it completes, in the background (a denial
// answers at once; the event is written after). A shared counter gathers
// the denials in memory and writes them every sharedFlushEvery, one
// upsert per subject (a failure is logged and those denials go
// uncounted): never a write on the request's path.
func (p *BurstPublisher) Observe(ctx context.Context, now time.Time, userID, ip string) {
	if p.Bursts.Shared() {
		for _, s := range []struct{ scope, key string }{{"user", userID}, {"network", Network(ip)}} {
			if s.key != "" {
				p.gather(now, s.scope, p.subject(s.scope, s.key))
			}
		}
		return
	}
	for _, b := range p.Bursts.Record(now, userID, ip) {
		p.publish(ctx, now, BurstAlert{Scope: b.Scope, Subject: p.subject(b.Scope, b.Key), Count: b.Count})
	}
}
