package accounts

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// The link that releases a former email address: its mail-token purpose
// and how long it works.
const (
	PurposeReleaseEmail = "release_email"
	ReleaseEmailTTL     = 24 * time.Hour
)

// EmailReleaseMailer mails the link that releases a former address of an
// account. mail.AccountMail implements it.
type EmailReleaseMailer interface {
	// MailEmailReleaseLink sends token's link to email, a former address
	// of u. It runs inside the transaction that stores the token (write
	// the message to the outbox with tx).
	MailEmailReleaseLink(ctx context.Context, tx bun.IDB, u User, email, token string) error
}

// RequestEmailRelease starts the release of a former address of userID:
// it mails a link to that address (through mail, inside the transaction
// that stores the link's token); opening it (ReleaseEmailWithToken)
// proves the holder still controls the address and frees it. Until then
// the address stays claimed by the account. It returns the normalized
// address. ErrNotFound when userID holds no such former address (its
// current one included); ErrDeleting, ErrSuspended.
func (s *Identity) RequestEmailRelease(ctx context.Context, userID int64, rawEmail string, mail func(ctx context.Context, tx bun.IDB, u User, email, token string) error) (string, error) {
	email, err := NormalizeEmail(rawEmail)
	if err != nil {
		return "", fmt.Errorf("accounts: request email release: %w", err)
	}
	row, err := s.userWhere(ctx, s.store.Reader, "id = ?", userID)
	if err != nil {
		return "", fmt.Errorf("accounts: request email release: %w", err)
	}
	u := row.user()
	if err := u.CheckActive(); err != nil {
		return "", fmt.Errorf("accounts: request email release: %w", err)
	}
	if ok, err := s.holdsFormer(ctx, s.store.Reader, userID, email); err != nil {
		return "", fmt.Errorf("accounts: request email release: %w", err)
	} else if !ok {
		return "", fmt.Errorf("accounts: request email release: %w", ErrNotFound)
	}
	_, err = s.IssueMailToken(ctx, userID, PurposeReleaseEmail, email, "", ReleaseEmailTTL,
		func(ctx context.Context, tx bun.IDB, token string) error {
			if mail == nil {
				return nil
			}
			return mail(ctx, tx, u, email, token)
		})
	if err != nil {
		return "", err
	}
	return email, nil
}

// holdsFormer reports whether email is a former (not the current) address
// claimed by userID.
func (s *Identity) holdsFormer(ctx context.Context, db bun.IDB, userID int64, email string) (bool, error) {
	return db.NewSelect().TableExpr("email_claims AS c").Join("JOIN users AS u ON u.id = c.user_id").
		Where("c.user_id = ?", userID).Where("c.email = ?", email).Where("u.email <> c.email").Exists(ctx)
}

// ReleaseEmailWithToken uses a release link (see RequestEmailRelease):
// the former address it was mailed to stops being claimed by its
// account, so it can open an account again (a new one, with a fresh
// stable id, that verifies the address like any sign-up; the same
// account moving back to it verifies it too). It returns the account and
// the released address. A link that is unknown, used, expired, issued
// before the account's password last changed, or whose address the
// account no longer holds as a former one is refused with a *LinkError
// (ErrInvalidToken); ErrSuspended and ErrDeleting for such accounts.
func (s *Identity) ReleaseEmailWithToken(ctx context.Context, token string) (User, string, error) {
	row, err := s.TakeMailLink(ctx, token, PurposeReleaseEmail)
	if err != nil {
		return User{}, "", err
	}
	u, err := s.UserByID(ctx, row.UserID)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return User{}, "", &LinkError{Refusal: LinkUnknown}
		}
		return User{}, "", err
	}
	if err := u.CheckActive(); err != nil {
		return User{}, "", fmt.Errorf("accounts: release email: %w", err)
	}
	if err := s.ReleaseEmailClaim(ctx, row.UserID, row.Email); err != nil {
		if errors.Is(err, ErrNotFound) {
			// Released already, or it is the account's address again.
			return User{}, "", &LinkError{Refusal: LinkAddressLeft}
		}
		return User{}, "", err
	}
	s.cfg.Logger.InfoContext(ctx, "accounts: former email released", "user_id", u.ID)
	return u, strings.ToLower(row.Email), nil
}
