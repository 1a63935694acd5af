package enclave

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/enclave-mcp/enclave/internal/metrics"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/internal/version"
)

// Version returns the release this binary was built as: the module
// version and VCS revision from the build, or the value a release build
// sets with -ldflags "-X github.com/enclave-mcp/enclave/internal/version.version=v1.2.3".
// It is shown by "enclave version", in the MCP serverInfo and on /readyz.
func Version() string { return version.String() }

// Ready reports whether the server can serve: the database answers, the
// schema is current, the keeper encrypts and decrypts, and it is not
// shutting down. The error is a short reason fit for a probe's answer.
func (s *Server) Ready(ctx context.Context) error { return s.health.Ready(ctx) }

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
