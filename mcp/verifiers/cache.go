package verifiers

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/internal/callercache"
	"github.com/enclave-mcp/enclave/internal/metrics"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/oauth"
)

// CacheConfig is what NewCallerCache connects the cache of verified
// callers to.
type CacheConfig struct {
	// TTL bounds an entry's reuse: zero means callercache.DefaultTTL,
	// negative caches nothing (invalidations are still written for other
	// processes).
	TTL time.Duration
	// Bus reaches the other replicas. A *cluster.Local bus reaches no one,
	// so invalidations go through SQL notices (an operator command runs
	// in a process of its own on the same database).
	Bus cluster.Bus
	// DB writes and Reader reads the SQL notices.
	DB, Reader *bun.DB
	// Accounts and OAuth call their hooks after every committed change of
	// what the cache holds: account state, roles, password, email,
	// username, permissions; revocations and blocked clients.
	Accounts interface {
		OnCallerChange(func(ctx context.Context, userID int64))
	}
	OAuth *oauth.Server
	// Metrics, when set, gets the cache's hit, miss, invalidation and
	// entry counts.
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// NewCallerCache makes the cache of verified bearer tokens' callers (the
// Cache of OAuth) and connects it to every write that changes what it
// holds. Other replicas hear of the changes on the bus; while the bus may
// be missing messages the cache is flushed and bypassed. The cache is nil
// when a negative TTL turns it off; stop ends reading SQL notices and
// waits for the retries of invalidations that failed to publish (call it
// before the bus and the database close).
func NewCallerCache(c CacheConfig) (cache *callercache.Cache[mcp.TokenInfo], stop func(), err error) {
	stop = func() {}
	cache = callercache.New[mcp.TokenInfo](callercache.Options{TTL: c.TTL})
	var notices *cluster.SQLNotices
	if _, local := c.Bus.(*cluster.Local); local {
		// No bus reaches the other processes on this database:
		// invalidations go through SQL, written even when this process
		// caches nothing, for those that do.
		notices, err = cluster.NewSQLNotices(cluster.SQLNoticesOptions{DB: c.DB, Reader: c.Reader,
			Local: c.Bus, Table: callercache.InvalidationTable, Topic: callercache.Topic, Logger: c.Logger})
		if err != nil {
			return nil, stop, err
		}
	}
	if !cache.Enabled() {
		if notices != nil {
			write := func(ctx context.Context, payload string) {
				wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = notices.Publish(wctx, callercache.Topic, []byte(payload))
			}
			c.Accounts.OnCallerChange(func(ctx context.Context, userID int64) { write(ctx, userPayload(userID)) })
			c.OAuth.OnRevoke(func(ctx context.Context, userID int64, grantID string) {
				write(ctx, revokePayload(userID, grantID))
			})
		}
		return nil, stop, nil
	}
	switch {
	case notices != nil:
		notices.Start()
		detach := cache.Attach(cacheBus{notices})
		stop = func() {
			detach() // the retries of failed notices write them to SQL
			_ = notices.Close()
		}
	case c.Bus != nil:
		stop = cache.Attach(cacheBus{c.Bus})
	}
	if c.Metrics != nil {
		cacheMetrics(c.Metrics, cache)
	}
	c.Accounts.OnCallerChange(func(ctx context.Context, userID int64) {
		if userID == 0 {
			cache.All(ctx)
			return
		}
		cache.UserChanged(ctx, userID)
	})
	c.OAuth.OnRevoke(func(ctx context.Context, userID int64, grantID string) {
		switch {
		case grantID != "":
			cache.GrantRevoked(ctx, grantID)
		case userID != 0:
			cache.UserChanged(ctx, userID)
		default:
			cache.All(ctx)
		}
	})
	return cache, stop, nil
}

// cacheMetrics exports the cache's counts.
func cacheMetrics(m *metrics.Metrics, c *callercache.Cache[mcp.TokenInfo]) {
	for _, s := range []struct {
		name, help string
		v          func(callercache.Stats) int64
	}{
		{"enclave_caller_cache_hits_total", "Bearer checks answered from the caller cache.", func(st callercache.Stats) int64 { return st.Hits }},
		{"enclave_caller_cache_misses_total", "Bearer checks the caller cache could not answer (they ran in SQL).", func(st callercache.Stats) int64 { return st.Misses }},
		{"enclave_caller_cache_invalidations_total", "Caller cache invalidations applied here (local and from the bus, flushes included).", func(st callercache.Stats) int64 { return st.Invalidations }},
	} {
		m.Registry().MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: s.name, Help: s.help}, func() float64 { return float64(s.v(c.Stats())) }))
	}
	m.Gauge("enclave_caller_cache_entries", "Entries held by the caller cache.", func() float64 { return float64(c.Len()) })
}

// userPayload and revokePayload are the invalidation payloads (see
// callercache.Topic) of an OnCallerChange and an OnRevoke call.
func userPayload(userID int64) string {
	if userID == 0 {
		return "*"
	}
	return "u:" + strconv.FormatInt(userID, 10)
}

func revokePayload(userID int64, grantID string) string {
	if grantID != "" {
		return "g:" + grantID
	}
	return userPayload(userID)
}

// cacheBus adapts the cluster bus to callercache.Bus.
type cacheBus struct{ cluster.Bus }

func (b cacheBus) Subscribe(topic string, h func(topic string, payload []byte)) func() {
	return b.Bus.Subscribe(topic, cluster.Handler(h))
}
