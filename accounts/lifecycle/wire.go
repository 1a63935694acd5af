package lifecycle

import (
	"context"
	"log/slog"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/internal/lanes"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// Revoker ends, at an account's deletion, what the account holds outside
// its own rows (connected accounts, remote servers' tokens); it must be
// idempotent.
type Revoker interface {
	RevokeAll(ctx context.Context, o storage.Owner) error
}

// Config is what Wire needs.
type Config struct {
	Store     *storage.Store
	Inventory *storage.Inventory
	Accounts  *accounts.Service
	Logger    *slog.Logger
	// Audit records the deletions the deletion-resume lane finished and
	// the outcome of each purged unverified sign-up.
	Audit *audit.Log
	// AllowUnverified is set when unverified accounts may work: they are
	// then never purged as abandoned sign-ups (RetentionOptions).
	AllowUnverified bool
	// Grants revokes every OAuth grant of an account (oauth.Server).
	Grants interface {
		RevokeAll(ctx context.Context, userID int64) error
	}
	// Connections revokes the account's connected accounts, best effort,
	// each attempt audited (integrations.Deferred, which stands for them
	// before they are wired).
	Connections Revoker
}

// Wire plugs account export and deletion into a server: it declares the
// retention of the users table and of the write leases in policies
// (first, so a run purges abandoned sign-ups before the other tables),
// and builds the service whose deletions revoke the account's OAuth
// grants and then its connected accounts (hooks run in that order, before
// any data goes; domains wired later add theirs with AddHooks and
// AddTxHooks). A deletion the deletion-resume lane (Lanes) finished is
// audited like one the account holder finished, with the reason
// "resumed".
func Wire(cfg Config, policies *retention.Set) (*Service, error) {
	svc := New(cfg.Store, cfg.Inventory, cfg.Accounts, Options{
		Logger: cfg.Logger,
		Hooks: []Hook{
			{Name: "revoke OAuth grants", Run: func(ctx context.Context, o storage.Owner) error {
				return cfg.Grants.RevokeAll(ctx, o.ID)
			}},
			{Name: "revoke connected accounts", Run: cfg.Connections.RevokeAll},
		},
		Resumed: func(ctx context.Context, o storage.Owner) {
			_ = cfg.Audit.Record(ctx, audit.Event{Category: audit.CategoryAccount, Action: "delete_account",
				Result: audit.ResultSuccess, Reason: "resumed", UserHash: cfg.Audit.HashUser(o.StableID)})
		},
	})
	if err := policies.Add(svc.RetentionPolicies(RetentionOptions{
		AllowUnverified: cfg.AllowUnverified,
		Record:          AuditPurge(cfg.Audit),
	})...); err != nil {
		return nil, err
	}
	return svc, nil
}

// Lanes returns the periodic lane that finishes the deletions a store
// failure or a crash interrupted: every 10 minutes, those marked deleting
// for over 5 minutes (the grace period leaves a deletion still running
// alone).
func (s *Service) Lanes() []lanes.Lane {
	return []lanes.Lane{{Name: "deletion-resume", Every: 10 * time.Minute, Run: func(ctx context.Context) error {
		_, err := s.ResumeDeletions(ctx, 5*time.Minute)
		return err
	}}}
}
