package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
)

// Token purposes and lifetimes.
const (
	purposeVerifyEmail   = "verify_email"
	purposeResetPassword = "reset_password"
	purposeChangeEmail   = "change_email"

	// VerifyEmailTTL is how long an email-verification link works.
	VerifyEmailTTL = 24 * time.Hour
	// ChangeEmailTTL is how long an email-change confirmation link works.
	ChangeEmailTTL = 24 * time.Hour
	// ResetPasswordTTL is how long a password-reset link works.
	ResetPasswordTTL = time.Hour

	// tokenRecordKeep is how long the record of a used or expired token is
	// kept (longer than any password-setup token lives).
	tokenRecordKeep = 30 * 24 * time.Hour
)

// errBadToken is returned for an unknown, used, expired or mismatched token.
var errBadToken = errors.New("web: invalid or expired link")

// mailToken is a row of mail_tokens.
type mailToken struct {
	bun.BaseModel `bun:"table:mail_tokens"`
	TokenHash     string    `bun:"token_hash,pk"`
	UserID        int64     `bun:"user_id,notnull"`
	Purpose       string    `bun:"purpose,notnull"`
	Email         string    `bun:"email,notnull"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
	ExpiresAt     time.Time `bun:"expires_at,notnull"`
}

func hashMailToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// issueToken stores a new token for userID and purpose, sent to email, and
// retires the account's earlier tokens of that purpose (only the newest
// link works). With token empty a random one is made; a caller may pass a
// token made elsewhere (a password-setup token) to give it this purpose's
// lifetime. It returns the token.
//
// Retired tokens are expired rather than deleted, and kept for
// tokenRecordKeep: a reset link is also an accounts password-setup token,
// and the setup page refuses a token whose reset record has expired.
func (h *Handler) issueToken(ctx context.Context, userID int64, purpose, email, token string, ttl time.Duration) (string, error) {
	return h.issueTokenMail(ctx, userID, purpose, email, token, ttl, nil)
}

// issueTokenMail is issueToken that also mails compose(token). With an
// outbox the message is written in the token's own transaction, so the
// link is sent exactly when the token exists, even if the process dies
// right after; without one it goes to the mail queue after the commit.
func (h *Handler) issueTokenMail(ctx context.Context, userID int64, purpose, email, token string, ttl time.Duration, compose func(token string) Message) (string, error) {
	if token == "" {
		token = rand.Text() + rand.Text()
	}
	now := h.now().UTC().Truncate(time.Microsecond)
	row := &mailToken{TokenHash: hashMailToken(token), UserID: userID, Purpose: purpose, Email: email, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	err := h.opts.Store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := expireTokens(ctx, tx, userID, purpose, now); err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*mailToken)(nil)).
			Where("user_id = ?", userID).Where("created_at < ?", now.Add(-tokenRecordKeep)).Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.NewInsert().Model(row).Returning("NULL").Exec(ctx); err != nil {
			return err
		}
		if compose != nil && h.opts.Outbox != nil && h.devMail == nil {
			return h.enqueueMail(ctx, tx, compose(token))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("web: issue %s token: %w", purpose, err)
	}
	if compose != nil && (h.opts.Outbox == nil || h.devMail != nil) {
		h.sendMail(ctx, compose(token))
	}
	return token, nil
}

// consumeToken deletes token and returns its row if it had purpose and had
// not expired. A token works once: of two concurrent uses, one gets
// errBadToken.
func (h *Handler) consumeToken(ctx context.Context, token, purpose string) (mailToken, error) {
	var rows []mailToken
	_, err := h.opts.Store.DB.NewDelete().Model(&rows).
		Where("token_hash = ?", hashMailToken(token)).Where("purpose = ?", purpose).
		Returning("*").Exec(ctx)
	if err != nil {
		return mailToken{}, fmt.Errorf("web: consume %s token: %w", purpose, err)
	}
	if len(rows) != 1 || !h.now().Before(rows[0].ExpiresAt) {
		return mailToken{}, errBadToken
	}
	return h.issuedToAccount(ctx, rows[0])
}

// issuedToAccount returns row unless it was issued before its account was
// created (then errBadToken): identities are never reused, so such a link
// belonged to an earlier account.
//
// An email-change link is also refused when the password changed after it
// was issued: it moves the account to an address its requester holds, so
// it dies with the password like sessions and grants do.
func (h *Handler) issuedToAccount(ctx context.Context, row mailToken) (mailToken, error) {
	check := h.opts.Accounts.CheckIssuedToAccount
	if row.Purpose == purposeChangeEmail {
		check = h.opts.Accounts.CheckIssuedSincePassword
	}
	if err := check(ctx, row.UserID, row.CreatedAt); err != nil {
		if errors.Is(err, accounts.ErrInvalidToken) {
			return mailToken{}, errBadToken
		}
		return mailToken{}, fmt.Errorf("web: read token account: %w", err)
	}
	if row.Purpose == purposeResetPassword {
		if left, err := h.addressLeft(ctx, row); err != nil {
			return mailToken{}, err
		} else if left {
			return mailToken{}, errBadToken
		}
	}
	return row, nil
}

// addressLeft reports whether row's account no longer uses the address the
// link was mailed to. A reset link waiting in a mailbox the person moved
// away from (perhaps because someone else reads it) must not hand the
// account back.
func (h *Handler) addressLeft(ctx context.Context, row mailToken) (bool, error) {
	u, err := h.opts.Accounts.UserByID(ctx, row.UserID)
	if errors.Is(err, accounts.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("web: read token account: %w", err)
	}
	return !strings.EqualFold(u.Email, row.Email), nil
}

// peekToken returns token's row without using it up: for showing the form
// that will use it.
func (h *Handler) peekToken(ctx context.Context, token, purpose string) (mailToken, error) {
	var row mailToken
	err := h.opts.Store.Reader.NewSelect().Model(&row).
		Where("token_hash = ?", hashMailToken(token)).Where("purpose = ?", purpose).Scan(ctx)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return mailToken{}, errBadToken
	case err != nil:
		return mailToken{}, fmt.Errorf("web: read %s token: %w", purpose, err)
	case !h.now().Before(row.ExpiresAt):
		return mailToken{}, errBadToken
	}
	return h.issuedToAccount(ctx, row)
}

// retireTokens expires every token of userID with purpose.
func (h *Handler) retireTokens(ctx context.Context, userID int64, purpose string) error {
	if err := expireTokens(ctx, h.opts.Store.DB, userID, purpose, h.now().UTC().Truncate(time.Microsecond)); err != nil {
		return fmt.Errorf("web: retire %s tokens: %w", purpose, err)
	}
	return nil
}

func expireTokens(ctx context.Context, db bun.IDB, userID int64, purpose string, now time.Time) error {
	_, err := db.NewUpdate().Model((*mailToken)(nil)).Set("expires_at = ?", now).
		Where("user_id = ?", userID).Where("purpose = ?", purpose).Where("expires_at > ?", now).Exec(ctx)
	return err
}
