package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"sync"
	"time"
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

// DenialBursts counts denials at the choke point per user and per client
// network, in memory (each replica counts the calls it serves), and
// reports a burst once per subject, then holds a cooldown. It is safe for
// concurrent use.
//
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

// Options returns the options in force, defaults filled in.
func (d *DenialBursts) Options() BurstOptions { return d.opts }

// Network returns the client network of an address, as counted: the /24
// of an IPv4 address, the /64 of an IPv6 one; "" for an unparsable one.
// A prefix ("2001:db8::/64", as the audit log groups IPv6 clients) counts
// as its address.
func Network(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		p, perr := netip.ParsePrefix(ip)
		if perr != nil {
			return ""
		}
		a = p.Addr()
	}
	a = a.Unmap().WithZone("")
	bits := 64
	if a.Is4() {
		bits = 24
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return ""
	}
	return p.String()
}

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

// BurstPublisher turns bursts into security.denial_burst events.
type BurstPublisher struct {
	Bus         *Bus
	Bursts      *DenialBursts
	HashUser    func(string) string
	HashNetwork func(string) string
}

// Observe records one denial and publishes an event for each burst it
// completes, in the background (a denial answers at once; the event is
// written after).
func (p *BurstPublisher) Observe(ctx context.Context, now time.Time, userID, ip string) {
	for _, b := range p.Bursts.Record(now, userID, ip) {
		// Never the id or address itself: a keyed hash, or (without a
		// hasher) a plain SHA-256.
		sum := sha256.Sum256([]byte(b.Scope + ":" + b.Key))
		subject := hex.EncodeToString(sum[:16])
		if b.Key == "" {
			subject = UntrackedSubject
		} else if b.Scope == "user" && p.HashUser != nil {
			subject = p.HashUser(b.Key)
		} else if b.Scope == "network" && p.HashNetwork != nil {
			subject = p.HashNetwork(b.Key)
		}
		o := p.Bursts.Options()
		alert := BurstAlert{Scope: b.Scope, Subject: subject, Count: b.Count, Threshold: o.Threshold,
			WindowSeconds: int64(o.Window / time.Second), ObservedAt: now.UTC()}
		go func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if _, err := p.Bus.PublishNow(ctx, SecurityDenialBurst, alert); err != nil {
				p.Bus.log.ErrorContext(ctx, "events: publish denial burst", "scope", alert.Scope, "err", err)
			}
		}()
	}
}
