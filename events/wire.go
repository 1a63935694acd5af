package events

import (
	"context"
	"crypto/tls"
	"crypto/x509"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/internal/egress"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// Config is what Wire needs: the bus's Options (Store, Jobs, Ring,
// AllowPrivate, MaxFailures, Logger; Client is built by Wire) and the
// parts the bus is plugged into.
type Config struct {
	Options
	// RootCAs, when set, are the certificate authorities webhook targets'
	// certificates are checked against instead of the system's.
	RootCAs *x509.CertPool
	// Burst sets the denial-burst alert.
	Burst BurstOptions
	// Accounts reports its changes to the bus.
	Accounts *accounts.Service
	// Deletions, when set, publish user.deleted in the transaction that
	// deletes an account's rows (lifecycle.Service).
	Deletions interface{ AddTxHooks(...lifecycle.TxHook) }
	// Hashes names the subjects of burst alerts as the audit log does.
	Hashes interface {
		HashUser(stableUserID string) string
		HashIP(ip string) string
	}
}

// Wire plugs the event bus into a server: it builds the bus on the job
// queue with a webhook client that follows no redirect, publishes every
// account change (account created, suspended, role assigned, ...) in the
// change's own transaction and, with cfg.Deletions, every account's
// deletion (user.deleted) in the transaction deleting its rows, declares
// the retention of the denial-burst table in policies and returns the
// publisher of denial-burst alerts.
// Denials are counted in SQL, so every replica on the database adds to
// the same counts and one of them publishes each alert; the subjects are
// the audit log's hashes (HashIP groups a client by its network), so an
// alert's subject is the UserHash or IPHash of its audit rows.
func Wire(cfg Config, policies *retention.Set) (*Bus, *BurstPublisher, error) {
	var tlsConfig *tls.Config
	if cfg.RootCAs != nil {
		tlsConfig = &tls.Config{RootCAs: cfg.RootCAs}
	}
	cfg.Client = egress.NewClient(egress.Options{
		AllowPrivate: cfg.AllowPrivate,
		MaxRedirects: -1, // a redirect is a failed delivery, not a new target
		TLSConfig:    tlsConfig,
	})
	bus, err := New(cfg.Options)
	if err != nil {
		return nil, nil, err
	}
	cfg.Accounts.OnChange(func(ctx context.Context, tx bun.IDB, c accounts.Change) error {
		data := map[string]string{"userId": c.StableID}
		if c.Role != "" {
			data["role"] = c.Role
		}
		_, err := bus.Publish(ctx, tx, c.Kind, data)
		return err
	})
	if cfg.Deletions != nil {
		cfg.Deletions.AddTxHooks(lifecycle.TxHook{Name: "publish user.deleted", Run: func(ctx context.Context, tx bun.Tx, o storage.Owner) (int64, error) {
			_, err := bus.Publish(ctx, tx, UserDeleted, map[string]string{"userId": o.StableID})
			return 0, err
		}})
	}
	bursts := &BurstPublisher{
		Bus: bus, Bursts: NewSharedDenialBursts(cfg.Store, cfg.Burst),
		HashUser: cfg.Hashes.HashUser, HashNetwork: cfg.Hashes.HashIP,
	}
	if err := policies.Add(BurstRetention(cfg.Burst)); err != nil {
		return nil, nil, err
	}
	return bus, bursts, nil
}
