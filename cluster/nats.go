package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// NATSOptions configure NewNATS.
type NATSOptions struct {
	// URL is the server, nats://host:port (or tls://…); a query parameter
	// subject=PREFIX sets the subject prefix (default "enclave.bus"), so
	// that deployments sharing a NATS server do not hear each other.
	URL string
	// Logger receives connection losses and recoveries.
	Logger *slog.Logger
}

// NATS is a Bus on a NATS server (core publish/subscribe). The client
// reconnects by itself, forever; the bus signals a gap when the
// connection drops and again when it is back.
type NATS struct {
	h      *hub
	nc     *nats.Conn
	sub    *nats.Subscription
	prefix string
	log    *slog.Logger
}

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
	b := &NATS{h: newHub(), prefix: prefix, log: opts.Logger}
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
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if b.h.closed.Load() {
				return
			}
			b.log.Warn("cluster: NATS bus disconnected; reconnecting", "err", err)
			b.h.setHealthy(false)
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			b.log.Info("cluster: NATS bus reconnected")
			b.h.setHealthy(true)
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
	if err == nil {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = nc.FlushWithContext(fctx)
		cancel()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: subscribe on NATS: %w", err)
	}
	b.h.health.Store(true)
	return b, nil
}

func openNATS(ctx context.Context, o OpenOptions) (Bus, error) {
	return NewNATS(ctx, NATSOptions{URL: o.BusURL, Logger: o.Logger})
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
	if err := b.nc.Publish(b.prefix+"."+topic, data); err != nil {
		return fmt.Errorf("cluster: publish %s: %w", topic, err)
	}
	return nil
}

func (b *NATS) Subscribe(topic string, h Handler) func() { return b.h.subscribe(topic, h) }
func (b *NATS) OnGap(fn func()) func()                   { return b.h.onGap(fn) }
func (b *NATS) Healthy() bool                            { return b.h.health.Load() && !b.h.closed.Load() }
func (b *NATS) Epoch() uint64                            { return b.h.epoch.Load() }
func (b *NATS) Node() string                             { return b.h.node }

// Close drains the subscription and closes the connection.
func (b *NATS) Close() error {
	if b.h.closed.Swap(true) {
		return nil
	}
	b.nc.Close()
	return nil
}

var _ Bus = (*NATS)(nil)
