// Package cluster is the message bus that ties the replicas of one
// deployment together: small notices ("session S has a message", "user U's
// roles changed", "tools changed") published on one replica reach the
// subscribers of every replica.
//
// The bus carries identifiers, never user content: a payload is at most
// MaxPayload bytes and a topic is a short lower-case name. Anything larger
// lives in SQL and the notice names its row.
//
// Delivery is best effort while the bus is healthy and nothing is promised
// while it is not. A subscriber that must not miss a notice (a cache that
// would otherwise serve stale data) watches OnGap and Healthy: whenever the
// bus may have dropped messages (its connection broke, or it reconnected
// after a break; on NATS also when the client dropped messages for slow
// handlers, or a publication was not confirmed) every gap callback runs
// and Epoch changes, so the subscriber flushes what it holds and, while
// Healthy is false, does not trust what it would otherwise cache.
//
// Three implementations ship: NewLocal (one process; the default and what
// an SQLite deployment uses), NewPostgres (LISTEN/NOTIFY on the deployment's
// PostgreSQL, chosen automatically with a postgres:// database) and NewNATS
// (a NATS server, by URL; linked only with the build tag nats or full, so
// the default binary carries no NATS client). Embedders may supply their
// own Bus. SQLNotices
// carries one topic through an SQL table between processes that share a
// database but no bus (an operator command and the server it acts on).
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// MaxPayload is the largest payload Publish accepts, in bytes. Payloads are
// identifiers; user content never travels on the bus.
const MaxPayload = 1024

// MaxTopic is the longest topic name Publish and Subscribe accept.
const MaxTopic = 64

// ErrPayloadTooLarge is returned by Publish for a payload over MaxPayload.
var ErrPayloadTooLarge = errors.New("cluster: payload larger than MaxPayload")

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("cluster: bus closed")

// Handler receives one message. Handlers of local publications run on the
// publisher's goroutine (so a replica sees its own notice before Publish
// returns); those of remote ones run on the bus's receiving goroutine, one
// at a time and in arrival order. A handler must be quick and must not
// block: hand long work to a goroutine.
type Handler func(topic string, payload []byte)

// Bus publishes small notices to every replica of a deployment.
type Bus interface {
	// Publish delivers payload to every subscriber of topic on every
	// replica, this one included (synchronously, before Publish returns).
	// It fails for a bad topic, a payload over MaxPayload, a closed bus, or
	// when the message could not be handed to the transport (or, on NATS,
	// the server did not confirm it: ErrUnconfirmed); the local
	// subscribers have run even then.
	Publish(ctx context.Context, topic string, payload []byte) error
	// Subscribe registers h for topic until cancel is called.
	Subscribe(topic string, h Handler) (cancel func())
	// OnGap registers fn to run whenever messages may have been missed:
	// when the connection to the transport breaks and again when it is
	// restored. fn runs on the bus's goroutine and must not block.
	OnGap(fn func()) (cancel func())
	// Healthy reports whether the bus is currently receiving messages from
	// other replicas.
	Healthy() bool
	// Epoch changes every time a gap is signalled. A reader that samples
	// Epoch before loading data and again before caching it knows whether a
	// gap happened in between.
	Epoch() uint64
	// Node is this replica's id on the bus (random per process).
	Node() string
	// Close stops the bus; later Publish calls fail with ErrClosed.
	Close() error
}

// ValidTopic reports whether topic is a usable topic name: 1..MaxTopic
// characters from [a-z0-9._:-].
func ValidTopic(topic string) error {
	if topic == "" || len(topic) > MaxTopic {
		return fmt.Errorf("cluster: topic %q: want 1..%d characters", topic, MaxTopic)
	}
	for _, c := range topic {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '.', c == '_', c == '-', c == ':':
		default:
			return fmt.Errorf("cluster: topic %q: only a-z 0-9 . _ - : are allowed", topic)
		}
	}
	return nil
}

func checkMessage(topic string, payload []byte) error {
	if err := ValidTopic(topic); err != nil {
		return err
	}
	if len(payload) > MaxPayload {
		return fmt.Errorf("%w (%d > %d bytes on %s)", ErrPayloadTooLarge, len(payload), MaxPayload, topic)
	}
	return nil
}

// ErrUnconfirmed is returned (wrapped) by a Publish whose message the
// transport did not confirm: the server may not have it, so other replicas
// may not hear it. The bus keeps it and sends it again in the background
// (see NATSOptions.RetryFor), and is unhealthy until it went through.
var ErrUnconfirmed = errors.New("cluster: message not confirmed by the transport (retried in the background)")

func newNodeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// hub is the subscriber table and gap state every implementation shares.
type hub struct {
	node   string
	mu     sync.RWMutex
	next   uint64
	subs   map[string]map[uint64]Handler
	gaps   map[uint64]func()
	health atomic.Bool
	epoch  atomic.Uint64
	closed atomic.Bool
}

func newHub() *hub {
	return &hub{node: newNodeID(), subs: map[string]map[uint64]Handler{}, gaps: map[uint64]func(){}}
}

func (h *hub) subscribe(topic string, fn Handler) func() {
	if ValidTopic(topic) != nil || fn == nil {
		return func() {}
	}
	h.mu.Lock()
	h.next++
	id := h.next
	m := h.subs[topic]
	if m == nil {
		m = map[uint64]Handler{}
		h.subs[topic] = m
	}
	m[id] = fn
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.subs[topic], id)
			if len(h.subs[topic]) == 0 {
				delete(h.subs, topic)
			}
			h.mu.Unlock()
		})
	}
}

func (h *hub) onGap(fn func()) func() {
	if fn == nil {
		return func() {}
	}
	h.mu.Lock()
	h.next++
	id := h.next
	h.gaps[id] = fn
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.gaps, id)
			h.mu.Unlock()
		})
	}
}

func (h *hub) deliver(topic string, payload []byte) {
	h.mu.RLock()
	m := h.subs[topic]
	hs := make([]Handler, 0, len(m))
	for _, fn := range m {
		hs = append(hs, fn)
	}
	h.mu.RUnlock()
	for _, fn := range hs {
		fn(topic, payload)
	}
}

// setHealthy records a change of health and signals a gap on every
// transition (going down: messages are being missed; coming back: some were
// missed meanwhile).
func (h *hub) setHealthy(ok bool) {
	if h.health.Swap(ok) == ok {
		return
	}
	h.gap()
}

func (h *hub) gap() {
	h.epoch.Add(1)
	h.mu.RLock()
	fns := make([]func(), 0, len(h.gaps))
	for _, fn := range h.gaps {
		fns = append(fns, fn)
	}
	h.mu.RUnlock()
	for _, fn := range fns {
		fn()
	}
}

// Local is the in-process bus: one replica, every message delivered, never
// a gap. It is the default when the database is SQLite.
type Local struct{ h *hub }

// NewLocal returns an in-process bus.
func NewLocal() *Local {
	h := newHub()
	h.health.Store(true)
	return &Local{h: h}
}

func (l *Local) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := checkMessage(topic, payload); err != nil {
		return err
	}
	if l.h.closed.Load() {
		return ErrClosed
	}
	l.h.deliver(topic, payload)
	return nil
}

func (l *Local) Subscribe(topic string, h Handler) func() { return l.h.subscribe(topic, h) }
func (l *Local) OnGap(fn func()) func()                   { return l.h.onGap(fn) }
func (l *Local) Healthy() bool                            { return !l.h.closed.Load() }
func (l *Local) Epoch() uint64                            { return l.h.epoch.Load() }
func (l *Local) Node() string                             { return l.h.node }
func (l *Local) Close() error                             { l.h.closed.Store(true); return nil }

var _ Bus = (*Local)(nil)
