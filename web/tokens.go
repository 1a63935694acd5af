package web

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
)

// Token purposes and lifetimes.
const (
	purposeVerifyEmail   = accounts.PurposeVerifyEmail
	purposeResetPassword = accounts.PurposeResetPassword
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
	if compose != nil && h.mail.Durable() {
		inTx = func(ctx context.Context, tx bun.IDB, token string) error {
			return h.mailInTx(ctx, tx, compose(token))
		}
	}
	token, err := h.opts.Accounts.Identity.IssueMailToken(ctx, userID, purpose, email, token, ttl, inTx)
	if err != nil {
		return "", fmt.Errorf("web: %w", err)
	}
	if compose != nil && !h.mail.Durable() {
		h.sendMail(ctx, compose(token))
	}
	return token, nil
}

// consumeToken uses up token's link of purpose and returns its row;
// errBadToken when accounts refuses it (unknown, used, expired, or refused
// by a rule about mail links: see accounts.Identity.TakeMailLink).
func (h *Handler) consumeToken(ctx context.Context, token, purpose string) (mailToken, error) {
	return linkResult(h.opts.Accounts.Identity.TakeMailLink(ctx, token, purpose))
}

// peekToken returns token's row without using it up: for showing the form
// that will use it.
func (h *Handler) peekToken(ctx context.Context, token, purpose string) (mailToken, error) {
	return linkResult(h.opts.Accounts.Identity.PeekMailLink(ctx, token, purpose))
}

// linkResult maps a refused link to errBadToken.
func linkResult(row mailToken, err error) (mailToken, error) {
	switch {
	case errors.Is(err, accounts.ErrInvalidToken):
		return mailToken{}, errBadToken
	case err != nil:
		return mailToken{}, fmt.Errorf("web: %w", err)
	}
	return row, nil
}

// retireTokens expires every token of userID with purpose.
func (h *Handler) retireTokens(ctx context.Context, userID int64, purpose string) error {
	if err := h.opts.Accounts.Identity.RetireMailTokens(ctx, userID, purpose); err != nil {
		return fmt.Errorf("web: %w", err)
	}
	return nil
}
