package cluster

import (
	"context"
	"sync"
)

// Loopback links several in-process buses as if each belonged to its own
// replica: a message published on one reaches the subscribers of all. It
// is for tests of code that must behave across replicas (two servers in
// one test process); Disconnect and Reconnect simulate a broken link and
// signal gaps like a real transport.
type Loopback struct {
	mu      sync.RWMutex
	members []*LoopbackBus
}

// NewLoopback returns an empty group.
func NewLoopback() *Loopback { return &Loopback{} }

// Join adds a bus (a replica) to the group.
func (l *Loopback) Join() *LoopbackBus {
	b := &LoopbackBus{h: newHub(), group: l}
	b.h.health.Store(true)
	l.mu.Lock()
	l.members = append(l.members, b)
	l.mu.Unlock()
	return b
}

// LoopbackBus is one member of a Loopback group.
type LoopbackBus struct {
	h     *hub
	group *Loopback
}

// Disconnect cuts b off: it neither sends to nor hears from the others
// until Reconnect, and signals a gap.
func (b *LoopbackBus) Disconnect() { b.h.setHealthy(false) }

// Reconnect restores b's link and signals a gap.
func (b *LoopbackBus) Reconnect() { b.h.setHealthy(true) }

func (b *LoopbackBus) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := checkMessage(topic, payload); err != nil {
		return err
	}
	if b.h.closed.Load() {
		return ErrClosed
	}
	b.h.deliver(topic, payload)
	if !b.h.health.Load() {
		return nil // lost on the way, as on a broken link
	}
	b.group.mu.RLock()
	others := make([]*LoopbackBus, 0, len(b.group.members))
	for _, m := range b.group.members {
		if m != b && m.h.health.Load() && !m.h.closed.Load() {
			others = append(others, m)
		}
	}
	b.group.mu.RUnlock()
	for _, m := range others {
		m.h.deliver(topic, append([]byte(nil), payload...))
	}
	return nil
}

func (b *LoopbackBus) Subscribe(topic string, h Handler) func() { return b.h.subscribe(topic, h) }
func (b *LoopbackBus) OnGap(fn func()) func()                   { return b.h.onGap(fn) }
func (b *LoopbackBus) Healthy() bool                            { return b.h.health.Load() && !b.h.closed.Load() }
func (b *LoopbackBus) Epoch() uint64                            { return b.h.epoch.Load() }
func (b *LoopbackBus) Node() string                             { return b.h.node }
func (b *LoopbackBus) Close() error                             { b.h.closed.Store(true); return nil }

var _ Bus = (*LoopbackBus)(nil)
