package cluster

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgresOptions configure NewPostgres.
type PostgresOptions struct {
	// DatabaseURL is the postgres:// URL of the deployment's database. The
	// listener holds one dedicated connection to it.
	DatabaseURL string
	// DB publishes (SELECT pg_notify). Default: a small pool opened from
	// DatabaseURL and closed by Close.
	DB *sql.DB
	// Channel is the LISTEN channel. Default "enclave_bus", suffixed with
	// the connection's schema when that is not "public", so deployments
	// sharing a database in separate schemas do not hear each other.
	Channel string
	// PingInterval is how often an idle listener checks its connection.
	// Default 5 s.
	PingInterval time.Duration
	// MaxBackoff bounds the wait between reconnection attempts. Default 5 s.
	MaxBackoff time.Duration
	// Logger receives connection losses and recoveries. Default slog.Default().
	Logger *slog.Logger
}

// Postgres is a Bus on PostgreSQL LISTEN/NOTIFY. One dedicated connection
// listens; it reconnects with backoff when it breaks, and signals a gap
// both when it notices the break and when it is back.
type Postgres struct {
	h       *hub
	opts    PostgresOptions
	cfg     *pgx.ConnConfig
	db      *sql.DB
	ownDB   bool
	channel string
	log     *slog.Logger

	mu     sync.Mutex
	pid    uint32
	cancel context.CancelFunc
	done   chan struct{}
}

type wireMessage struct {
	Node    string `json:"n"`
	Topic   string `json:"t"`
	Payload []byte `json:"p,omitempty"`
}

// NewPostgres connects the listener (failing if the database cannot be
// reached) and starts receiving.
func NewPostgres(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	cfg, err := pgx.ParseConfig(opts.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("cluster: database URL: %w", err)
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 5 * time.Second
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	p := &Postgres{h: newHub(), opts: opts, cfg: cfg, db: opts.DB, log: opts.Logger, done: make(chan struct{})}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.db == nil {
		pcfg := cfg.Copy()
		pcfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		p.db = stdlib.OpenDB(*pcfg)
		p.db.SetMaxOpenConns(2)
		p.ownDB = true
	}
	conn, err := p.connect(ctx)
	if err != nil {
		if p.ownDB {
			p.db.Close()
		}
		return nil, err
	}
	p.h.health.Store(true)
	runCtx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.run(runCtx, conn)
	return p, nil
}

// channelFor names the channel for a schema: enclave_bus, or
// enclave_bus_<schema> for a schema named in [a-z0-9_] that fits
// PostgreSQL's 63-byte identifier limit, else enclave_bus_<hash>. Schema
// names are case-sensitive ("Tenant" and "tenant" are two schemas), so
// another name is hashed rather than folded onto a neighbour's channel.
func channelFor(base, schema string) string {
	if schema == "" || schema == "public" {
		return base
	}
	name := base + "_" + schema
	plain := len(name) <= 63
	for _, c := range schema {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			plain = false
		}
	}
	if !plain {
		sum := sha256.Sum256([]byte(schema))
		name = base + "_" + hex.EncodeToString(sum[:12])
	}
	return name
}

func (p *Postgres) connect(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, p.cfg.Copy())
	if err != nil {
		return nil, fmt.Errorf("cluster: connect listener: %w", err)
	}
	if p.channel == "" {
		ch := p.opts.Channel
		if ch == "" {
			var schema string
			if err := conn.QueryRow(cctx, "SELECT current_schema()").Scan(&schema); err != nil {
				conn.Close(ctx)
				return nil, fmt.Errorf("cluster: read schema: %w", err)
			}
			ch = channelFor("enclave_bus", schema)
		}
		p.channel = ch
	}
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{p.channel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("cluster: listen: %w", err)
	}
	p.mu.Lock()
	p.pid = conn.PgConn().PID()
	p.mu.Unlock()
	return conn, nil
}

// Channel is the LISTEN channel in use.
func (p *Postgres) Channel() string { return p.channel }

// ListenerPID is the backend process id of the listening connection (for
// tests and diagnostics), or 0 while disconnected.
func (p *Postgres) ListenerPID() uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

func (p *Postgres) run(ctx context.Context, conn *pgx.Conn) {
	defer close(p.done)
	backoff := 50 * time.Millisecond
	for {
		err := p.receive(ctx, conn)
		conn.Close(context.Background())
		p.mu.Lock()
		p.pid = 0
		p.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		p.log.Warn("cluster: bus listener lost; reconnecting", "err", err)
		p.h.setHealthy(false)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			conn, err = p.connect(ctx)
			if err == nil {
				break
			}
			backoff = min(2*backoff, p.opts.MaxBackoff)
			p.log.Warn("cluster: bus reconnect failed", "err", err, "retry_in", backoff)
		}
		backoff = 50 * time.Millisecond
		p.log.Info("cluster: bus listener reconnected")
		p.h.setHealthy(true)
	}
}

func (p *Postgres) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, p.opts.PingInterval)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if (errors.Is(err, context.DeadlineExceeded) || isTimeout(err)) && !conn.PgConn().IsClosed() {
				pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
				perr := conn.Ping(pctx)
				pcancel()
				if perr != nil {
					return fmt.Errorf("ping: %w", perr)
				}
				continue
			}
			return err
		}
		var m wireMessage
		if json.Unmarshal([]byte(n.Payload), &m) != nil || m.Node == p.h.node || ValidTopic(m.Topic) != nil {
			continue
		}
		p.h.deliver(m.Topic, m.Payload)
	}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func (p *Postgres) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := checkMessage(topic, payload); err != nil {
		return err
	}
	if p.h.closed.Load() {
		return ErrClosed
	}
	p.h.deliver(topic, payload)
	b, err := json.Marshal(wireMessage{Node: p.h.node, Topic: topic, Payload: payload})
	if err != nil {
		return fmt.Errorf("cluster: encode: %w", err)
	}
	if _, err := p.db.ExecContext(ctx, "SELECT pg_notify($1, $2)", p.channel, string(b)); err != nil {
		return fmt.Errorf("cluster: publish %s: %w", topic, err)
	}
	return nil
}

func (p *Postgres) Subscribe(topic string, h Handler) func() { return p.h.subscribe(topic, h) }
func (p *Postgres) OnGap(fn func()) func()                   { return p.h.onGap(fn) }
func (p *Postgres) Healthy() bool                            { return p.h.health.Load() && !p.h.closed.Load() }
func (p *Postgres) Epoch() uint64                            { return p.h.epoch.Load() }
func (p *Postgres) Node() string                             { return p.h.node }

// Close stops the listener and, when NewPostgres opened it, the publishing
// pool.
func (p *Postgres) Close() error {
	if p.h.closed.Swap(true) {
		return nil
	}
	p.cancel()
	<-p.done
	if p.ownDB {
		return p.db.Close()
	}
	return nil
}

var _ Bus = (*Postgres)(nil)
