package enclave

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/internal/httpmw"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/quota"
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

// OverviewDay is one day of the admin overview's chart.
//
// Deprecated: use accounts.OverviewDay (adminOverview lives in accounts).
type OverviewDay = accounts.OverviewDay

// OverviewOutput is the output of adminOverview.
//
// Deprecated: use accounts.OverviewOutput.
type OverviewOutput = accounts.OverviewOutput
