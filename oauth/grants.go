package oauth

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"

	"github.com/enclave-mcp/enclave/storage"
)

type grantRow struct {
	bun.BaseModel `bun:"table:oauth_grants,alias:g"`

	ID         string    `bun:"id,pk"`
	UserID     int64     `bun:"user_id"`
	ClientID   string    `bun:"client_id"`
	Scopes     string    `bun:"scopes"`
	Audience   string    `bun:"audience"`
	CreatedAt  time.Time `bun:"created_at"`
	LastUsedAt time.Time `bun:"last_used_at"`
}

type consentRow struct {
	bun.BaseModel `bun:"table:oauth_consents,alias:cs"`

	ID        string    `bun:"id,pk"`
	UserID    int64     `bun:"user_id"`
	ClientID  string    `bun:"client_id"`
	Scopes    string    `bun:"scopes"`
	CreatedAt time.Time `bun:"created_at"`
}

// Grant is one authorization a user gave a client: the family of tokens
// issued from one approval.
type Grant struct {
	ID         string    `json:"id"`
	ClientID   string    `json:"clientId"`
	ClientName string    `json:"clientName"`
	Scopes     []string  `json:"scopes"`
	CreatedAt  time.Time `json:"createdAt"`
	LastUsedAt time.Time `json:"lastUsedAt"`
}

// ErrGrantNotFound is returned by RevokeGrant for a grant that does not
// exist or belongs to another user.
var ErrGrantNotFound = errors.New("oauth: grant not found")

// Grants lists the grants of a user (internal id), newest first.
func (s *Server) Grants(ctx context.Context, userID int64) ([]Grant, error) {
	var rows []struct {
		ID         string    `bun:"id"`
		ClientID   string    `bun:"client_id"`
		ClientName string    `bun:"client_name"`
		Scopes     string    `bun:"scopes"`
		CreatedAt  time.Time `bun:"created_at"`
		LastUsedAt time.Time `bun:"last_used_at"`
	}
	err := s.store.db.Reader.NewSelect().
		TableExpr("oauth_grants AS g").
		ColumnExpr("g.id, g.client_id, c.name AS client_name, g.scopes, g.created_at, g.last_used_at").
		Join("JOIN oauth_clients AS c ON c.id = g.client_id").
		Where("g.user_id = ?", userID).
		OrderExpr("g.created_at DESC, g.id").
		Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("oauth: list grants: %w", err)
	}
	out := make([]Grant, 0, len(rows))
	for _, r := range rows {
		out = append(out, Grant{
			ID:         r.ID,
			ClientID:   r.ClientID,
			ClientName: r.ClientName,
			Scopes:     strings.Fields(r.Scopes),
			CreatedAt:  r.CreatedAt,
			LastUsedAt: r.LastUsedAt,
		})
	}
	return out, nil
}

// RevokeGrant ends one grant of a user: its access and refresh tokens stop
// working at once, and the consent for its client is forgotten. A refresh
// of the grant running at the same time either finishes first (and what it
// issued is revoked too) or finds the grant gone.
func (s *Server) RevokeGrant(ctx context.Context, userID int64, grantID string) error {
	if !storable(grantID) {
		return ErrGrantNotFound // from a URL: no grant has such an id
	}
	defer s.revoked(ctx, userID, grantID)
	return s.store.db.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		grants, err := lockGrants(ctx, tx, "id = ? AND user_id = ?", grantID, userID)
		if err != nil {
			return fmt.Errorf("oauth: revoke grant: %w", err)
		}
		if len(grants) == 0 {
			return ErrGrantNotFound
		}
		if err := revokeLocked(ctx, tx, grantID); err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*consentRow)(nil)).
			Where("user_id = ? AND client_id = ?", userID, grants[0].ClientID).Exec(ctx); err != nil {
			return fmt.Errorf("oauth: forget consent: %w", err)
		}
		return nil
	})
}

// RevokeAll ends every grant of a user and forgets every consent: every
// token and code they hold stops working. Password change, password reset
// and account deletion call it.
func (s *Server) RevokeAll(ctx context.Context, userID int64) error {
	defer s.revoked(ctx, userID, "")
	return s.store.db.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		return s.RevokeAllInTx(ctx, tx, userID)
	})
}

// RevokeAllInTx is RevokeAll inside the caller's transaction, so that a
// password change and the revocation commit together. Its signature is
// that of accounts' password-change hook. It first locks every grant of
// the user, so that refreshes in flight finish before the tokens are
// deleted and later ones find no grant.
func (s *Server) RevokeAllInTx(ctx context.Context, tx bun.Tx, userID int64) error {
	if _, err := lockGrants(ctx, tx, "user_id = ?", userID); err != nil {
		return fmt.Errorf("oauth: revoke all: %w", err)
	}
	for _, model := range []any{(*tokenRow)(nil), (*grantRow)(nil), (*consentRow)(nil)} {
		if _, err := tx.NewDelete().Model(model).Where("user_id = ?", userID).Exec(ctx); err != nil {
			return fmt.Errorf("oauth: revoke all: %w", err)
		}
	}
	return nil
}

// lockGrants reads the grants matching where and, on PostgreSQL, holds
// their row locks until the transaction ends (in id order, so two
// revocations cannot deadlock). Refresh takes the same lock before it
// issues anything, so a refresh and a revocation of one grant never
// interleave: the revocation's deletes, each a new statement under READ
// COMMITTED, see every token a refresh committed before it. On SQLite the
// write transaction already serializes writers.
func lockGrants(ctx context.Context, db bun.IDB, where string, args ...any) ([]grantRow, error) {
	var rows []grantRow
	q := db.NewSelect().Model(&rows).Where(where, args...).Order("id")
	if db.Dialect().Name() == dialect.PG {
		q = q.For("UPDATE")
	}
	if err := q.Scan(ctx); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("lock grant: %w", err)
	}
	return rows, nil
}

// consentKey is the canonical form of a scope set.
func consentKey(scopes []string) string {
	s := slices.Clone(scopes)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), " ")
}

// hasConsent reports whether the user already approved these scopes for
// this client.
func (s *Server) hasConsent(ctx context.Context, userID int64, clientID string, scopes []string) (bool, error) {
	n, err := s.store.db.Reader.NewSelect().Model((*consentRow)(nil)).
		Where("user_id = ? AND client_id = ? AND scopes = ?", userID, clientID, consentKey(scopes)).Count(ctx)
	if err != nil {
		return false, fmt.Errorf("oauth: read consent: %w", err)
	}
	return n > 0, nil
}

func (s *Server) rememberConsent(ctx context.Context, userID int64, clientID string, scopes []string) error {
	key := consentKey(scopes)
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d\x00%s\x00%s", userID, clientID, key)))
	row := &consentRow{ID: hex.EncodeToString(sum[:]), UserID: userID, ClientID: clientID, Scopes: key, CreatedAt: s.opts.Now().UTC()}
	if _, err := s.store.db.DB.NewInsert().Model(row).On("CONFLICT DO NOTHING").Returning("NULL").Exec(ctx); err != nil {
		return fmt.Errorf("oauth: remember consent: %w", err)
	}
	return nil
}

// Cleanup removes expired codes and tokens, and clients idle for longer
// than Options.ClientIdleTTL (with everything issued to them). Run it
// periodically; it is idempotent and safe on every replica.
func (s *Server) Cleanup(ctx context.Context) (tokens, clients int64, err error) {
	now := s.opts.Now().UTC()
	res, err := s.store.db.DB.NewDelete().Model((*tokenRow)(nil)).Where("expires_at < ?", now).Exec(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("oauth: purge tokens: %w", err)
	}
	tokens, _ = res.RowsAffected()
	// A grant whose tokens are all gone is over.
	if _, err := s.store.db.DB.NewDelete().Model((*grantRow)(nil)).
		Where("NOT EXISTS (SELECT 1 FROM oauth_tokens AS t WHERE t.request_id = g.id)").
		Exec(ctx); err != nil {
		return tokens, 0, fmt.Errorf("oauth: purge grants: %w", err)
	}
	res, err = s.store.db.DB.NewDelete().Model((*clientRow)(nil)).
		Where("last_used_at < ?", now.Add(-s.opts.ClientIdleTTL)).Exec(ctx)
	if err != nil {
		return tokens, 0, fmt.Errorf("oauth: reap clients: %w", err)
	}
	clients, _ = res.RowsAffected()
	if clients > 0 {
		s.revoked(ctx, 0, "") // their tokens went with them
	}
	return tokens, clients, nil
}

// InventoryTables lists the user-owned tables of package oauth for the
// storage ownership inventory. Grants and consents are exported; tokens are
// nothing but credentials, so they are deleted with the account and never
// exported. Linked enterprise identities are exported (issuer and subject).
func InventoryTables() []storage.Table {
	return []storage.Table{
		{Name: "oauth_grants"},
		{Name: "oauth_consents"},
		{Name: "oauth_tokens", KeyColumn: "signature", SkipExport: true},
		{Name: "oauth_enterprise_identities"},
	}
}
