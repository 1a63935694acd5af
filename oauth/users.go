package oauth

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ory/fosite"
	"github.com/uptrace/bun"
)

// account is the state of a user that decides whether it may use OAuth.
// oauth reads it straight from the users table: the bearer check joins it
// with the token in one query.
type account struct {
	ID                int64      `bun:"id"`
	StableID          string     `bun:"stable_user_id"`
	EmailVerifiedAt   *time.Time `bun:"email_verified_at"`
	PasswordChangedAt *time.Time `bun:"password_changed_at"`
	SuspendedAt       *time.Time `bun:"suspended_at"`
	DeletingAt        *time.Time `bun:"deleting_at"`
	CreatedAt         time.Time  `bun:"created_at"`
}

// Reasons an account gets no tokens. They surface as invalid_grant at the
// token endpoint, access_denied at the authorization endpoint and
// invalid_token at the resource.
var (
	ErrAccountSuspended = errors.New("oauth: account suspended")
	ErrAccountDeleting  = errors.New("oauth: account being deleted")
	ErrEmailNotVerified = errors.New("oauth: email not verified")
	ErrAccountNotFound  = errors.New("oauth: account not found")
	// ErrPasswordChanged: the grant was issued before the last password change.
	ErrPasswordChanged = errors.New("oauth: password changed since the grant")
	// ErrNotThisAccount: the token or grant was issued before the account
	// existed, or for another account (identities are never reused, so such
	// a credential belonged to an account that is gone).
	ErrNotThisAccount   = errors.New("oauth: issued before the account existed or for another account")
	accountRefusalHints = map[error]string{ErrAccountSuspended: "The account is suspended.", ErrAccountDeleting: "The account is being deleted.", ErrEmailNotVerified: "The account's email address is not verified.", ErrAccountNotFound: "The account does not exist.", ErrPasswordChanged: "The password changed after this grant was issued.", ErrNotThisAccount: "The grant does not belong to this account."}
)

// predates returns ErrNotThisAccount when something issued at issued
// predates acct: a credential of an earlier account can never be
// accepted by a later one, even if a row survived.
func predates(acct *account, issued time.Time) error {
	if issued.Before(acct.CreatedAt) {
		return ErrNotThisAccount
	}
	return nil
}

// refusal says why acct may not hold tokens issued at issuedAt, or nil.
func (s *Server) refusal(acct *account, issuedAt time.Time) error {
	switch {
	case acct.SuspendedAt != nil:
		return ErrAccountSuspended
	case acct.DeletingAt != nil:
		return ErrAccountDeleting
	case acct.EmailVerifiedAt == nil && !s.opts.AllowUnverifiedEmail:
		return ErrEmailNotVerified
	case !issuedAt.IsZero() && acct.PasswordChangedAt != nil && !issuedAt.After(*acct.PasswordChangedAt):
		return ErrPasswordChanged
	}
	return nil
}

func (s *Server) loadAccount(ctx context.Context, db bun.IDB, userID int64) (*account, error) {
	var acct account
	err := db.NewSelect().Table("users").
		Column("id", "stable_user_id", "email_verified_at", "password_changed_at", "suspended_at", "deleting_at", "created_at").
		Where("id = ?", userID).Scan(ctx, &acct)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrAccountNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("oauth: load account: %w", err)
	}
	return &acct, nil
}

// checkAccount returns nil when the user may hold tokens issued at
// issuedAt (zero: new tokens), and an invalid_grant error otherwise.
func (s *Server) checkAccount(ctx context.Context, userID int64, issuedAt time.Time) error {
	acct, err := s.loadAccount(ctx, s.store.db.Reader, userID)
	if err != nil && !errors.Is(err, ErrAccountNotFound) {
		return fosite.ErrServerError.WithWrap(err)
	}
	if err == nil {
		err = s.refusal(acct, issuedAt)
	}
	if err != nil {
		return refusalGrantError(err)
	}
	return nil
}

// refusalGrantError is the token endpoint's invalid_grant answer for an
// account refusal.
func refusalGrantError(err error) error {
	return &fosite.RFC6749Error{
		ErrorField:       fosite.ErrInvalidGrant.ErrorField,
		DescriptionField: accountRefusalHints[err],
		CodeField:        http.StatusBadRequest,
	}
}
