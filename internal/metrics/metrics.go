// Package metrics holds enclave's Prometheus metrics. Domain packages do
// not import Prometheus: they expose small hooks (the registry's Observer,
// the outbox relay's OnAttempt, the scheduler's OnRun) and the server wires
// them to the methods here.
//
// Every metric is named enclave_*. Label values come from fixed sets (route
// classes, denial reasons, registered capability names, lane names), never
// from request input, so the series count stays bounded.
package metrics

import (
	"context"
	"database/sql"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is one server's set of metrics, on a registry of its own.
type Metrics struct {
	reg *prometheus.Registry

	httpRequests  *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
	calls         *prometheus.CounterVec
	tokenRefusals *prometheus.CounterVec
	jobs          *prometheus.CounterVec
	laneRuns      *prometheus.CounterVec
	rateLimited   *prometheus.CounterVec
	purged        *prometheus.CounterVec

	// httpSeries keeps the request counter and duration observer of each
	// (route, status) seen (httpKey → *httpSeries): ObserveHTTP runs on
	// every request, and a vector's label lookup hashes and locks each time.
	httpSeries sync.Map

	// Daily keeps per-day call and denial counts for the admin overview.
	Daily *Daily
}

// New returns the metrics, with the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enclave_http_requests_total", Help: "HTTP requests by route class and status code.",
		}, []string{"route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "enclave_http_request_duration_seconds", Help: "HTTP request latency by route class (for streams: until the stream ends).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enclave_capability_calls_total", Help: "Capability calls (MCP, web, CLI) by capability and outcome: allowed, or the denial reason.",
		}, []string{"capability", "outcome"}),
		tokenRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enclave_token_refusals_total", Help: "Bearer tokens refused at /mcp, by reason.",
		}, []string{"reason"}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enclave_jobs_total", Help: "Outbox jobs handled by this replica, by topic and outcome (delivered, retried, dead).",
		}, []string{"topic", "outcome"}),
		laneRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enclave_schedule_runs_total", Help: "Scheduled lane runs on this replica, by lane and result (ok, error).",
		}, []string{"lane", "result"}),
		purged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enclave_retention_purged_rows_total", Help: "Rows removed by the retention program on this replica, by table.",
		}, []string{"table"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enclave_rate_limit_refusals_total", Help: "Requests refused by a rate limit (HTTP 429), by route class.",
		}, []string{"route"}),
		Daily: NewDaily(),
	}
	m.reg.MustRegister(m.httpRequests, m.httpDuration, m.calls, m.tokenRefusals, m.jobs, m.laneRuns, m.rateLimited, m.purged,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the Prometheus registry, to add an embedder's own
// collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveHTTP records one finished request.
func (m *Metrics) ObserveHTTP(route string, status int, d time.Duration) {
	k := httpKey{route: route, status: status}
	v, ok := m.httpSeries.Load(k)
	if !ok {
		v, _ = m.httpSeries.LoadOrStore(k, &httpSeries{
			requests: m.httpRequests.WithLabelValues(route, strconv.Itoa(status)),
			duration: m.httpDuration.WithLabelValues(route),
		})
	}
	series := v.(*httpSeries)
	series.requests.Inc()
	series.duration.Observe(d.Seconds())
	if status == http.StatusTooManyRequests {
		m.rateLimited.WithLabelValues(route).Inc()
	}
}

type httpKey struct {
	route  string
	status int
}

// httpSeries is one (route, status)'s series.
type httpSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// ObserveCall implements capabilities.Observer.
func (m *Metrics) ObserveCall(capability, outcome string) {
	if capability == "" {
		capability = "(unknown)"
	}
	m.calls.WithLabelValues(capability, outcome).Inc()
	m.Daily.add(time.Now(), outcome == "allowed")
}

// TokenRefused records a refused bearer token.
func (m *Metrics) TokenRefused(reason string) { m.tokenRefusals.WithLabelValues(reason).Inc() }

// JobHandled records an outbox attempt.
func (m *Metrics) JobHandled(topic, outcome string) { m.jobs.WithLabelValues(topic, outcome).Inc() }

// LaneRan records a scheduled run.
func (m *Metrics) LaneRan(lane string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.laneRuns.WithLabelValues(lane, result).Inc()
}

// Purged records rows the retention program removed from table.
func (m *Metrics) Purged(table string, rows int64) {
	m.purged.WithLabelValues(table).Add(float64(rows))
}

// Gauge adds a gauge read at scrape time.
func (m *Metrics) Gauge(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// DBStats adds the connection pool statistics of db (go_sql_*), labelled
// db_name=name.
func (m *Metrics) DBStats(db *sql.DB, name string) {
	m.reg.MustRegister(collectors.NewDBStatsCollector(db, name))
}

// Queue adds gauges of jobs waiting and given up, read by count at scrape
// time (bounded by a short timeout).
func (m *Metrics) Queue(count func(ctx context.Context) (queued, dead int, err error)) {
	m.reg.MustRegister(&queueCollector{count: count,
		queued: prometheus.NewDesc("enclave_jobs_queued", "Outbox jobs waiting to be delivered (including those to retry).", nil, nil),
		dead:   prometheus.NewDesc("enclave_jobs_dead", "Outbox jobs given up after their last attempt.", nil, nil),
	})
}

type queueCollector struct {
	count        func(ctx context.Context) (int, int, error)
	queued, dead *prometheus.Desc
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.queued; ch <- c.dead }

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	q, d, err := c.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.queued, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(q))
	ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(d))
}
