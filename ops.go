package enclave

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/enclave-mcp/enclave/internal/httpmw"
	"github.com/enclave-mcp/enclave/internal/metrics"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/internal/version"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// Version returns the release this binary was built as: the module
// version and VCS revision from the build, or the value a release build
// sets with -ldflags "-X github.com/enclave-mcp/enclave/internal/version.version=v1.2.3".
// It is shown by "enclave version", in the MCP serverInfo and on /readyz.
func Version() string { return version.String() }

// applyMigrations applies enclave's migrations and then the embedder's.
func applyMigrations(ctx context.Context, store *storage.Store, cfg Config) error {
	res, err := migrations.Apply(ctx, store.DB)
	if err != nil {
		return err
	}
	for _, m := range res.Applied {
		cfg.Logger.Info("migration applied", "source", migrations.EnclaveSource, "version", m.Version, "name", m.Name)
	}
	for _, src := range cfg.Migrations {
		r, err := migrations.ApplySource(ctx, store.DB, src)
		if err != nil {
			return err
		}
		for _, m := range r.Applied {
			cfg.Logger.Info("migration applied", "source", src.Name, "version", m.Version, "name", m.Name)
		}
	}
	if len(res.Unknown) > 0 {
		cfg.Logger.Warn("database has migrations this binary does not know; a newer release migrated it", "versions", res.Unknown)
	}
	return nil
}

// pendingMigrations describes what is not applied, or "" when the schema
// is current.
func pendingMigrations(ctx context.Context, store *storage.Store, cfg Config) (string, error) {
	srcs := append([]migrations.Source{{Name: migrations.EnclaveSource}}, cfg.Migrations...)
	var behind []string
	for _, src := range srcs {
		var st migrations.Status
		var err error
		if src.Name == migrations.EnclaveSource && src.FS == nil {
			st, err = migrations.EnclaveStatus(ctx, store.DB)
		} else {
			st, err = migrations.StatusOf(ctx, store.DB, src)
		}
		if err != nil {
			return "", err
		}
		if !st.Current() {
			behind = append(behind, fmt.Sprintf("%s: %d pending, %d changed", src.Name, len(st.Pending), len(st.Changed)))
		}
	}
	return strings.Join(behind, "; "), nil
}

// checkMigrated is New's check with NoMigrate: the server starts on a
// schema that is behind (readyz says so) but logs it loudly.
func checkMigrated(ctx context.Context, store *storage.Store, cfg Config) error {
	st, err := migrations.EnclaveStatus(ctx, store.DB)
	if err != nil {
		return err
	}
	if len(st.Applied) == 0 {
		return errors.New("the database has never been migrated and migrations are off: run 'enclave migrate' first")
	}
	behind, err := pendingMigrations(ctx, store, cfg)
	if err != nil {
		return err
	}
	if behind != "" {
		cfg.Logger.Warn("migrations are pending and NoMigrate is set: run 'enclave migrate'; /readyz answers 503 until then", "pending", behind)
	}
	return nil
}

// healthz answers 200 while the process serves: no I/O, for a liveness
// probe (a database outage must not get the process restarted).
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	httpmw.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyCache keeps the last readiness result for a second, so that a
// flood of probes costs one check per second.
type readyCache struct {
	mu     sync.Mutex
	at     time.Time
	reason string
}

// Ready reports whether the server can serve: the database answers, the
// schema is current, the keeper encrypts and decrypts, and it is not
// shutting down. The error is a short reason fit for a probe's answer.
func (s *Server) Ready(ctx context.Context) error {
	if s.draining.Load() {
		return errors.New("shutting down")
	}
	s.ready.mu.Lock()
	defer s.ready.mu.Unlock()
	if time.Since(s.ready.at) > time.Second {
		// The result is shared for a second by every prober, so it must
		// not depend on this caller: a client that hangs up (ending its
		// request context) would otherwise make the server look unready
		// to the load balancer. checkReady bounds the check itself.
		s.ready.reason = s.checkReady(context.WithoutCancel(ctx))
		s.ready.at = time.Now()
	}
	if s.ready.reason != "" {
		return errors.New(s.ready.reason)
	}
	return nil
}

func (s *Server) checkReady(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.Warn("readiness: database unreachable", "err", err)
		return "database unreachable"
	}
	behind, err := pendingMigrations(ctx, s.store, s.cfg)
	if err != nil {
		s.log.Warn("readiness: migration status", "err", err)
		return "database unreachable"
	}
	if behind != "" {
		return "migrations pending (run enclave migrate)"
	}
	probe := []byte("enclave readiness probe")
	ct, err := s.store.Keeper.Encrypt(ctx, probe)
	if err == nil {
		var pt []byte
		pt, err = s.store.Keeper.Decrypt(ctx, ct)
		if err == nil && !bytes.Equal(pt, probe) {
			err = errors.New("round trip changed the data")
		}
	}
	if err != nil {
		s.log.Warn("readiness: keeper unusable", "err", err)
		return "keeper unusable"
	}
	return ""
}

// readyz answers 200 with the version when Ready, 503 with the reason
// otherwise: for a readiness probe and a load balancer.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if err := s.Ready(r.Context()); err != nil {
		httpmw.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": err.Error(), "version": Version()})
		return
	}
	httpmw.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": Version()})
}

// serverMetrics wires the metrics to the server's parts.
type serverMetrics struct{ *metrics.Metrics }

func newMetrics(s *Server) *serverMetrics {
	m := &serverMetrics{metrics.New()}
	m.DBStats(s.store.DB.DB, "primary")
	if s.store.Reader != nil && s.store.Reader != s.store.DB {
		m.DBStats(s.store.Reader.DB, "reader")
	}
	m.Queue(func(ctx context.Context) (int, int, error) { return outbox.Counts(ctx, s.store.Reader) })
	m.Gauge("enclave_mcp_sessions", "Live MCP sessions (protocols before 2026-07-28).", func() float64 {
		if s.mcp == nil {
			return 0
		}
		return float64(s.mcp.Stats().Sessions)
	})
	m.Gauge("enclave_mcp_streams", "Open MCP GET streams.", func() float64 {
		if s.mcp == nil {
			return 0
		}
		return float64(s.mcp.Stats().Streams)
	})
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "enclave_build_info", Help: "The running version.", ConstLabels: prometheus.Labels{"version": Version()}})
	info.Set(1)
	m.Registry().MustRegister(info)
	return m
}

// MetricsHandler serves the server's Prometheus metrics. Serve exposes it
// on Config.MetricsAddr; embedders serving Handler themselves can mount it
// on a private listener. Never mount it on the public one.
func (s *Server) MetricsHandler() http.Handler { return s.metrics.Handler() }

// MetricsRegistry is the Prometheus registry behind MetricsHandler, for an
// embedder's own collectors.
func (s *Server) MetricsRegistry() *prometheus.Registry { return s.metrics.Registry() }

// serveMetrics serves GET /metrics on addr until the returned func is
// called.
func (s *Server) serveMetrics(addr string) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("enclave: metrics listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics.Handler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	s.log.Info("serving metrics", "addr", ln.Addr().String())
	if httpmw.OnEveryInterface(addr) {
		// Metrics name routes, capability counts and error rates: fine for
		// a scraper on a private network, not for the internet.
		s.log.Warn("metrics listen on every interface; bind a loopback or private address unless a firewall keeps them in", "addr", addr)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}, nil
}
