package enclave

import (
	"context"
	"crypto/tls"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/federation/fedtables"
	"github.com/enclave-mcp/enclave/feedback"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/internal/egress"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/storage"
)

// assembleEvents builds the event bus on the job queue, reports account
// changes to it in their own transactions, and starts counting denials for
// the burst alert.
func (s *Server) assembleEvents() error {
	var tlsConfig *tls.Config
	if s.cfg.WebhookRootCAs != nil {
		tlsConfig = &tls.Config{RootCAs: s.cfg.WebhookRootCAs}
	}
	client := egress.NewClient(egress.Options{
		AllowPrivate: s.cfg.WebhookAllowPrivate,
		MaxRedirects: -1, // a redirect is a failed delivery, not a new target
		TLSConfig:    tlsConfig,
	})
	bus, err := events.New(events.Options{
		Store: s.store, Jobs: s.jobs, Ring: s.ring, Client: client,
		AllowPrivate: s.cfg.WebhookAllowPrivate, MaxFailures: s.cfg.WebhookMaxFailures, Logger: s.log,
	})
	if err != nil {
		return err
	}
	s.events = bus
	s.accounts.OnChange(func(ctx context.Context, tx bun.IDB, c accounts.Change) error {
		data := map[string]string{"userId": c.StableID}
		if c.Role != "" {
			data["role"] = c.Role
		}
		_, err := bus.Publish(ctx, tx, c.Kind, data)
		return err
	})
	s.feedback, err = feedback.New(feedback.Options{Store: s.store, Events: bus, Jobs: s.jobs, Logger: s.log, BaseURL: s.cfg.BaseURL,
		Mail: s.accountMail.MailFeedbackDecision})
	if err != nil {
		return err
	}
	// Denials are counted in SQL, so every replica on the database adds to
	// the same counts and one of them publishes each alert; the subjects
	// are the audit log's hashes (HashIP groups a client by its network),
	// so an alert's subject is the UserHash or IPHash of its audit rows.
	s.bursts = &events.BurstPublisher{
		Bus: bus, Bursts: events.NewSharedDenialBursts(s.store, s.cfg.DenialBurst),
		HashUser: s.audit.HashUser, HashNetwork: s.audit.HashIP,
	}
	if s.retention != nil {
		if err := s.retention.Add(events.BurstRetention(s.cfg.DenialBurst)); err != nil {
			return err
		}
	}
	return nil
}

// burstPublisher is the denial-burst publisher once assembleEvents built
// it: the registry and the verifiers that count denials are built first.
func (s *Server) burstPublisher() *events.BurstPublisher { return s.bursts }

// deletionEvent publishes user.deleted in the transaction that deletes the
// account's rows.
func (s *Server) deletionEvent() lifecycle.TxHook {
	return lifecycle.TxHook{Name: "publish user.deleted", Run: func(ctx context.Context, tx bun.Tx, o storage.Owner) (int64, error) {
		_, err := s.events.Publish(ctx, tx, events.UserDeleted, map[string]string{"userId": o.StableID})
		return 0, err
	}}
}

// lifecycleTxHooks run in the transaction that deletes an account: the
// user.deleted event, and clearing the account's name as reviewer from
// other people's feedback (its own feedback goes with its rows).
func (s *Server) lifecycleTxHooks() []lifecycle.TxHook {
	return []lifecycle.TxHook{s.deletionEvent(), {Name: "clear feedback reviewer", Updated: "sql:platform_feedback.reviewed_by",
		Run: func(ctx context.Context, tx bun.Tx, o storage.Owner) (int64, error) {
			return feedback.ClearReviewer(ctx, tx, o.ID)
		}}}
}

// assembleBuckets wires storage buckets (code mode's storage binding calls
// them, so they come first); a run's bucket is kept for at least twice
// the longest a run can last.
func (s *Server) assembleBuckets(owners capabilities.OwnerOf) (err error) {
	s.buckets, err = buckets.Wire(buckets.Config{Options: s.cfg.Buckets, Store: s.store, Registry: s.registry, Owners: owners, Logger: s.log},
		s.schedules, s.retention, buckets.RetentionOptions{RunTimeout: s.cfg.CodeMode.Limits.WithDefaults().Timeout})
	return err
}

// assembleCodeMode wires code mode unless it is turned off.
func (s *Server) assembleCodeMode(owners capabilities.OwnerOf) (err error) {
	s.codemode, err = codemode.Wire(codemode.Config{Options: s.cfg.CodeMode, Store: s.store, Registry: s.registry, Owners: owners,
		Loader: s.accounts, Bus: s.bus, Logger: s.log}, s.schedules)
	return err
}

// assembleMemory wires memories unless they are turned off.
func (s *Server) assembleMemory(owners capabilities.OwnerOf) (err error) {
	s.memory, err = memory.Wire(memory.Config{Options: s.cfg.Memory, Store: s.store, Registry: s.registry, Owners: owners, Logger: s.log},
		s.schedules, s.retention)
	return err
}

// assembleIntegrations wires connected accounts unless they are turned
// off, and names them to those that stood in for them.
func (s *Server) assembleIntegrations(w *wiring) (err error) {
	s.integrations, err = integrations.Wire(integrations.Config{Options: s.cfg.Integrations, Store: s.store, Ring: s.ring, Owners: w.owners,
		BaseURL: s.cfg.BaseURL, Audit: s.audit, Logger: s.log, Registry: s.registry}, s.schedules, s.retention)
	w.connections.Set(s.integrations)
	return err
}

// assembleRemoteMCP wires remote MCP servers unless they are turned off.
func (s *Server) assembleRemoteMCP(owners capabilities.OwnerOf) (err error) {
	s.remoteMCP, err = remotemcp.Wire(remotemcp.Config{Options: s.cfg.RemoteMCP, Store: s.store, Ring: s.ring, Owners: owners,
		Registry: s.registry, BaseURL: s.cfg.BaseURL, Audit: s.audit, Logger: s.log, Bus: s.bus}, s.schedules, s.retention)
	return err
}

// assembleMail wires mailboxes unless they are turned off: outbound mail
// leaves through the transactional sender's mailer, and mail events reach
// the event bus.
func (s *Server) assembleMail(owners capabilities.OwnerOf) (err error) {
	s.mail, s.smtpLn, err = mail.Wire(mail.Config{Options: s.cfg.Mail, Store: s.store, Owners: owners, Meter: s.meter, Audit: s.audit, Logger: s.log,
		Outbox: s.outbox, Sender: s.txMail.RawSender,
		Publish: func(ctx context.Context, db bun.IDB, typ string, data any) error {
			_, err := s.events.Publish(ctx, db, typ, data)
			return err
		}}, s.registry, s.retention)
	return err
}

// assembleFederation builds sign-in with Config.SignInProviders (the web
// shell's /auth/external routes use it) and registers identityList and
// identityUnlink; its tables exist whether or not providers are set.
func (s *Server) assembleFederation(owners capabilities.OwnerOf) (err error) {
	if err := s.retention.Add(fedtables.RetentionPolicies()...); err != nil {
		return err
	}
	if s.federation, err = federation.New(federation.Config{Store: s.store, BaseURL: s.cfg.BaseURL, Providers: s.cfg.SignInProviders}); err != nil {
		return err
	}
	if err := s.registry.Register(s.federation.Capabilities(owners)...); err != nil {
		return fmt.Errorf("register federation: %w", err)
	}
	return nil
}

// assembleCommunity declares the retention of the community's tables
// (they exist whether or not the community is on) and, unless it or code
// mode is off, builds the community: its capabilities, with every admin
// moderation action audited, and the enrichers of its community.* events.
func (s *Server) assembleCommunity(w *wiring) error {
	if err := s.retention.Add(community.RetentionPolicies()...); err != nil {
		return err
	}
	if err := s.assemblePlans(w); err != nil {
		return err
	}
	if s.cfg.Community.Disabled || s.codemode == nil {
		return nil
	}
	svc, err := community.New(community.Config{Store: s.store, Owners: w.owners, Packages: s.codemode, Events: s.events, Logger: s.log})
	if err != nil {
		return err
	}
	if err := s.registry.Register(w.admin.Community(svc.Capabilities())...); err != nil {
		return fmt.Errorf("register the community: %w", err)
	}
	s.community = svc
	return nil
}

// QuotaThreshold is the admin event of an account crossing 80 % or 100 %
// of one of its plan's limits, once per window.
const QuotaThreshold = "quota.threshold"

// assemblePlans makes the meter enforce the accounts' plans (daily and
// weekly windows; the --quota limits still apply), reports threshold
// crossings as quota.threshold admin events, and registers usageGet and
// the admins' plan capabilities (changes audited).
func (s *Server) assemblePlans(w *wiring) error {
	if err := s.retention.Add(quota.PlanRetentionPolicies()...); err != nil {
		return err
	}
	plans := quota.NewPlans(s.store)
	plans.OnAlert = func(ctx context.Context, tx bun.IDB, a quota.Alert) error {
		username, err := accounts.UsernameOf(ctx, tx, a.Owner)
		if err != nil {
			return err
		}
		_, err = s.events.Publish(ctx, tx, QuotaThreshold, map[string]any{
			"username": username, "meter": a.Meter, "window": a.Window, "period": a.Period, "threshold": a.Threshold, "limit": a.Limit,
		})
		return err
	}
	s.meter.SetPlans(plans)
	// The plan's storage bytes bound what an account stores in its
	// storage buckets (docs/community.md, "Storage"): the buckets' counter
	// enforces them, usageGet reports them.
	if s.buckets != nil {
		s.buckets.SetStorageLimit(plans.StorageLimit)
		plans.Storage = func(ctx context.Context, owner int64) (int64, int64, error) {
			u, err := s.buckets.Usage(ctx, storage.Owner{ID: owner})
			return u.Bytes, u.MaxBytes, err
		}
	}
	if err := s.registry.Register(w.admin.Community(plans.Capabilities(w.owners))...); err != nil {
		return fmt.Errorf("register plans: %w", err)
	}
	return nil
}
