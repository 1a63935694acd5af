package web

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
)

// Token purposes and lifetimes.
const (
	purposeVerifyEmail   = accounts.PurposeVerifyEmail
	purposeResetPassword = "reset_password"
	purposeChangeEmail   = accounts.PurposeChangeEmail

	// VerifyEmailTTL is how long an email-verification link works.
	VerifyEmailTTL = accounts.VerifyEmailTTL
	// ChangeEmailTTL is how long an email-change confirmation link works.
	ChangeEmailTTL = accounts.ChangeEmailTTL
	// ResetPasswordTTL is how long a password-reset link works.
	ResetPasswordTTL = time.Hour
)

// errBadToken is returned for an unknown, used, expired or mismatched token.
var errBadToken = errors.New("web: invalid or expired link")

// mailToken is a one-time link mailed to an address; accounts owns the
// table.
type mailToken = accounts.MailToken

// issueToken stores a new token for userID and purpose, sent to email, and
// retires the account's earlier tokens of that purpose (only the newest
// link works). With token empty a random one is made; a caller may pass a
// token made elsewhere (a password-setup token) to give it this purpose's
// lifetime. It returns the token.
//
// Retired tokens are expired rather than deleted, and kept for
// accounts.MailTokenRecordKeep: a reset link is also an accounts password-setup token,
// and the setup page refuses a token whose reset record has expired.
func (h *Handler) issueToken(ctx context.Context, userID int64, purpose, email, token string, ttl time.Duration) (string, error) {
	return h.issueTokenMail(ctx, userID, purpose, email, token, ttl, nil)
}

// issueTokenMail is issueToken that also mails compose(token). With an
// outbox the message is written in the token's own transaction, so the
// link is sent exactly when the token exists, even if the process dies
// right after; without one it goes to the mail queue after the commit.
func (h *Handler) issueTokenMail(ctx context.Context, userID int64, purpose, email, token string, ttl time.Duration, compose func(token string) Message) (string, error) {
	var inTx func(ctx context.Context, tx bun.IDB, token string) error
	if compose != nil && h.opts.Outbox != nil && h.devMail == nil {
		inTx = func(ctx context.Context, tx bun.IDB, token string) error {
			return h.enqueueMail(ctx, tx, compose(token))
		}
	}
	token, err := h.opts.Accounts.IssueMailToken(ctx, userID, purpose, email, token, ttl, inTx)
	if err != nil {
		return "", fmt.Errorf("web: %w", err)
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
	row, err := h.opts.Accounts.TakeMailToken(ctx, token, purpose)
	if errors.Is(err, accounts.ErrInvalidToken) {
		return mailToken{}, errBadToken
	}
	if err != nil {
		return mailToken{}, fmt.Errorf("web: %w", err)
	}
	if !h.now().Before(row.ExpiresAt) {
		return mailToken{}, errBadToken
	}
	return h.issuedToAccount(ctx, row)
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
	row, err := h.opts.Accounts.PeekMailToken(ctx, token, purpose)
	switch {
	case errors.Is(err, accounts.ErrInvalidToken):
		return mailToken{}, errBadToken
	case err != nil:
		return mailToken{}, fmt.Errorf("web: %w", err)
	case !h.now().Before(row.ExpiresAt):
		return mailToken{}, errBadToken
	}
	return h.issuedToAccount(ctx, row)
}

// retireTokens expires every token of userID with purpose.
func (h *Handler) retireTokens(ctx context.Context, userID int64, purpose string) error {
	if err := h.opts.Accounts.RetireMailTokens(ctx, userID, purpose); err != nil {
		return fmt.Errorf("web: %w", err)
	}
	return nil
}
