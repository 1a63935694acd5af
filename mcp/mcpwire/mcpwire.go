// Package mcpwire assembles the /mcp transport of a server: the chain of
// bearer token verifiers (enclave's OAuth tokens through the
// revocation-aware caller cache, or the embedder's verifier; workspace
// keys; audited and burst-counted refusals), the defaults of mcp.Options
// (name, version, instructions, logger, tracer, bus), the SQL stores
// that let any replica serve any session, task and request state, the
// shared request-state key, and the transport's gauges. It owns no
// behaviour of its own: each part lives in mcp, mcp/verifiers,
// mcp/sqltasks or mcp/sqlsessions, and Wire connects them the way
// enclave.New does.
package mcpwire

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/internal/clientnet"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/internal/metrics"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/mcp/sqlsessions"
	"github.com/enclave-mcp/enclave/mcp/sqltasks"
	"github.com/enclave-mcp/enclave/mcp/verifiers"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/workspaces"
)

// RequestStateKeyName names the data key that seals the requestState of
// an input-required call (protocol 2026-07-28), shared by every replica.
const RequestStateKeyName = "mcp-request-state"

// Config is what Wire needs.
type Config struct {
	// Options are the embedder's (enclave.Config.MCP): what they set is
	// kept, what they leave unset Wire fills in. AllowedOrigins are
	// extended with Config.AllowedOrigins; Registry, Loader, BaseURL and
	// Verifier are always Wire's.
	Options mcp.Options
	// Verifier, when set, checks bearer tokens instead of enclave's own
	// OAuth server (enclave.Config.TokenVerifier); workspace keys, the
	// audit of refusals and the burst count still wrap it.
	Verifier mcp.TokenVerifier
	// CallerCacheTTL bounds the reuse of a verified token's caller (see
	// verifiers.CacheConfig.TTL).
	CallerCacheTTL time.Duration

	Store    *storage.Store
	Ring     *envelope.Ring // holds the request-state key; seals shared sessions
	Bus      cluster.Bus    // the cluster bus (a *cluster.Local keeps sessions in memory)
	Registry *capabilities.Registry
	Accounts *accounts.Service
	OAuth    *oauth.Server
	// Workspaces, when set, makes workspace API keys good bearer tokens.
	Workspaces *workspaces.Service
	// Audit records refused tokens that named their user.
	Audit *audit.Log
	// Metrics counts refusals and caller-cache use, and gets the
	// transport's gauges.
	Metrics *metrics.Metrics
	// Bursts returns the publisher counting denials for the burst alert
	// (nil until it is built).
	Bursts func() *events.BurstPublisher

	BaseURL        string
	AllowedOrigins []string
	// Version and Name are the serverInfo's defaults; Name also names the
	// site in the default instructions.
	Version, Name  string
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
}

// Wire builds the /mcp transport. stop ends reading the caller cache's
// SQL notices (call it before the bus and the database close; it does
// nothing when no cache was built). The default instructions name what
// the registry holds when Wire runs: call it after every built-in
// capability is registered.
func Wire(ctx context.Context, cfg Config) (srv *mcp.Server, stop func(), err error) {
	stop = func() {}
	opts := cfg.Options
	opts.Registry, opts.Loader, opts.BaseURL = cfg.Registry, cfg.Accounts, cfg.BaseURL
	opts.AllowedOrigins = append(slices.Clone(opts.AllowedOrigins), cfg.AllowedOrigins...)
	opts.Verifier = cfg.Verifier
	if opts.Verifier == nil {
		cache, stopCache, err := verifiers.NewCallerCache(verifiers.CacheConfig{TTL: cfg.CallerCacheTTL, Bus: cfg.Bus,
			DB: cfg.Store.DB, Reader: cfg.Store.Reader, Accounts: cfg.Accounts, OAuth: cfg.OAuth, Metrics: cfg.Metrics, Logger: cfg.Logger})
		if err != nil {
			return nil, stop, err
		}
		stop = stopCache
		opts.Verifier = verifiers.OAuth{Server: cfg.OAuth, Cache: cache}
	}
	defer func() {
		if err != nil {
			stop()
			stop = func() {}
		}
	}()
	if cfg.Workspaces != nil {
		opts.Verifier = verifiers.WorkspaceKeys{Next: opts.Verifier, Keys: cfg.Workspaces, Accounts: cfg.Accounts,
			Resource: func() string { return srv.Resource() }}
	}
	opts.Verifier = verifiers.Bursts{TokenVerifier: verifiers.Audited{Next: opts.Verifier, Audit: cfg.Audit,
		Refused: cfg.Metrics.TokenRefused, ClientIP: clientnet.Addr}, Bursts: cfg.Bursts}
	if opts.Version == "" {
		opts.Version = cfg.Version
	}
	if opts.Name == "" {
		opts.Name = cfg.Name
	}
	if opts.Instructions == "" {
		opts.Instructions = mcp.DefaultInstructions(opts.Name, cfg.Registry.Has)
	}
	if opts.Logger == nil {
		opts.Logger = cfg.Logger
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = cfg.TracerProvider
	}
	if opts.Tasks == nil {
		opts.Tasks = sqltasks.New(cfg.Store) // any replica answers for a task
	}
	if opts.Bus == nil {
		opts.Bus = cfg.Bus
	}
	if _, local := opts.Bus.(*cluster.Local); opts.Sessions == nil && !local {
		// Replicas share one database: any of them serves any session.
		opts.Sessions = sqlsessions.NewSealed(cfg.Store, cfg.Ring) // events and answers hold user content
	}
	if opts.States == nil {
		// A requestState is good once, whichever replica sees it.
		opts.States = sqlsessions.New(cfg.Store)
	}
	if opts.RequestStateKey == nil {
		// Shared by every replica, so any of them can take the next round
		// of an input-required call.
		if opts.RequestStateKey, err = cfg.Ring.NamedKey(ctx, RequestStateKeyName); err != nil {
			return nil, stop, err
		}
	}
	if srv, err = mcp.New(opts); err != nil {
		return nil, stop, err
	}
	cfg.Metrics.Gauge("enclave_mcp_sessions", "Live MCP sessions (protocols before 2026-07-28).", func() float64 { return float64(srv.Stats().Sessions) })
	cfg.Metrics.Gauge("enclave_mcp_streams", "Open MCP GET streams.", func() float64 { return float64(srv.Stats().Streams) })
	return srv, stop, nil
}
