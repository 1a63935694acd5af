package enclave

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/internal/callercache"
	"github.com/enclave-mcp/enclave/mcp"
)

// newCallerCache makes the cache of verified bearer tokens' callers and
// connects it to every write that changes what it holds: the accounts
// service (state, roles, password, email, username, permissions) and the
// OAuth server (revocations, blocked clients). Both call their hooks after
// their transaction commits, before the change's caller gets its answer.
// Other replicas hear of the changes on the cluster bus; while the bus may
// be missing messages the cache is flushed and bypassed.
func (s *Server) newCallerCache() *callercache.Cache[mcp.TokenInfo] {
	c := callercache.New[mcp.TokenInfo](callercache.Options{TTL: s.cfg.CallerCacheTTL})
	var notices *cluster.SQLNotices
	if _, local := s.bus.(*cluster.Local); local {
		// No bus reaches the other processes on this database (an operator
		// command runs in one of its own): invalidations go through SQL.
		// Written even when this process caches nothing, for those that do.
		var err error
		notices, err = cluster.NewSQLNotices(cluster.SQLNoticesOptions{DB: s.store.DB, Reader: s.store.Reader,
			Local: s.bus, Table: callercache.InvalidationTable, Topic: callercache.Topic, Logger: s.log})
		if err != nil {
			panic(err) // the options above are complete
		}
	}
	if !c.Enabled() {
		if notices != nil {
			write := func(ctx context.Context, payload string) {
				wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = notices.Publish(wctx, callercache.Topic, []byte(payload))
			}
			s.accounts.OnCallerChange(func(ctx context.Context, userID int64) { write(ctx, userPayload(userID)) })
			s.oauth.OnRevoke(func(ctx context.Context, userID int64, grantID string) {
				write(ctx, revokePayload(userID, grantID))
			})
		}
		return nil
	}
	switch {
	case notices != nil:
		notices.Start()
		s.stopNotices = func() { _ = notices.Close() }
		c.Attach(cacheBus{notices})
	case s.bus != nil:
		c.Attach(cacheBus{s.bus})
	}
	if s.metrics != nil {
		reg := s.metrics.Registry()
		for _, m := range []struct {
			name, help string
			v          func(callercache.Stats) int64
		}{
			{"enclave_caller_cache_hits_total", "Bearer checks answered from the caller cache.", func(st callercache.Stats) int64 { return st.Hits }},
			{"enclave_caller_cache_misses_total", "Bearer checks the caller cache could not answer (they ran in SQL).", func(st callercache.Stats) int64 { return st.Misses }},
			{"enclave_caller_cache_invalidations_total", "Caller cache invalidations applied here (local and from the bus, flushes included).", func(st callercache.Stats) int64 { return st.Invalidations }},
		} {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help}, func() float64 { return float64(m.v(c.Stats())) }))
		}
		s.metrics.Gauge("enclave_caller_cache_entries", "Entries held by the caller cache.", func() float64 { return float64(c.Len()) })
	}
	s.accounts.OnCallerChange(func(ctx context.Context, userID int64) {
		if userID == 0 {
			c.All(ctx)
			return
		}
		c.UserChanged(ctx, userID)
	})
	s.oauth.OnRevoke(func(ctx context.Context, userID int64, grantID string) {
		switch {
		case grantID != "":
			c.GrantRevoked(ctx, grantID)
		case userID != 0:
			c.UserChanged(ctx, userID)
		default:
			c.All(ctx)
		}
	})
	return c
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
