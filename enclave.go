package enclave

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

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
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/internal/requestid"
	"github.com/enclave-mcp/enclave/internal/tracing"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/web"
	"github.com/enclave-mcp/enclave/workspaces"
)

// Config configures a Server. Every zero value is a documented default.
type Config struct {
	// Addr is the TCP address Run listens on. Default "127.0.0.1:8080".
	Addr string
	// BaseURL is the public URL of the server, without a trailing slash:
	// the OAuth issuer and the prefix of every link the server prints.
	// Default "http://" + Addr. Production requires https.
	BaseURL string

	// DataDir holds the embedded defaults (SQLite file, blobs, keeper key).
	// Default "enclave-data".
	DataDir string
	// Storage URLs; see storage.Config for each default and format.
	DatabaseURL, BlobURL, KVURL, QueueURL, KeeperURL string

	// Production turns on the checks that must hold on a public server
	// (for now: an https BaseURL) and turns off development conveniences.
	Production bool

	// ShutdownTimeout bounds how long Run waits for requests in flight when
	// its context ends. Default 15 s.
	ShutdownTimeout time.Duration

	// BodyReadTimeout bounds how long a request body may take to arrive
	// (a client trickling it is cut off); the answer, however long it
	// streams, is not bounded by it. Default 30 s (DefaultBodyReadTimeout).
	BodyReadTimeout time.Duration

	// Migrations are the embedder's own migration sources, applied in order
	// after enclave's (see migrations.ApplySource).
	Migrations []migrations.Source

	// TrustedProxies are the networks of reverse proxies whose
	// X-Forwarded-For is believed when deciding a client's address (rate
	// limits, audit). Default none: the client is the TCP peer.
	TrustedProxies []netip.Prefix

	// AllowedOrigins are the browser origins (scheme://host[:port], as a
	// browser sends them in the Origin header) that may call /mcp besides
	// the server's own origin (BaseURL's, or the one naming the request's
	// Host). A request from any other origin is refused with 403. The same
	// origins get CORS headers on /mcp, /oauth/token, /oauth/register and
	// the metadata documents. Default none (and no CORS headers). Added to
	// MCP.AllowedOrigins.
	AllowedOrigins []string

	// RegistrationLimit bounds dynamic client registrations (RFC 7591, open
	// by design) per client network: an address, or an IPv6 /64. Counted in
	// SQL, so it holds across replicas. Default 30 per hour.
	RegistrationLimit web.Limit

	// Mailer sends the platform's own mail (verification, reset, notices)
	// and hands outbound mail to the relay. Default: in development, a
	// mailer that keeps messages and shows them at /dev/mail; production
	// requires one (see mail.NewSMTPMailer).
	Mailer mail.Mailer

	// Accounts tunes password hashing, password policy and sessions; see
	// accounts.Config for each default.
	Accounts accounts.Config

	// OAuth tunes the authorization server (token lifetimes, refresh grace
	// window, client registration rules, extra scopes). Its Store, BaseURL
	// and Logger are set by New.
	OAuth oauth.Options

	// TokenVerifier checks the bearer tokens of /mcp. Default: enclave's own
	// authorization server. Set it to accept tokens from another issuer;
	// they must carry the audience BaseURL+"/mcp". A refusal is written to
	// the audit log only when the verifier names the token's user: return
	// a TokenInfo with UserID set together with the error for a token that
	// matched a grant but is refused. A token that matches nothing never
	// writes a row, so nobody can fill the log with made-up tokens. Every
	// error is a refusal (401) except one wrapping mcp.ErrTokenUnavailable,
	// the verifier's own outage: 503 with Retry-After, not audited.
	TokenVerifier mcp.TokenVerifier

	// CallerCacheTTL bounds how long a verified bearer token's caller
	// (account state, roles, permissions) is reused without the SQL bearer
	// check. Entries are dropped at once, on this replica and through the
	// cluster bus on the others, when anything they depend on changes
	// (revocation, password, suspension, roles, deletion, email); while the
	// bus reports a gap nothing is cached. Default 30 s; negative turns the
	// cache off (every call runs the bearer check). Only enclave's own
	// authorization server is cached, never a custom TokenVerifier.
	CallerCacheTTL time.Duration

	// MCP tunes the MCP endpoint (session TTL and limits, body limit). Its
	// Registry, Verifier, Loader, BaseURL and Logger are set by New.
	// MCP.Instructions is what clients are told about the server at
	// initialize (hosts put it in the model's context); empty means a short
	// default naming the site, capabilitiesSearch, and execute and the
	// other domains that are on.
	MCP mcp.Options

	// Vocabulary is the permission vocabulary: the built-in entities plus
	// the embedder's own (capabilities.NewVocabulary("note") adds
	// create:note:own … delete:note:own). New adds its permissions to SQL
	// and to the built-in roles (user: every :own permission; admin: all).
	// Default: the built-in vocabulary.
	Vocabulary *capabilities.Vocabulary

	// Quota limits capability calls per caller. Default: the SQL-backed
	// daily limits of QuotaLimits (see package quota); unlimited when
	// QuotaLimits sets none.
	Quota capabilities.Quota
	// QuotaLimits sets per-user daily call limits per capability class,
	// counted in memory and reconciled through SQL across replicas. Used
	// only when Quota is nil. Default: no limit.
	QuotaLimits quota.Limits
	// Outbound bounds the outbound gateway (httpRequest, Server.Outbound):
	// requests per user per day, time, redirects and sizes. Zero fields
	// take the defaults of package outbound.
	Outbound outbound.Limits
	// Features turns feature flags on per caller. Default: the SQL flag
	// store of package features, managed by admins through
	// adminFeatureList and adminFeatureSet.
	Features capabilities.Features

	// JobRetention is how long a job that gave up (a dead letter) is kept
	// for an operator before it is removed. Default 30 days.
	JobRetention time.Duration

	// RetentionBatch is the most rows one batch of the hourly retention
	// run removes from a table (see package retention). Default 500.
	RetentionBatch int
	// RetentionBudget is how long one retention run may keep starting
	// batches after its first pass over every table. Default 20 seconds.
	RetentionBudget time.Duration

	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger

	// NoMigrate leaves the schema alone at start-up (apply migrations with
	// "enclave migrate" first); /readyz reports 503 while any is pending.
	NoMigrate bool

	// MetricsAddr, when set, is the address Serve and Run expose Prometheus
	// metrics on (GET /metrics), on a listener of its own: never on the
	// public one. Default "": off. MetricsHandler serves the same.
	MetricsAddr string

	// TracerProvider, when set, traces requests with OpenTelemetry: a
	// server span per HTTP request, a span per MCP method, per capability
	// call (name and outcome, never arguments or results), per SQL
	// statement (operation and table, never values) and per outbound
	// gateway request (host and status); a W3C traceparent (HTTP header,
	// or MCP params._meta) continues the caller's trace, and audit rows
	// carry the trace id. The binary sets it from --otlp-endpoint (see
	// docs/tracing.md). Default nil: no spans, at no cost.
	TracerProvider trace.TracerProvider

	// WebhookAllowPrivate lets webhook subscriptions target private,
	// loopback and link-local addresses (--webhook-allow-private): for
	// tests and for targets on the operator's own network. https is
	// required regardless. Default false.
	WebhookAllowPrivate bool
	// WebhookRootCAs, when set, are the certificate authorities webhook
	// targets' TLS certificates are checked against instead of the
	// system's (a private CA; tests). Default nil: the system roots.
	WebhookRootCAs *x509.CertPool
	// WebhookMaxFailures is how many failed webhook deliveries in a row
	// disable a subscription (the admin sees why). Default 15.
	WebhookMaxFailures int
	// DenialBurst sets the denial-burst alert: denials at the choke point
	// counted per user and per client network (in memory, per replica);
	// reaching Threshold within Window publishes security.denial_burst,
	// then the subject stays quiet for Cooldown. Defaults 50, 1 h, 6 h.
	DenialBurst events.BurstOptions
	// Bus links the replicas of a deployment (session messages, cache
	// invalidation, list-changed notices). Default: opened from BusURL.
	// An embedder-supplied bus is not closed by Close.
	Bus cluster.Bus
	// BusURL chooses the bus when Bus is nil: "local" (one process),
	// "postgres" (LISTEN/NOTIFY on DatabaseURL) or nats://host:port.
	// Default: postgres with a postgres:// DatabaseURL, local otherwise.
	BusURL string

	// Signup says who may create an account on the web shell: SignupOpen
	// (default), SignupInvite (an admin's invite code is needed) or
	// SignupClosed (accounts come from the CLI only).
	Signup accounts.SignupMode

	// RequireAdmin2FA requires admins to have a second factor (an
	// authenticator app or a passkey): the admin pages send an admin
	// without one to enrolment, and admin capabilities refuse with
	// capabilities.CodeSecondFactorRequired (sets
	// Accounts.RequireAdminSecondFactor). Default off.
	RequireAdmin2FA bool
	// Workspaces, when set, turns on shared workspaces (package
	// workspaces): their capabilities, and Server.Workspaces for
	// registering workspace operations. Nil leaves them off.
	Workspaces *workspaces.Options
	// CodeMode tunes code mode (package codemode): execute, saved
	// packages whose exports become their owner's own capabilities,
	// package jobs and run records. On by default; CodeMode.Disabled turns
	// it off. Its calls are quota class codemode.QuotaClass ("execute"):
	// codemode.DefaultDailyRuns per user per day unless QuotaLimits names
	// that class.
	CodeMode codemode.Options
	// Buckets tunes storage buckets (package buckets): each user's JSON
	// key/value buckets (storageGet, storageSet, storageList, …), which
	// code mode's storage binding uses, with a per-user budget
	// (Buckets.MaxBytes, default 100 MiB; Buckets.MaxKeys, default
	// 100,000). On by default; Buckets.Disabled turns them off (code
	// mode's storage then answers that storage is off).
	Buckets buckets.Options
	// Memory tunes memories (package memory): each user's memories with
	// full-text search (memorySave, memorySearch, memoryGet, memoryUpdate,
	// memoryDelete, memoryList), the memory:// resources, the "memories"
	// prompt and the /account/memory page; semantic search when
	// Memory.Embeddings names an embeddings API. On by default;
	// Memory.Disabled turns them off.
	Memory memory.Options
	// Integrations configures connected accounts (package integrations):
	// the operator's OAuth providers (--integration), connectionList and
	// connectionDisconnect, the /account/connections page, the
	// {{connection:NAME}} placeholder of the outbound gateway and the
	// token refresh lane. On by default (with no provider, people have
	// nothing to connect); Integrations.Disabled turns them off.
	Integrations integrations.Options
	// RemoteMCP tunes remote MCP servers (package integrations/remotemcp):
	// mcpServerAdd/List/Remove/Refresh, the /account/mcp-servers page and
	// each server's tools as its owner's capabilities (mcp_<name>__<tool>,
	// quota class "remote"). On by default; RemoteMCP.Disabled turns it off.
	RemoteMCP remotemcp.Options
	// SignInProviders are the external identity providers people may sign
	// in and sign up with (package federation; --sign-in-provider): buttons
	// on the sign-in and sign-up pages and on /oauth/authorize's sign-in
	// step. None by default.
	SignInProviders []federation.Provider
	// Community tunes community packages (package community): listings,
	// forks, ratings, reports and their moderation. On whenever code mode
	// is; Community.Disabled turns it off.
	Community community.Options
	// Mail configures mailboxes (package mail): each user's address
	// <username>@Mail.Domain, the inbound SMTP listener on
	// Mail.SMTPListen (enclave serve --smtp-listen, --mail-domain), the
	// system mailboxes of the reserved local parts and the mail
	// capabilities (mailList, mailRead, ...). On by default (without a
	// domain no address is ours); Mail.Disabled turns it off.
	Mail mail.Options

	// SiteName is the name of the service people see: every page title
	// and the pages' header, the start and connect pages, mail subjects
	// and bodies, the consent page, the authenticator-app issuer, the
	// passkey relying-party name (unless Accounts.Passkeys.RPName is set)
	// and the MCP server name (unless MCP.Name is set). At most 64
	// characters, no control characters. Default "enclave".
	SiteName string
	// SiteDescription is the sentence the start page shows under the site
	// name: what this server is for. Default: a generic sentence.
	SiteDescription string
	// LogoURL, when set, is the image shown before the site name in the
	// pages' header: a path on this server ("/brand/logo.svg") that the
	// embedder serves (see web.Options.LogoURL). Default none.
	LogoURL string
	// AccentColor, when set, is the pages' accent colour (links, buttons):
	// "#rrggbb" or "#rgb". Default the shell's own.
	AccentColor string
}

// DefaultAddr is the listen address used when Config.Addr is empty.
const DefaultAddr = "127.0.0.1:8080"

// DefaultBodyReadTimeout is the default of Config.BodyReadTimeout.
const DefaultBodyReadTimeout = httpmw.DefaultBodyReadTimeout

// withDefaults fills the zero fields and validates the result.
func (c Config) withDefaults() (Config, error) {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.BaseURL == "" {
		c.BaseURL = "http://" + c.Addr
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return c, fmt.Errorf("enclave: base URL %q: want http(s)://host[:port][/path] without query or fragment", c.BaseURL)
	}
	if c.Production && u.Scheme != "https" {
		return c, fmt.Errorf("enclave: production mode needs an https base URL, got %q", c.BaseURL)
	}
	if c.Production && c.MCP.Anonymous != nil {
		return c, errors.New("enclave: MCP without authentication (MCP.Anonymous) is refused in production mode")
	}
	if c.DataDir == "" {
		c.DataDir = storage.DefaultDataDir
	}
	if c.SiteName = strings.TrimSpace(c.SiteName); c.SiteName == "" {
		c.SiteName = web.DefaultSiteName
	}
	if c.RegistrationLimit.Requests <= 0 || c.RegistrationLimit.Window <= 0 {
		c.RegistrationLimit = web.Limit{Requests: 30, Window: time.Hour}
	}
	if c.JobRetention <= 0 {
		c.JobRetention = 30 * 24 * time.Hour
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.BodyReadTimeout <= 0 {
		c.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

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

	metrics *serverMetrics
	health  *health.Probe

	closeOnce sync.Once
	closeErr  error
}

// New opens the stores named by cfg, applies pending migrations and builds
// the HTTP surface. Close releases what it opened.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	store, err := storage.Open(ctx, storage.Config{
		DataDir:     cfg.DataDir,
		DatabaseURL: cfg.DatabaseURL,
		BlobURL:     cfg.BlobURL,
		KVURL:       cfg.KVURL,
		QueueURL:    cfg.QueueURL,
		KeeperURL:   cfg.KeeperURL,
		Logger:      cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("enclave: %w", err)
	}
	traceSQL(store, cfg.TracerProvider)
	if cfg.NoMigrate {
		if err := migrations.CheckStart(ctx, store.DB, cfg.Migrations, cfg.Logger); err != nil {
			store.Close()
			return nil, fmt.Errorf("enclave: %w", err)
		}
	} else if err := migrations.ApplyAll(ctx, store.DB, cfg.Migrations, cfg.Logger); err != nil {
		store.Close()
		return nil, fmt.Errorf("enclave: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, store: store, bus: cfg.Bus,
		health: &health.Probe{Store: store, Sources: cfg.Migrations, Version: Version(), Log: cfg.Logger}}
	if s.bus == nil {
		b, err := cluster.Open(ctx, cluster.OpenOptions{BusURL: cfg.BusURL, DatabaseURL: cfg.DatabaseURL, DB: store.DB.DB, Logger: cfg.Logger})
		if err != nil {
			store.Close()
			return nil, fmt.Errorf("enclave: %w", err)
		}
		s.bus, s.ownBus = b, true
	}
	s.metrics = newMetrics(s)
	if err := s.assemble(ctx); err != nil {
		if s.ownBus {
			s.bus.Close()
		}
		store.Close()
		return nil, fmt.Errorf("enclave: %w", err)
	}
	s.handler = s.routes()
	return s, nil
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
	handlers := map[string]outbox.Handler{mail.TransactionalTopic: s.txMail.Handler()}
	if s.mail != nil {
		handlers[mail.OutboundTopic] = s.mail.OutboundHandler()
	}
	for topic, h := range s.jobs.Topics() {
		handlers[topic] = h
	}
	relay := outbox.NewRelay(s.store, s.ring, s.log, handlers)
	relay.OnAttempt = s.metrics.JobHandled
	wg.Go(func() { relay.Run(ctx) })
	wg.Go(func() { s.metrics.Daily.FlushEvery(ctx, s.store.DB, time.Minute, s.log) })
	if s.meter != nil {
		wg.Go(func() { s.meter.Run(ctx) })
	}
	all := []lanes.Lane{
		// One lane purges every table past its retention window, in
		// small batches, round-robin (see retention_policies.go).
		lanes.Lane{Name: "retention", Every: time.Hour, Run: func(ctx context.Context) error {
			_, err := s.PurgeExpired(ctx)
			return err
		}},
		// Deletions a store failure or a crash interrupted are finished
		// here; the grace period leaves one still running alone.
		lanes.Lane{Name: "deletion-resume", Every: 10 * time.Minute, Run: func(ctx context.Context) error {
			_, err := s.lifecycle.ResumeDeletions(ctx, 5*time.Minute)
			return err
		}},
	}
	if s.workspaces != nil {
		// Jobs an op recorded in its workspace file but could not move to
		// the outbox (SQLite; a crash or a failure after the commit).
		all = append(all, lanes.Lane{Name: "workspace-jobs", Every: time.Minute, Run: func(ctx context.Context) error {
			_, err := s.workspaces.SweepPendingJobs(ctx, time.Minute, 200)
			return err
		}})
	}
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
	r := &retention.Runner{
		DB: s.store.DB, Set: s.retention, Batch: s.cfg.RetentionBatch, Budget: s.cfg.RetentionBudget,
		Logger: s.log, OnPurge: s.metrics.Purged,
	}
	return r.Run(ctx)
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
		if s.bursts != nil {
			s.bursts.Close() // the denials counted in the last moments
		}
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
