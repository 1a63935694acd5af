package federation

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
)

// Identity is an external identity linked to an account.
type Identity struct {
	bun.BaseModel `bun:"table:linked_identities"`

	ID         int64     `bun:"id,pk,autoincrement" json:"id"`
	UserID     int64     `bun:"user_id" json:"-"`
	Provider   string    `bun:"provider" json:"provider"`
	Issuer     string    `bun:"issuer" json:"issuer"`
	Subject    string    `bun:"subject" json:"subject"`
	CreatedAt  time.Time `bun:"created_at" json:"createdAt"`
	LastUsedAt time.Time `bun:"last_used_at" json:"lastUsedAt"`
}

// Outcome is what a verified identity leads to.
type Outcome int

const (
	// SignIn: the identity is linked to Decision.UserID; sign them in
	// (their second factor still applies unless Result.MFA).
	SignIn Outcome = iota + 1
	// Linked: the signed-in person who started the sign-in now has the
	// identity linked to their account (Decision.UserID).
	Linked
	// Prove: the identity's verified email is Decision.UserID's email.
	// Hold the link (HoldLink), ask the person for that account's
	// password or passkey, then CompleteLink.
	Prove
	// Create: nobody holds the identity or its verified email. Open an
	// account with the email (verified) if signup allows it, then Link.
	Create
)

// Decision is Resolve's answer.
type Decision struct {
	Outcome Outcome
	UserID  int64
}

// Resolve applies the linking rules to a verified identity. An error is
// one of the package's errors (safe to show) or a store failure.
func (s *Service) Resolve(ctx context.Context, res *Result) (Decision, error) {
	var linked Identity
	err := s.db.NewSelect().Model(&linked).Where("issuer = ? AND subject = ?", res.Issuer, res.Subject).Scan(ctx)
	switch {
	case err == nil:
		if res.UserID != 0 && linked.UserID != res.UserID {
			return Decision{}, ErrLinkedElsewhere
		}
		if _, err := s.db.NewUpdate().Model((*Identity)(nil)).Set("last_used_at = ?", s.cfg.Now().UTC()).
			Where("id = ? AND user_id = ?", linked.ID, linked.UserID).Exec(ctx); err != nil {
			return Decision{}, fmt.Errorf("federation: record use: %w", err)
		}
		out := SignIn
		if res.UserID != 0 {
			out = Linked
		}
		return Decision{Outcome: out, UserID: linked.UserID}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return Decision{}, fmt.Errorf("federation: find identity: %w", err)
	}
	if res.UserID != 0 {
		// A signed-in person links an identity to their own account: the
		// provider's email does not matter.
		if err := s.Link(ctx, res.UserID, res); err != nil {
			return Decision{}, err
		}
		return Decision{Outcome: Linked, UserID: res.UserID}, nil
	}
	if res.Email == "" {
		return Decision{}, ErrNoEmail
	}
	if !res.EmailVerified {
		// Unverified emails never link and never open an account: the
		// address would be the provider's say-so.
		return Decision{}, ErrUnverifiedEmail
	}
	var owner int64
	err = s.db.NewSelect().Table("users").Column("id").Where("email = ?", strings.ToLower(res.Email)).Scan(ctx, &owner)
	switch {
	case err == nil:
		return Decision{Outcome: Prove, UserID: owner}, nil
	case errors.Is(err, sql.ErrNoRows):
		return Decision{Outcome: Create}, nil
	default:
		return Decision{}, fmt.Errorf("federation: find account by email: %w", err)
	}
}

// Link links res's identity to userID. ErrLinkedElsewhere when another
// account holds it.
func (s *Service) Link(ctx context.Context, userID int64, res *Result) error {
	return s.LinkTx(ctx, s.db, userID, res)
}

// LinkOnCreate returns the hook that links res to an account inside the
// transaction opening it (accounts.ExternalSignupInput.OnCreated), so the
// web shell hands one domain's step to the other without holding the
// transaction itself.
func (s *Service) LinkOnCreate(res *Result) func(ctx context.Context, db bun.IDB, userID int64) error {
	return func(ctx context.Context, db bun.IDB, userID int64) error { return s.LinkTx(ctx, db, userID, res) }
}

// LinkTx is Link inside the caller's transaction (the one opening the
// account, see LinkOnCreate).
func (s *Service) LinkTx(ctx context.Context, db bun.IDB, userID int64, res *Result) error {
	now := s.cfg.Now().UTC()
	row := &Identity{UserID: userID, Provider: res.Provider, Issuer: res.Issuer, Subject: res.Subject, CreatedAt: now, LastUsedAt: now}
	r, err := db.NewInsert().Model(row).On("CONFLICT (issuer, subject) DO NOTHING").Returning("NULL").Exec(ctx)
	if err != nil {
		return fmt.Errorf("federation: link identity: %w", err)
	}
	if n, _ := r.RowsAffected(); n == 1 {
		return nil
	}
	// Already linked: to this account is fine, to another is not.
	held, err := db.NewSelect().Model((*Identity)(nil)).
		Where("issuer = ? AND subject = ? AND user_id = ?", res.Issuer, res.Subject, userID).Exists(ctx)
	if err != nil {
		return fmt.Errorf("federation: link identity: %w", err)
	}
	if !held {
		return ErrLinkedElsewhere
	}
	return nil
}

// HoldLink keeps res's identity waiting for the person to prove userID's
// account, for the browser holding binding, and returns the token that
// CompleteLink takes (put it in the proof form).
func (s *Service) HoldLink(ctx context.Context, binding string, res *Result, userID int64) (string, error) {
	token := random(32)
	row := &stateRow{StateHash: hash(token), BindingHash: hash(binding), Provider: res.Provider, Nonce: "-", Verifier: "-",
		ReturnTo: res.ReturnTo, LinkIssuer: res.Issuer, LinkSubject: res.Subject, UserID: &userID,
		ExpiresAt: s.cfg.Now().UTC().Add(s.cfg.StateTTL)}
	if _, err := s.db.NewInsert().Model(row).Returning("NULL").Exec(ctx); err != nil {
		return "", fmt.Errorf("federation: hold link: %w", err)
	}
	return token, nil
}

// PendingLink is a held link: the account to prove and the identity.
type PendingLink struct {
	UserID   int64
	Provider string
	ReturnTo string
}

// PeekLink returns the held link of token for the browser holding
// binding, without using it (to render the proof page).
func (s *Service) PeekLink(ctx context.Context, binding, token string) (*PendingLink, error) {
	var row stateRow
	err := s.db.NewSelect().Model(&row).Where("state_hash = ? AND link_subject <> ''", hash(token)).Scan(ctx)
	if err != nil || row.UserID == nil || row.BindingHash != hash(binding) || !s.cfg.Now().Before(row.ExpiresAt) {
		return nil, ErrBadState
	}
	return &PendingLink{UserID: *row.UserID, Provider: row.Provider, ReturnTo: row.ReturnTo}, nil
}

// CompleteLink links the held identity of token once the person proved
// the account: provedUserID is the account whose password or passkey they
// just presented. The token is used once.
func (s *Service) CompleteLink(ctx context.Context, binding, token string, provedUserID int64) (*PendingLink, error) {
	row, err := s.consume(ctx, token)
	if err != nil {
		return nil, err
	}
	if row.LinkSubject == "" || row.UserID == nil || *row.UserID != provedUserID ||
		row.BindingHash != hash(binding) || !s.cfg.Now().Before(row.ExpiresAt) {
		return nil, ErrBadState
	}
	res := &Result{Provider: row.Provider, Issuer: row.LinkIssuer, Subject: row.LinkSubject}
	if err := s.Link(ctx, provedUserID, res); err != nil {
		return nil, err
	}
	return &PendingLink{UserID: provedUserID, Provider: row.Provider, ReturnTo: row.ReturnTo}, nil
}

// Identities lists userID's linked identities, newest first.
func (s *Service) Identities(ctx context.Context, userID int64) ([]Identity, error) {
	out := []Identity{}
	if err := s.db.NewSelect().Model(&out).Where("user_id = ?", userID).Order("id DESC").Scan(ctx); err != nil {
		return nil, fmt.Errorf("federation: list identities: %w", err)
	}
	return out, nil
}

// Unlink removes userID's linked identity id, unless it is the account's
// last way to sign in (no password, no passkey, no other identity).
func (s *Service) Unlink(ctx context.Context, userID, id int64) error {
	return s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		// Removals of one account's identities take turns (the account's
		// row locked on PostgreSQL; SQLite has one writer): two at once
		// would each see the other identity left and remove both.
		if s.cfg.Store.Dialect() == storage.Postgres {
			var locked int64
			if err := tx.NewSelect().Table("users").Column("id").Where("id = ?", userID).For("UPDATE").Scan(ctx, &locked); err != nil {
				if errors.Is(err, sql.ErrNoRows) {
					return ErrNotFound
				}
				return fmt.Errorf("federation: unlink: %w", err)
			}
		}
		var row Identity
		err := tx.NewSelect().Model(&row).Where("id = ? AND user_id = ?", id, userID).Scan(ctx)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("federation: unlink: %w", err)
		}
		others, err := tx.NewSelect().Model((*Identity)(nil)).Where("user_id = ? AND id <> ?", userID, id).Count(ctx)
		if err != nil {
			return fmt.Errorf("federation: unlink: %w", err)
		}
		password, err := tx.NewSelect().Table("users").Where("id = ? AND password_hash IS NOT NULL", userID).Exists(ctx)
		if err != nil {
			return fmt.Errorf("federation: unlink: %w", err)
		}
		passkeys, err := tx.NewSelect().Table("user_passkeys").Where("user_id = ?", userID).Exists(ctx)
		if err != nil {
			return fmt.Errorf("federation: unlink: %w", err)
		}
		if others == 0 && !password && !passkeys {
			return ErrLastSignIn
		}
		if _, err := tx.NewDelete().Model((*Identity)(nil)).Where("id = ? AND user_id = ?", id, userID).Exec(ctx); err != nil {
			return fmt.Errorf("federation: unlink: %w", err)
		}
		return nil
	})
}
