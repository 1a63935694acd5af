package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/uptrace/bun"
)

// Serve serves GET /metrics on a listener of its own at addr until the
// returned stop is called. It warns when addr binds every interface:
// metrics name routes, capability counts and error rates, fine for a
// scraper on a private network, not for the internet.
func (m *Metrics) Serve(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	log.Info("serving metrics", "addr", ln.Addr().String())
	if OnEveryInterface(addr) {
		log.Warn("metrics listen on every interface; bind a loopback or private address unless a firewall keeps them in", "addr", addr)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}, nil
}

// OnEveryInterface reports whether a listen address binds all interfaces
// (":9090", "0.0.0.0:9090", "[::]:9090").
func OnEveryInterface(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}

// FlushEvery writes the in-memory daily counts to db every period, and
// once more when ctx ends (shutdown), so that they survive a restart.
func (d *Daily) FlushEvery(ctx context.Context, db bun.IDB, period time.Duration, log *slog.Logger) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := d.Flush(fctx, db); err != nil {
				log.Warn("daily metrics not saved at shutdown", "err", err)
			}
			return
		case <-t.C:
			if err := d.Flush(ctx, db); err != nil && ctx.Err() == nil {
				log.Warn("daily metrics flush", "err", err)
			}
		}
	}
}
