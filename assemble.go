package enclave

import (
	"context"
	"fmt"
	"strings"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/capabilities/idempotency"
	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/features"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/internal/adminaudit"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/internal/health"
	"github.com/enclave-mcp/enclave/internal/metrics"
	"github.com/enclave-mcp/enclave/internal/otelsql"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/internal/ratelimit"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mcp/mcpwire"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/web"
	"github.com/enclave-mcp/enclave/workspaces"
)

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
	otelsql.Instrument(store, cfg.TracerProvider)
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
	s.metrics = metrics.NewServer(metrics.ServerSources{Primary: store.DB.DB, Reader: store.Reader.DB, Version: Version(),
		Queue: func(ctx context.Context) (int, int, error) { return outbox.Counts(ctx, store.Reader) }})
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

// wiring carries what one assembly step hands to a later one.
type wiring struct {
	auditKey []byte               // keys the audit log's hashes
	accounts accounts.Config      // as the accounts service was built
	clientIP *web.ClientIP        // one client-address rule for every transport
	limiter  *ratelimit.Limiter   // one SQL limiter for every transport
	pages    *web.PagesForwarder  // the OAuth pages, forwarded to the web shell
	owners   capabilities.OwnerOf // an account's owner of stored rows, for every domain
	admin    adminaudit.Recorder  // audits admin and account actions
	// connections stands for integrations before they are wired (the
	// outbound gateway and the account deletion use them).
	connections integrations.Deferred
}

// assemble builds the domain services on the open store and registers the
// built-in capabilities and ownership surfaces: a list of wiring steps, in
// dependency order.
func (s *Server) assemble(ctx context.Context) error {
	w := &wiring{}
	for _, step := range []func(context.Context, *wiring) error{
		s.openKeys,          // the data key ring and the audit log
		s.assembleAccounts,  // accounts, secrets, the outbox and the platform's mail
		s.assembleOAuth,     // the authorization server
		s.assembleLifecycle, // the ownership inventory, retention, deletion and export
		s.assembleRegistry,  // the capability registry, jobs and schedules
		s.assembleEvents,    // the event bus and feedback
		s.assembleBuiltins,  // the core's capabilities and the outbound gateway
		s.assembleBuckets,   // before code mode, whose storage binding calls them
		s.assembleCodeMode,
		s.assembleMemory,
		s.assembleIntegrations,
		s.assembleRemoteMCP,
		s.assemblePlans,     // after buckets, which enforce the plans' storage bytes
		s.assembleCommunity, // after code mode, whose packages it lists
		s.assembleMail,
		s.assembleFederation,
		s.assembleWorkspaces, // before the web shell, whose pages for them exist when they do
		s.assembleWeb,
		s.assembleMCP, // last: its default instructions name what is registered
	} {
		if err := step(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// openKeys opens the data key ring (followed on the bus: a key rotated on
// any replica is sealed with on every replica at once) and the audit log.
func (s *Server) openKeys(ctx context.Context, w *wiring) error {
	ring, err := envelope.Open(ctx, s.store.DB, s.store.Keeper)
	if err != nil {
		return err
	}
	s.unfollow = ring.Follow(s.bus, func(err error) { s.log.Warn("enclave: data key reload failed", "err", err) })
	if w.auditKey, err = ring.NamedKey(ctx, "audit"); err != nil {
		return err
	}
	s.audit = audit.New(s.store, w.auditKey, s.log)
	w.admin = adminaudit.Recorder{Log: s.audit, StableIDByUsername: func(ctx context.Context, username string) (string, error) {
		return accounts.StableIDByUsername(ctx, s.store.Reader, username)
	}}
	s.ring = ring
	return nil
}

// assembleAccounts builds the accounts service from Config.Accounts and
// the server's settings, the secrets store, the outbox and the
// transactional mail.
func (s *Server) assembleAccounts(ctx context.Context, w *wiring) error {
	w.accounts = s.cfg.Accounts
	acfg := &w.accounts
	if s.cfg.Signup != "" {
		acfg.Signup = s.cfg.Signup
	}
	if acfg.Logger == nil {
		acfg.Logger = s.log
	}
	// Behind a TLS-terminating proxy the request itself is plain HTTP: the
	// public base URL decides whether cookies are Secure and __Host-.
	if strings.HasPrefix(s.cfg.BaseURL, "https://") {
		acfg.SecureCookies = true
	}
	if s.cfg.RequireAdmin2FA {
		acfg.RequireAdminSecondFactor = true
	}
	if acfg.Passkeys.RPName == "" {
		acfg.Passkeys.RPName = s.cfg.SiteName // what the passkey prompt names
	}
	acfg.Passkeys = acfg.Passkeys.ForBaseURL(s.cfg.BaseURL)
	var err error
	if s.accounts, err = accounts.New(ctx, s.store, *acfg); err != nil {
		return err
	}
	s.secrets = secrets.NewWithRing(s.store, s.ring)
	s.outbox = outbox.New(s.ring)
	// The platform's own mail (verification, reset and setup links,
	// notices, invitations), written through the outbox; the web shell and
	// the account, workspace and feedback mailers get it directly.
	s.txMail = mail.NewTransactional(mail.TransactionalConfig{Mailer: s.cfg.Mailer, Outbox: s.outbox,
		Production: s.cfg.Production, Logger: s.log})
	s.accountMail = mail.NewAccountMail(s.txMail, s.store.DB, s.cfg.SiteName, s.cfg.BaseURL)
	return nil
}

// assembleOAuth builds the authorization server, whose login and consent
// pages the web shell renders (through w.pages, set by assembleWeb).
func (s *Server) assembleOAuth(ctx context.Context, w *wiring) error {
	// One client-address rule and one SQL limiter for every transport: the
	// OAuth server limits open registration with them, the web shell its
	// credential endpoints.
	w.clientIP = &web.ClientIP{TrustedProxies: s.cfg.TrustedProxies}
	w.limiter = ratelimit.New(s.store, nil)

	oopts := s.cfg.OAuth
	oopts.Store, oopts.BaseURL = s.store, s.cfg.BaseURL
	oopts.RegistrationLimiter, oopts.RegistrationLimit, oopts.ClientAddr = w.limiter, s.cfg.RegistrationLimit, w.clientIP.Addr
	if oopts.Logger == nil {
		oopts.Logger = s.log
	}
	// The web shell renders the OAuth login and consent pages; it is built
	// after the OAuth server (it lists and revokes grants), so the OAuth
	// server reaches it through a forwarder set below.
	w.pages = &web.PagesForwarder{}
	if oopts.LoginConsent == nil {
		oopts.LoginConsent = w.pages
	}
	var err error
	if s.oauth, err = oauth.New(ctx, oopts); err != nil {
		return err
	}
	// Sessions die with the password: a password change or reset revokes
	// every grant in the same transaction.
	s.accounts.OnPasswordChange(s.oauth.RevokeAllInTx)
	return nil
}

// assembleLifecycle collects the ownership inventory and the retention
// declarations (the users first) and builds the account lifecycle
// (deletion, export), whose deletions revoke OAuth grants and connected
// accounts.
func (s *Server) assembleLifecycle(_ context.Context, w *wiring) (err error) {
	w.owners = lifecycle.Owners(s.accounts)
	s.inventory = storage.NewInventory()
	if err := registerInventory(s.inventory); err != nil {
		return err
	}
	s.retention = retention.NewSet()
	if s.lifecycle, err = lifecycle.Wire(lifecycle.Config{Store: s.store, Inventory: s.inventory, Accounts: s.accounts, Logger: s.log,
		Audit: s.audit, AllowUnverified: s.cfg.OAuth.AllowUnverifiedEmail, Grants: s.oauth, Connections: &w.connections}, s.retention); err != nil {
		return err
	}
	s.purger = &retention.Runner{DB: s.store.DB, Set: s.retention, Batch: s.cfg.RetentionBatch, Budget: s.cfg.RetentionBudget,
		Logger: s.log, OnPurge: s.metrics.Purged}
	return declareRetention(s.retention, s.cfg, s.store)
}

// assembleRegistry builds the capability registry (vocabulary, quota,
// features, idempotency, write leases), the jobs and the schedules.
func (s *Server) assembleRegistry(ctx context.Context, w *wiring) error {
	// The embedder's entities reach SQL and the built-in roles before the
	// first caller is loaded.
	vocab := s.cfg.Vocabulary
	if vocab == nil {
		vocab, _ = capabilities.NewVocabulary()
	}
	if err := s.accounts.Roles.SyncVocabulary(ctx, vocab); err != nil {
		return err
	}
	flags, q := s.cfg.Features, s.cfg.Quota
	if flags == nil {
		s.features = features.New(s.store, s.log)
		flags = s.features
	}
	if !s.cfg.CodeMode.Disabled {
		s.cfg.QuotaLimits = codemode.QuotaLimits(s.cfg.QuotaLimits)
	}
	if !s.cfg.RemoteMCP.Disabled {
		s.cfg.QuotaLimits = remotemcp.QuotaLimits(s.cfg.QuotaLimits)
	}
	// The SQL meter always counts the outbound gateway's requests; it
	// counts capability calls when limits are set, unless Config.Quota
	// replaced it.
	s.meter = quota.New(s.store, s.cfg.QuotaLimits, s.log)
	if q == nil && s.cfg.QuotaLimits.Enabled() {
		q = s.meter
	}
	s.registry = capabilities.NewRegistry(capabilities.Options{
		Vocabulary: vocab,
		Auditor:    events.BurstAuditor{Next: s.audit, Bursts: s.burstPublisher},
		// The operator's command-line actions, audited by the choke point
		// with the operator as the actor.
		OperatorAudit: s.audit,
		AuditKey:      w.auditKey,
		Quota:         q,
		Features:      flags,
		Observer:      s.metrics,
		Logger:        s.log,
		// Keyed calls (_meta enclave/idempotencyKey) run once per user,
		// capability and key; results kept 24 hours.
		Idempotency: idempotency.New(s.store, s.ring),
		// Admin capabilities refuse an admin without a second factor when
		// --require-admin-2fa is set.
		RoleGate: s.accounts.SecondFactors.AdminSecondFactorGate,
		// Every call that may write holds a write lease on its account,
		// which the account's deletion waits for before it cleans up.
		WriteLease: lifecycle.WriteLeases(s.store, w.owners),
		// A span per call when tracing (name and outcome only).
		TracerProvider: s.cfg.TracerProvider,
	})
	s.jobs = jobs.New(s.outbox, s.InvokeBackground)
	s.schedules = schedules.New(s.InvokeBackground)
	return nil
}

// assembleBuiltins registers the built-in capabilities of the core
// domains and the outbound gateway.
func (s *Server) assembleBuiltins(_ context.Context, w *wiring) error {
	owners := w.owners
	caps := append(s.secrets.Capabilities(owners), s.lifecycle.Capabilities(owners)...)
	caps = append(caps, s.lifecycle.DeleteCapability())
	if s.features != nil {
		caps = append(caps, w.admin.Admin(s.features.Capabilities())...)
	}
	caps = append(caps, s.audit.Capability())
	caps = append(caps, s.oauth.Capabilities(owners)...)
	caps = append(caps, w.admin.Admin(s.oauth.AdminCapabilities())...)
	caps = append(caps, w.admin.Admin(s.accounts.InviteCapabilities())...)
	caps = append(caps, s.accounts.AccountCapabilities(accounts.AccountOptions{
		EmailChange:    s.accountMail,
		Verification:   s.accountMail.MailVerificationLink,
		UsernameChange: s.accountMail,
		EmailRelease:   s.accountMail,
		Audit:          w.admin.Account,
	})...)
	if !s.cfg.OAuth.AllowUnverifiedEmail {
		// The purge of unverified sign-ups on demand (also a retention
		// lane); off, like the lane, when unverified accounts may work.
		caps = append(caps, w.admin.Admin([]capabilities.Capability{s.lifecycle.PurgeCapability(lifecycle.AuditPurge(s.audit))})...)
	}
	// The setup link of an account an admin creates is mailed through the
	// outbox, in the creating transaction.
	caps = append(caps, s.accounts.AdminCapabilities(accounts.AdminOptions{MailSetupLink: s.accountMail.MailSetupLink})...)
	caps = append(caps, s.accounts.FactorCapabilities(s.cfg.SiteName, s.accountMail)...) // the authenticator-app issuer
	// The command line's account actions (internal/cli), as capabilities of
	// the operator's caller alone: invisible to and refused for everyone
	// else, audited like every call through the choke point.
	caps = append(caps, s.accounts.OperatorCapabilities()...)
	caps = append(caps, s.lifecycle.OperatorCapabilities()...)
	caps = append(caps, s.secrets.OperatorCapability(), s.oauth.OperatorCapability())
	caps = append(caps, s.accounts.OverviewCapability(accounts.OverviewSources{ActiveGrants: s.oauth.ActiveGrants, Days: s.metrics.Daily.Overview(s.store.Reader)}))
	caps = append(caps, w.admin.Admin(append(s.events.WebhookCapabilities(), s.feedback.Capabilities()...))...)
	s.outbound = outbound.New(outbound.Options{Secrets: s.secrets, Owner: owners, Quota: s.meter, Audit: s.audit,
		Limits: s.cfg.Outbound.WithQuota(s.cfg.QuotaLimits), Logger: s.log, Connections: &w.connections})
	caps = append(caps, s.outbound.Capability())
	if err := s.registry.Register(caps...); err != nil {
		return fmt.Errorf("register built-in capabilities: %w", err)
	}
	return nil
}

// assembleWorkspaces builds workspaces when configured; they come before
// the web shell, whose pages for them exist when their capabilities do.
func (s *Server) assembleWorkspaces(ctx context.Context, w *wiring) error {
	o := s.cfg.Workspaces
	if o == nil {
		return nil
	}
	var err error
	if s.workspaces, err = workspaces.New(ctx, workspaces.Config{
		Store: s.store, Registry: s.registry, Jobs: s.jobs, Mailer: s.accountMail, BaseURL: s.cfg.BaseURL,
		DataDir: s.cfg.DataDir, Dir: o.Dir, MaxOpen: o.MaxOpen, Schema: o.Schema, InvitationTTL: o.InvitationTTL, Logger: s.log,
		MaxFileSize: o.MaxFileSize, FileTypes: o.FileTypes, IdempotencyTTL: o.IdempotencyTTL,
		Audit: w.admin.Workspace, InvitationLimit: workspaces.InvitationLimitOf(s.meter, o.InvitationsPerDay),
		// Making a key takes the current password and, with a second
		// factor, a fresh proof of one.
		Reauthenticate: func(ctx context.Context, c capabilities.Caller, p workspaces.KeyProof) error {
			return s.accounts.SecondFactors.ReauthenticateCaller(ctx, c, p.Password,
				accounts.FactorProof{Code: p.Code, PasskeyToken: p.PasskeyToken, PasskeyCredential: p.PasskeyCredential})
		},
	}); err != nil {
		return err
	}
	// Keys die with the password: a password change or reset, and every
	// change of second factors that signs the account out everywhere,
	// revokes the account's keys in its own transaction.
	s.accounts.OnPasswordChange(s.workspaces.RevokeUserKeysInTx)
	if err := s.workspaces.Inventory(s.inventory); err != nil {
		return err
	}
	if s.store.Dialect() == storage.Postgres {
		if err := s.retention.Add(workspaces.StateRetentionPolicies(o.IdempotencyTTL)...); err != nil {
			return err
		}
	}
	return nil
}

// assembleWeb builds the web shell.
func (s *Server) assembleWeb(_ context.Context, w *wiring) error {
	wopts := web.Options{
		Store: s.store, Accounts: s.accounts, OAuth: s.oauth, Lifecycle: s.lifecycle, Audit: s.audit, Secrets: s.secrets,
		CodeMode:   s.codemode,
		Memory:     s.memory != nil,
		Outbox:     s.outbox,
		Federation: s.federation,
		Registry:   s.registry,
		BaseURL:    s.cfg.BaseURL, Production: s.cfg.Production, DevRoutes: !s.cfg.Production,
		// Session keys live in SQL, sealed by the keeper (or come from
		// Config.Accounts.SessionKeys): every replica and restart shares them.
		SessionKeysPersistent: true,
		TrustedProxies:        s.cfg.TrustedProxies,
		ClientIP:              w.clientIP,
		Limiter:               w.limiter,
		Mail:                  s.txMail,
		MinPasswordLength:     w.accounts.MinPasswordLength,
		Logger:                s.log,
		SiteName:              s.cfg.SiteName,
		SiteDescription:       s.cfg.SiteDescription,
		LogoURL:               s.cfg.LogoURL,
		AccentColor:           s.cfg.AccentColor,
	}
	var err error
	if s.web, err = web.New(wopts); err != nil {
		return err
	}
	w.pages.Set(s.web)
	return nil
}

// assembleMCP builds the /mcp transport: its token verifiers (OAuth or
// the embedder's, workspace keys, audited refusals), shared sessions,
// tasks and request states.
func (s *Server) assembleMCP(ctx context.Context, _ *wiring) (err error) {
	s.mcp, s.stopNotices, err = mcpwire.Wire(ctx, mcpwire.Config{Options: s.cfg.MCP, Verifier: s.cfg.TokenVerifier,
		CallerCacheTTL: s.cfg.CallerCacheTTL, Store: s.store, Ring: s.ring, Bus: s.bus, Registry: s.registry, Accounts: s.accounts,
		OAuth: s.oauth, Workspaces: s.workspaces, Audit: s.audit, Metrics: s.metrics, Bursts: s.burstPublisher, BaseURL: s.cfg.BaseURL,
		AllowedOrigins: s.cfg.AllowedOrigins, Version: Version(), Name: s.cfg.SiteName, Logger: s.log, TracerProvider: s.cfg.TracerProvider})
	return err
}
