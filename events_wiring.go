package enclave

import (
	"context"
	"crypto/tls"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/feedback"
	"github.com/enclave-mcp/enclave/internal/egress"
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
