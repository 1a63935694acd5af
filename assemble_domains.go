package enclave

import (
	"context"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/feedback"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/quota"
)

// assembleEvents builds the event bus on the job queue (account changes
// and deletions reported to it, denials counted for the burst alert) and
// the platform feedback, which publishes on it; an account's deletion
// publishes user.deleted, then clears its name as feedback reviewer.
func (s *Server) assembleEvents(context.Context, *wiring) (err error) {
	if s.events, s.bursts, err = events.Wire(events.Config{Options: events.Options{Store: s.store, Jobs: s.jobs, Ring: s.ring,
		AllowPrivate: s.cfg.WebhookAllowPrivate, MaxFailures: s.cfg.WebhookMaxFailures, Logger: s.log},
		RootCAs: s.cfg.WebhookRootCAs, Burst: s.cfg.DenialBurst, Accounts: s.accounts, Deletions: s.lifecycle, Hashes: s.audit}, s.retention); err != nil {
		return err
	}
	s.feedback, err = feedback.Wire(feedback.Config{Options: feedback.Options{Store: s.store, Events: s.events, Jobs: s.jobs, Logger: s.log,
		BaseURL: s.cfg.BaseURL, Mail: s.accountMail.MailFeedbackDecision}, Deletions: s.lifecycle})
	return err
}

// burstPublisher is the denial-burst publisher once assembleEvents built
// it: the registry and the verifiers that count denials are built first.
func (s *Server) burstPublisher() *events.BurstPublisher { return s.bursts }

// assembleBuckets wires storage buckets (code mode's storage binding calls
// them, so they come first); a run's bucket is kept for at least twice
// the longest a run can last.
func (s *Server) assembleBuckets(_ context.Context, w *wiring) (err error) {
	s.buckets, err = buckets.Wire(buckets.Config{Options: s.cfg.Buckets, Store: s.store, Registry: s.registry, Owners: w.owners, Logger: s.log},
		s.schedules, s.retention, buckets.RetentionOptions{RunTimeout: s.cfg.CodeMode.Limits.WithDefaults().Timeout})
	return err
}

// assembleCodeMode wires code mode unless it is turned off.
func (s *Server) assembleCodeMode(_ context.Context, w *wiring) (err error) {
	s.codemode, err = codemode.Wire(codemode.Config{Options: s.cfg.CodeMode, Store: s.store, Registry: s.registry, Owners: w.owners,
		Loader: s.accounts, Bus: s.bus, Logger: s.log}, s.schedules)
	return err
}

// assembleMemory wires memories unless they are turned off.
func (s *Server) assembleMemory(_ context.Context, w *wiring) (err error) {
	s.memory, err = memory.Wire(memory.Config{Options: s.cfg.Memory, Store: s.store, Registry: s.registry, Owners: w.owners, Logger: s.log},
		s.schedules, s.retention)
	return err
}

// assembleIntegrations wires connected accounts unless they are turned
// off, and names them to those that stood in for them.
func (s *Server) assembleIntegrations(_ context.Context, w *wiring) (err error) {
	s.integrations, err = integrations.Wire(integrations.Config{Options: s.cfg.Integrations, Store: s.store, Ring: s.ring, Owners: w.owners,
		BaseURL: s.cfg.BaseURL, Audit: s.audit, Logger: s.log, Registry: s.registry}, s.schedules, s.retention)
	w.connections.Set(s.integrations)
	return err
}

// assembleRemoteMCP wires remote MCP servers unless they are turned off;
// an account's deletion revokes their tokens after its connected
// accounts.
func (s *Server) assembleRemoteMCP(_ context.Context, w *wiring) (err error) {
	s.remoteMCP, err = remotemcp.Wire(remotemcp.Config{Options: s.cfg.RemoteMCP, Store: s.store, Ring: s.ring, Owners: w.owners,
		Registry: s.registry, BaseURL: s.cfg.BaseURL, Audit: s.audit, Logger: s.log, Bus: s.bus, Deletions: s.lifecycle}, s.schedules, s.retention)
	return err
}

// assembleMail wires mailboxes unless they are turned off: outbound mail
// leaves through the transactional sender's mailer, and mail events reach
// the event bus.
func (s *Server) assembleMail(_ context.Context, w *wiring) (err error) {
	s.mail, s.smtpLn, err = mail.Wire(mail.Config{Options: s.cfg.Mail, Store: s.store, Owners: w.owners, Meter: s.meter, Audit: s.audit, Logger: s.log,
		Outbox: s.outbox, Sender: s.txMail.RawSender, Publish: s.events.Record}, s.registry, s.retention)
	return err
}

// assembleFederation wires sign-in with Config.SignInProviders.
func (s *Server) assembleFederation(_ context.Context, w *wiring) (err error) {
	s.federation, err = federation.Wire(federation.Config{Store: s.store, BaseURL: s.cfg.BaseURL, Providers: s.cfg.SignInProviders},
		w.owners, s.registry, s.retention)
	return err
}

// QuotaThreshold is the admin event of an account crossing 80 % or 100 %
// of one of its plan's limits, once per window.
//
// Deprecated: use quota.ThresholdEvent (plans live in quota).
const QuotaThreshold = quota.ThresholdEvent

// assemblePlans makes the meter enforce the accounts' plans, reports
// threshold crossings as admin events and registers the plans'
// capabilities; the storage buckets enforce the plans' storage bytes.
func (s *Server) assemblePlans(_ context.Context, w *wiring) error {
	plans, err := quota.WirePlans(quota.PlansConfig{Store: s.store, Registry: s.registry, Owners: w.owners, Meter: s.meter,
		Audited: w.admin.Community, Username: accounts.UsernameOf, Record: s.events.Record}, s.retention)
	s.buckets.FollowPlans(plans)
	return err
}

// assembleCommunity wires the community unless it or code mode is off.
func (s *Server) assembleCommunity(_ context.Context, w *wiring) (err error) {
	s.community, err = community.Wire(community.Config{Store: s.store, Owners: w.owners, Events: s.events, Logger: s.log},
		s.cfg.Community, s.codemode, s.registry, w.admin.Community, s.retention)
	return err
}
