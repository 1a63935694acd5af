//go:build nats || full

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// NATSLinked reports whether this build carries the NATS bus (the build
// tag nats or full).
const NATSLinked = true

// NATSOptions configure NewNATS.
type NATSOptions struct {
	// URL is the server, nats://host:port (or tls://…); a query parameter
	// subject=PREFIX sets the subject prefix (default "enclave.bus"), so
	// that deployments sharing a NATS server do not hear each other.
	URL string
	// Logger receives connection losses and recoveries, slow-consumer
	// drops and publications given up. Default slog.Default().
	Logger *slog.Logger
	// FlushTimeout bounds how long Publish waits for the server to confirm
	// that it has the message (a round trip). Default 2 s.
	FlushTimeout time.Duration
	// RetryFor is how long a message the server did not confirm is sent
	// again (with backoff, from 50 ms doubling to 2 s) before it is given
	// up. Default 1 minute.
	RetryFor time.Duration
	// MaxRetry bounds the messages kept for another attempt (identical
	// ones are kept once); beyond it the oldest is given up. Default 10,000.
	MaxRetry int
	// PendingMessages and PendingBytes bound what the subscription holds
	// for the handlers while they are busy; beyond either the client drops
	// messages (a slow consumer), which the bus reports as a gap. Zero
	// keeps the client's defaults (512k messages, 64 MiB).
	PendingMessages, PendingBytes int
}

// NATS is a Bus on a NATS server (core publish/subscribe). The client
// reconnects by itself, forever. Publish returns once the server has
// confirmed the message (a flush round trip); a message it did not confirm
// (the connection was down or reconnecting, or the server did not answer
// within FlushTimeout) is an error wrapping ErrUnconfirmed and is sent
// again in the background, and so is every message published while such
// messages wait (queued behind them, without waiting for the server). A
// message sent again may arrive twice: notices must be idempotent.
//
// The bus is unhealthy, and signals a gap when it becomes so and again
// when it is healthy again, while the connection is down, while messages
// to other replicas wait to be sent again, and while the subscription
// drops messages because the handlers do not keep up (a slow consumer:
// healthy again once nothing was dropped for a while and the backlog is
// below half its limit).
type NATS struct {
	h      *hub
	nc     *nats.Conn
	sub    *nats.Subscription
	prefix string
	log    *slog.Logger
	o      NATSOptions

	mu        sync.Mutex
	connected bool
	slow      bool
	retry     []retryMsg
	queued    map[string]struct{} // subject + data of each retry entry
	seq       uint64

	healthMu sync.Mutex // orders health transitions
	kick     chan struct{}
	stop     chan struct{}
	wg       sync.WaitGroup
}

type retryMsg struct {
	subject string
	data    []byte
	since   time.Time
	seq     uint64
}

func (m retryMsg) key() string { return m.subject + "\x00" + string(m.data) }

// NewNATS connects (failing if the server cannot be reached) and starts
// receiving.
func NewNATS(ctx context.Context, opts NATSOptions) (*NATS, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("cluster: NATS URL: want nats://host:port")
	}
	prefix := u.Query().Get("subject")
	if prefix == "" {
		prefix = "enclave.bus"
	}
	u.RawQuery = ""
	if opts.FlushTimeout <= 0 {
		opts.FlushTimeout = 2 * time.Second
	}
	if opts.RetryFor <= 0 {
		opts.RetryFor = time.Minute
	}
	if opts.MaxRetry <= 0 {
		opts.MaxRetry = 10_000
	}
	b := &NATS{h: newHub(), prefix: prefix, log: opts.Logger, o: opts, queued: map[string]struct{}{},
		kick: make(chan struct{}, 1), stop: make(chan struct{})}
	if b.log == nil {
		b.log = slog.Default()
	}
	// Closing the connection (Close, or a failed start) is not a gap.
	nc, err := nats.Connect(u.String(),
		nats.Name("enclave "+b.h.node),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.PingInterval(5*time.Second),
		nats.MaxPingsOutstanding(2),
		// No client-side buffer while reconnecting: a publication then
		// fails at once and goes to our retry list, instead of counting as
		// sent while it sits in a buffer that may never be flushed.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if b.h.closed.Load() {
				return
			}
			b.log.Warn("cluster: NATS bus disconnected; reconnecting", "err", err)
			b.setConnected(false)
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			b.log.Info("cluster: NATS bus reconnected")
			b.setConnected(true)
		}),
		nats.ClosedHandler(func(_ *nats.Conn) {
			if b.h.closed.Load() {
				return
			}
			b.log.Error("cluster: NATS bus connection closed; no more messages")
			b.setConnected(false)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if b.h.closed.Load() {
				return
			}
			if errors.Is(err, nats.ErrSlowConsumer) && sub != nil {
				b.slowConsumer(sub)
				return
			}
			b.log.Warn("cluster: NATS bus error", "err", err)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to NATS: %w", err)
	}
	b.nc = nc
	b.sub, err = nc.Subscribe(prefix+".>", func(m *nats.Msg) {
		var w wireMessage
		topic := strings.TrimPrefix(m.Subject, prefix+".")
		if json.Unmarshal(m.Data, &w) != nil || w.Node == b.h.node || ValidTopic(topic) != nil {
			return
		}
		b.h.deliver(topic, w.Payload)
	})
	if err == nil && (opts.PendingMessages != 0 || opts.PendingBytes != 0) {
		msgs, bytes, _ := b.sub.PendingLimits()
		if opts.PendingMessages != 0 {
			msgs = opts.PendingMessages
		}
		if opts.PendingBytes != 0 {
			bytes = opts.PendingBytes
		}
		err = b.sub.SetPendingLimits(msgs, bytes)
	}
	if err == nil {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = nc.FlushWithContext(fctx)
		cancel()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: subscribe on NATS: %w", err)
	}
	b.mu.Lock()
	b.connected = nc.IsConnected()
	b.h.health.Store(b.connected && !b.slow) // the start is not a gap
	b.mu.Unlock()
	b.updateHealth()
	b.wg.Add(1)
	go b.retryLoop()
	return b, nil
}

func openNATS(ctx context.Context, o OpenOptions) (Bus, error) {
	return NewNATS(ctx, NATSOptions{URL: o.BusURL, Logger: o.Logger})
}

// updateHealth sets the hub's health from the current state (a change of
// it is a gap).
func (b *NATS) updateHealth() {
	b.healthMu.Lock()
	defer b.healthMu.Unlock()
	b.mu.Lock()
	ok := b.connected && !b.slow && len(b.retry) == 0
	b.mu.Unlock()
	b.h.setHealthy(ok)
}

func (b *NATS) setConnected(ok bool) {
	b.mu.Lock()
	b.connected = ok
	b.mu.Unlock()
	b.updateHealth()
	if ok {
		b.kickRetry()
	}
}

func (b *NATS) kickRetry() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// slowConsumer records that the client dropped messages for us: a gap,
// and unhealthy until the handlers keep up again.
func (b *NATS) slowConsumer(sub *nats.Subscription) {
	b.mu.Lock()
	if b.h.closed.Load() {
		b.mu.Unlock()
		return
	}
	was := b.slow
	b.slow = true
	if !was {
		b.wg.Add(1) // under mu, after the closed check: see Close
	}
	b.mu.Unlock()
	dropped, _ := sub.Dropped()
	b.log.Warn("cluster: NATS bus dropped messages (handlers too slow); treated as a gap", "dropped", dropped)
	b.updateHealth()
	if !was {
		go b.watchSlow(sub)
	}
}

// watchSlow ends the slow-consumer state once no message was dropped for
// a few checks and the backlog is below half its limit.
func (b *NATS) watchSlow(sub *nats.Subscription) {
	defer b.wg.Done()
	const every = 50 * time.Millisecond
	last, _ := sub.Dropped()
	quiet := 0
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		dropped, err := sub.Dropped()
		if err != nil {
			return // subscription gone: the bus is closing
		}
		msgs, bytes, _ := sub.Pending()
		limMsgs, limBytes, _ := sub.PendingLimits()
		switch {
		case dropped != last:
			last, quiet = dropped, 0
		case (limMsgs <= 0 || msgs <= limMsgs/2) && (limBytes <= 0 || bytes <= limBytes/2):
			quiet++
		default:
			quiet = 0
		}
		if quiet >= 3 {
			b.mu.Lock()
			b.slow = false
			b.mu.Unlock()
			b.log.Info("cluster: NATS bus handlers keep up again", "dropped", dropped)
			b.updateHealth()
			return
		}
	}
}

// send publishes and waits for the server's confirmation.
func (b *NATS) send(ctx context.Context, msgs ...retryMsg) error {
	for _, m := range msgs {
		if err := b.nc.Publish(m.subject, m.data); err != nil {
			return err
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.o.FlushTimeout)
	defer cancel()
	if d, ok := ctx.Deadline(); ok {
		fctx, cancel = context.WithDeadline(fctx, d)
		defer cancel()
	}
	return b.nc.FlushWithContext(fctx)
}

// enqueue keeps m for another attempt.
func (b *NATS) enqueue(m retryMsg) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := m.key()
	if _, dup := b.queued[k]; dup {
		return
	}
	if len(b.retry) >= b.o.MaxRetry {
		old := b.retry[0]
		b.retry = b.retry[1:]
		delete(b.queued, old.key())
		b.log.Error("cluster: NATS bus retry list full; a message to other replicas is given up", "subject", old.subject)
	}
	b.seq++
	m.seq = b.seq
	b.retry = append(b.retry, m)
	b.queued[k] = struct{}{}
}

// retryLoop sends the kept messages again until they go through or
// RetryFor has passed.
func (b *NATS) retryLoop() {
	defer b.wg.Done()
	const first, most = 50 * time.Millisecond, 2 * time.Second
	backoff := first
	var timer <-chan time.Time
	for {
		select {
		case <-b.stop:
			return
		case <-b.kick:
		case <-timer:
		}
		timer = nil
		done, left := b.retryOnce()
		if left == 0 {
			backoff = first
			continue
		}
		if done {
			backoff = first
		} else {
			backoff = min(2*backoff, most)
		}
		timer = time.After(backoff)
	}
}

// retryOnce makes one attempt at everything kept; it reports whether the
// attempt went through and how many messages are left.
func (b *NATS) retryOnce() (ok bool, left int) {
	now := time.Now()
	b.mu.Lock()
	kept := b.retry[:0]
	given := 0
	for _, m := range b.retry {
		if now.Sub(m.since) >= b.o.RetryFor {
			delete(b.queued, m.key())
			given++
			continue
		}
		kept = append(kept, m)
	}
	clear(b.retry[len(kept):])
	b.retry = kept
	batch := append([]retryMsg(nil), b.retry...)
	b.mu.Unlock()
	if given > 0 {
		b.log.Error("cluster: NATS bus gave up messages to other replicas after retrying", "messages", given, "retried_for", b.o.RetryFor)
	}
	if len(batch) > 0 && !b.h.closed.Load() && b.nc.IsConnected() {
		if err := b.send(context.Background(), batch...); err == nil {
			ok = true
			top := batch[len(batch)-1].seq
			b.mu.Lock()
			kept := b.retry[:0]
			for _, m := range b.retry {
				if m.seq <= top {
					delete(b.queued, m.key())
					continue
				}
				kept = append(kept, m)
			}
			clear(b.retry[len(kept):])
			b.retry = kept
			b.mu.Unlock()
			b.log.Info("cluster: NATS bus sent kept messages", "messages", len(batch))
		}
	}
	b.updateHealth()
	b.mu.Lock()
	left = len(b.retry)
	b.mu.Unlock()
	return ok, left
}

func (b *NATS) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := checkMessage(topic, payload); err != nil {
		return err
	}
	if b.h.closed.Load() {
		return ErrClosed
	}
	b.h.deliver(topic, payload)
	data, err := json.Marshal(wireMessage{Node: b.h.node, Payload: payload})
	if err != nil {
		return fmt.Errorf("cluster: encode: %w", err)
	}
	m := retryMsg{subject: b.prefix + "." + topic, data: data, since: time.Now()}
	if n := b.Retrying(); n > 0 {
		// Earlier messages are not confirmed yet: queue behind them (in
		// order, and without waiting FlushTimeout again on a server that
		// did not answer).
		b.enqueue(m)
		b.kickRetry()
		return fmt.Errorf("cluster: publish %s: %w: %d earlier messages are not confirmed yet", topic, ErrUnconfirmed, n)
	}
	if err := b.send(ctx, m); err != nil {
		if b.h.closed.Load() {
			return ErrClosed
		}
		b.enqueue(m)
		b.updateHealth()
		b.kickRetry()
		return fmt.Errorf("cluster: publish %s: %w: %v", topic, ErrUnconfirmed, err)
	}
	return nil
}

func (b *NATS) Subscribe(topic string, h Handler) func() { return b.h.subscribe(topic, h) }
func (b *NATS) OnGap(fn func()) func()                   { return b.h.onGap(fn) }
func (b *NATS) Healthy() bool                            { return b.h.health.Load() && !b.h.closed.Load() }
func (b *NATS) Epoch() uint64                            { return b.h.epoch.Load() }
func (b *NATS) Node() string                             { return b.h.node }

// Retrying is the number of messages waiting to be sent again.
func (b *NATS) Retrying() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.retry)
}

// Close closes the connection; messages still waiting to be sent again
// are given up.
func (b *NATS) Close() error {
	if b.h.closed.Swap(true) {
		return nil
	}
	b.mu.Lock() // no watcher starts after this (slowConsumer checks closed under mu)
	b.mu.Unlock()
	close(b.stop)
	b.nc.Close()
	b.wg.Wait()
	return nil
}

var _ Bus = (*NATS)(nil)
