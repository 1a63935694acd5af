package enclave

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/features"
	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/feedback"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/internal/health"
	"github.com/enclave-mcp/enclave/internal/httpmw"
	"github.com/enclave-mcp/enclave/internal/lanes"
	"github.com/enclave-mcp/enclave/internal/metrics"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/internal/requestid"
	"github.com/enclave-mcp/enclave/internal/tracing"
	"github.com/enclave-mcp/enclave/internal/version"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/web"
	"github.com/enclave-mcp/enclave/workspaces"
)

// Server is an assembled enclave server.
type Server struct {
	cfg     Config
	log     *slog.Logger
	store   *storage.Store
	handler http.Handler

	accounts  *accounts.Service
	registry  *capabilities.Registry
	inventory *storage.Inventory
	lifecycle *lifecycle.Service
	secrets   *secrets.Service
	audit     *audit.Log
	mcp       *mcp.Server
	oauth     *oauth.Server
	web       *web.Handler
	ring      *envelope.Ring
	outbox    *outbox.Outbox
	jobs      *jobs.Queue
	schedules *schedules.Set
	features  *features.Store
	meter     *quota.Meter
	retention *retention.Set
	purger    *retention.Runner // the retention program, on retention
	events    *events.Bus
	bursts    *events.BurstPublisher
	feedback  *feedback.Service
	bus       cluster.Bus
	ownBus    bool
	unfollow  func() // stops following data-key rotations on the bus
	// stopNotices stops reading other processes' caller-cache
	// invalidations from SQL (set when no cluster bus links them).
	stopNotices func()
	outbound    *outbound.Gateway

	// workspaces is nil unless Config.Workspaces is set.
	workspaces *workspaces.Service
	// codemode is nil when Config.CodeMode.Disabled is set.
	codemode *codemode.Service
	// buckets is nil when Config.Buckets.Disabled is set.
	buckets *buckets.Service
	// memory is nil when Config.Memory.Disabled is set.
	memory *memory.Service
	// integrations is nil when Config.Integrations.Disabled is set.
	integrations *integrations.Service
	// remoteMCP is nil when Config.RemoteMCP.Disabled is set.
	remoteMCP *remotemcp.Service
	// federation signs people in with external providers (never nil).
	federation *federation.Service
	// community is nil when the community (or code mode) is off.
	community *community.Service
	// mail is nil when Config.Mail.Disabled is set; smtpLn is its
	// listener, bound at assembly when Config.Mail.SMTPListen is set.
	mail   *mail.Service
	smtpLn net.Listener
	// txMail sends the platform's own mail (mail.Transactional, never nil
	// after assembly).
	txMail *mail.Transactional
	// accountMail writes the account, workspace and feedback mail and
	// sends it through txMail; the domains' mailers are wired to it.
	accountMail *mail.AccountMail

	metrics *metrics.Metrics
	health  *health.Probe

	closeOnce sync.Once
	closeErr  error
}

// Bus returns the cluster bus linking this replica to the others (an
// in-process bus on a single replica).
func (s *Server) Bus() cluster.Bus { return s.bus }

// Config returns the configuration in force, defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Store returns the server's stores, for embedders that keep their own data
// beside enclave's.
func (s *Server) Store() *storage.Store { return s.store }

// Registry returns the capability registry: register your own capabilities
// on it (before serving). Every call, from any transport, passes its Invoke.
func (s *Server) Registry() *capabilities.Registry { return s.registry }

// Accounts returns the account service (users, roles, sessions).
func (s *Server) Accounts() *accounts.Service { return s.accounts }

// Inventory returns the ownership inventory: register every table, blob
// prefix and KV prefix your capabilities keep per user, so that export and
// deletion cover them. Check it in a test with Inventory().Check.
func (s *Server) Inventory() *storage.Inventory { return s.inventory }

// Lifecycle returns the account export and deletion service.
func (s *Server) Lifecycle() *lifecycle.Service { return s.lifecycle }

// OAuth returns the authorization server.
func (s *Server) OAuth() *oauth.Server { return s.oauth }

// Web returns the web shell (account and admin pages).
func (s *Server) Web() *web.Handler { return s.web }

// Secrets returns the per-user secrets service.
func (s *Server) Secrets() *secrets.Service { return s.secrets }

// Jobs returns the durable post-commit job queue: register each job kind
// on it before Run, and enqueue jobs inside your transactions (see
// package jobs).
func (s *Server) Jobs() *jobs.Queue { return s.jobs }

// Schedules returns the set of periodic schedules: add yours before Run
// (see package schedules).
func (s *Server) Schedules() *schedules.Set { return s.schedules }

// Features returns the default SQL feature-flag store, or nil when
// Config.Features replaced it.
func (s *Server) Features() *features.Store { return s.features }

// Workspaces returns the workspaces service (register workspace
// operations with workspaces.Register), or nil when Config.Workspaces is
// nil.
func (s *Server) Workspaces() *workspaces.Service { return s.workspaces }

// CodeMode returns the code mode service, or nil when
// Config.CodeMode.Disabled turned it off.
func (s *Server) CodeMode() *codemode.Service { return s.codemode }

// Buckets returns the storage buckets service, or nil when
// Config.Buckets.Disabled turned it off.
func (s *Server) Buckets() *buckets.Service { return s.buckets }

// Memory returns the memory service, or nil when Config.Memory.Disabled
// turned it off.
func (s *Server) Memory() *memory.Service { return s.memory }

// Integrations returns the connected-accounts service, or nil when
// Config.Integrations.Disabled is set.
func (s *Server) Integrations() *integrations.Service { return s.integrations }

// RemoteMCP returns the remote MCP servers service, or nil when
// Config.RemoteMCP.Disabled is set.
func (s *Server) RemoteMCP() *remotemcp.Service { return s.remoteMCP }

// Mail returns the mail service, or nil when Config.Mail.Disabled turned
// it off.
func (s *Server) Mail() *mail.Service { return s.mail }

// SMTPAddr returns the address the inbound SMTP listener is bound to, or
// "" without one.
func (s *Server) SMTPAddr() string {
	if s.smtpLn == nil {
		return ""
	}
	return s.smtpLn.Addr().String()
}

// Federation returns the service signing people in with external
// providers.
func (s *Server) Federation() *federation.Service { return s.federation }

// Events returns the admin event bus: publish your own events inside your
// transactions (Events().Publish) and subscribe in process
// (Events().Subscribe, before Run). See package events.
func (s *Server) Events() *events.Bus { return s.events }

// Feedback returns the platform feedback service.
func (s *Server) Feedback() *feedback.Service { return s.feedback }

// Quota returns the SQL quota meter: it counts the outbound gateway's
// requests, and capability calls unless Config.Quota replaced it.
func (s *Server) Quota() *quota.Meter { return s.meter }

// Outbound returns the secret-aware outbound gateway: an embedder's
// capability handler sends a request on its caller's behalf with
// Outbound().Do(ctx, call.Caller, req), under the same rules as the
// httpRequest capability.
func (s *Server) Outbound() *outbound.Gateway { return s.outbound }

// InvokeBackground runs a capability for the user with stable id userID as
// a non-interactive caller: what jobs and schedules use. The account's
// roles and state are loaded fresh; the registry refuses suspended and
// deleting accounts and capabilities marked InteractiveOnly, exactly as it
// would for a request.
func (s *Server) InvokeBackground(ctx context.Context, userID, name string, args json.RawMessage) (capabilities.Result, error) {
	caller, err := s.accounts.LoadCaller(ctx, userID)
	if errors.Is(err, capabilities.ErrUnknownUser) {
		return capabilities.Result{}, capabilities.Errorf(capabilities.CodeNotFound, "no such account")
	}
	if err != nil {
		s.log.ErrorContext(ctx, "loading a background caller failed; it holds no roles", "err", err)
		caller = capabilities.FailClosed(userID, nil)
	}
	caller.Interactive = false
	caller.Session = false
	caller.AllScopes = true
	return s.registry.Invoke(ctx, caller, name, args)
}

// Audit returns the security audit log.
func (s *Server) Audit() *audit.Log { return s.audit }

// Handler returns the server's whole HTTP surface. It can be mounted in an
// embedder's mux or served by an embedder's http.Server.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.health.Healthz)
	mux.HandleFunc("GET /readyz", s.health.Readyz)
	mux.Handle(mcp.Path, s.mcp)
	mux.HandleFunc("GET "+remotemcp.ClientMetadataPath+"/{id}", s.remoteMCP.ServeClientDocument)
	s.oauth.Register(mux)
	mux.Handle("/", s.web)
	var routed http.Handler = mux
	if s.cfg.TracerProvider != nil {
		routed = tracing.Route(mux)
	}
	if s.cfg.Production {
		routed = httpmw.CanonicalHost(s.cfg.BaseURL, []string{"/healthz", "/readyz", mcp.Path}, routed)
	}
	inner := httpmw.ClientAddr(s.web.ClientKey, httpmw.AccessLog(s.log, s.metrics.ObserveHTTP,
		httpmw.RecoverPanics(s.log, httpmw.CORS(s.cfg.AllowedOrigins, routed))))
	traced := tracing.HTTP(tracing.Tracer(s.cfg.TracerProvider), func(r *http.Request) string { return httpmw.RouteClass(r.URL.Path) }, requestid.FromContext, inner)
	return httpmw.BodyDeadline(s.cfg.BodyReadTimeout, requestid.Middleware(traced))
}

// Run listens on Config.Addr and serves until ctx ends, then shuts down
// gracefully. It does not close the stores: call Close after Run returns.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("enclave: listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then stops accepting, lets requests in
// flight finish for up to Config.ShutdownTimeout, and closes the rest.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	if s.cfg.MetricsAddr != "" {
		stopMetrics, err := s.metrics.Serve(s.cfg.MetricsAddr, s.log)
		if err != nil {
			_ = hs.Close()
			return fmt.Errorf("enclave: %w", err)
		}
		defer stopMetrics()
	}
	defer s.mail.StartSMTP(s.smtpLn)()
	bgctx, stopBackground := context.WithCancel(context.Background())
	bgdone := make(chan struct{})
	go func() { s.RunBackground(bgctx); close(bgdone) }()
	defer func() { stopBackground(); <-bgdone }()
	s.log.Info("serving", "addr", ln.Addr().String(), "base_url", s.cfg.BaseURL)
	select {
	case err := <-errc:
		return fmt.Errorf("enclave: serve: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down", "timeout", s.cfg.ShutdownTimeout)
	// Stop accepting, and end the open MCP streams at once: they would
	// otherwise hold Shutdown until the timeout. Calls in flight finish.
	s.health.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	hs.RegisterOnShutdown(s.mcp.CloseStreams)
	if err := hs.Shutdown(sctx); err != nil {
		s.log.Warn("graceful shutdown timed out; closing connections", "err", err)
		_ = hs.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("enclave: serve: %w", err)
	}
	return nil
}

// RunBackground runs, until ctx ends, the outbox relay (mail written in
// the same transaction as its link, delivered with retries) and the
// periodic lanes (the retention program, interrupted account deletions).
// Serve and Run start it themselves; call it when you serve Handler from
// your own http.Server.
// Every replica runs it: each outbox row and each lane's period is taken by
// one replica.
func (s *Server) RunBackground(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	handlers := mail.RelayTopics(s.txMail, s.mail)
	maps.Copy(handlers, s.jobs.Topics())
	relay := outbox.NewRelay(s.store, s.ring, s.log, handlers)
	relay.OnAttempt = s.metrics.JobHandled
	wg.Go(func() { relay.Run(ctx) })
	wg.Go(func() { s.metrics.Daily.FlushEvery(ctx, s.store.DB, time.Minute, s.log) })
	if s.meter != nil {
		wg.Go(func() { s.meter.Run(ctx) })
	}
	// The retention program, the interrupted account deletions and the
	// workspaces' pending jobs.
	all := append([]lanes.Lane{lanes.Retention(s.purger)}, s.lifecycle.Lanes()...)
	all = append(all, s.workspaces.Lanes()...)
	for _, l := range s.schedules.Lanes() {
		all = append(all, lanes.Lane{Name: l.Name, Every: l.Every, Run: l.Run})
	}
	sched := lanes.New(s.store.DB, s.log, all...)
	sched.OnRun = s.metrics.LaneRan
	sched.Run(ctx)
}

// Retention returns the retention declarations: one policy per table.
// An embedder declares its own tables' policies here (for example
// srv.Retention().Add(retention.UntilAccountDeleted("notes"))) and checks
// them in a test with srv.Retention().Check(ctx, srv.Store().DB).
func (s *Server) Retention() *retention.Set { return s.retention }

// PurgeExpired runs the retention program once: every table past its
// window loses its expired rows, in batches of Config.RetentionBatch,
// round-robin, within Config.RetentionBudget. RunBackground runs it hourly
// as the "retention" lane on one replica at a time.
func (s *Server) PurgeExpired(ctx context.Context) (retention.Report, error) {
	return s.purger.Run(ctx)
}

// Close releases the stores. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.mcp != nil {
			s.mcp.Close()
		}
		if s.txMail != nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
			if err := s.txMail.Close(ctx); err != nil {
				s.log.Warn("queued mail not sent before shutdown", "err", err)
			}
			cancel()
		}
		if s.smtpLn != nil {
			_ = s.smtpLn.Close() // when never served
		}
		if s.codemode != nil {
			s.codemode.Close() // run records not yet written
		}
		if s.workspaces != nil {
			if err := s.workspaces.Close(); err != nil {
				s.log.Warn("close workspace files", "err", err)
			}
		}
		s.bursts.Close()    // the denials counted in the last moments
		s.meter.Close()     // the plan alerts being recorded
		s.remoteMCP.Close() // the tool lists being read again
		if s.unfollow != nil {
			s.unfollow()
		}
		if s.stopNotices != nil {
			s.stopNotices()
		}
		if s.ownBus {
			s.bus.Close()
		}
		s.closeErr = s.store.Close()
	})
	return s.closeErr
}

// Version returns the release this binary was built as: the module
// version and VCS revision from the build, or the value a release build
// sets with -ldflags "-X github.com/enclave-mcp/enclave/internal/version.version=v1.2.3".
// It is shown by "enclave version", in the MCP serverInfo and on /readyz.
func Version() string { return version.String() }

// Ready reports whether the server can serve: the database answers, the
// schema is current, the keeper encrypts and decrypts, and it is not
// shutting down. The error is a short reason fit for a probe's answer.
func (s *Server) Ready(ctx context.Context) error { return s.health.Ready(ctx) }

// MetricsHandler serves the server's Prometheus metrics. Serve exposes it
// on Config.MetricsAddr; embedders serving Handler themselves can mount it
// on a private listener. Never mount it on the public one.
func (s *Server) MetricsHandler() http.Handler { return s.metrics.Handler() }

// MetricsRegistry is the Prometheus registry behind MetricsHandler, for an
// embedder's own collectors.
func (s *Server) MetricsRegistry() *prometheus.Registry { return s.metrics.Registry() }
