package accounts

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
)

// MailTokenRecordKeep is how long the record of a used or expired mail
// token is kept (longer than any password-setup token lives).
const MailTokenRecordKeep = 30 * 24 * time.Hour

// MailToken is a one-time link mailed to an address (a row of mail_tokens,
// which this package owns): email verification, password reset, email
// change. Only the hash of the token is stored.
type MailToken struct {
	bun.BaseModel `bun:"table:mail_tokens"`
	TokenHash     string    `bun:"token_hash,pk"`
	UserID        int64     `bun:"user_id,notnull"`
	Purpose       string    `bun:"purpose,notnull"`
	Email         string    `bun:"email,notnull"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
	ExpiresAt     time.Time `bun:"expires_at,notnull"`
}

// HashMailToken is the stored form of a mail token.
func HashMailToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// IssueMailToken stores a new token for userID and purpose, sent to email,
// and expires the account's earlier tokens of that purpose (only the
// newest link works); records older than MailTokenRecordKeep are deleted.
// With token empty a random one is made; a caller may pass a token made
// elsewhere (a password-setup token) to give it this purpose's lifetime.
// inTx, when set, runs inside the same transaction with the token (write
// the message carrying the link to the outbox there). It returns the
// token.
func (s *Identity) IssueMailToken(ctx context.Context, userID int64, purpose, email, token string, ttl time.Duration, inTx func(ctx context.Context, tx bun.IDB, token string) error) (string, error) {
	if token == "" {
		token = rand.Text() + rand.Text()
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	row := &MailToken{TokenHash: HashMailToken(token), UserID: userID, Purpose: purpose, Email: email, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := expireMailTokens(ctx, tx, userID, purpose, now); err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*MailToken)(nil)).
			Where("user_id = ?", userID).Where("created_at < ?", now.Add(-MailTokenRecordKeep)).Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.NewInsert().Model(row).Returning("NULL").Exec(ctx); err != nil {
			return err
		}
		if inTx != nil {
			return inTx(ctx, tx, token)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("accounts: issue %s token: %w", purpose, err)
	}
	return token, nil
}

// TakeMailToken deletes token's row of purpose and returns it: of two
// concurrent uses, one gets ErrInvalidToken. It does not look at the
// expiry; the caller does.
func (s *Identity) TakeMailToken(ctx context.Context, token, purpose string) (MailToken, error) {
	var rows []MailToken
	_, err := s.store.DB.NewDelete().Model(&rows).
		Where("token_hash = ?", HashMailToken(token)).Where("purpose = ?", purpose).
		Returning("*").Exec(ctx)
	if err != nil {
		return MailToken{}, fmt.Errorf("accounts: take %s token: %w", purpose, err)
	}
	if len(rows) != 1 {
		return MailToken{}, ErrInvalidToken
	}
	return rows[0], nil
}

// PeekMailToken returns token's row of purpose without using it up, or
// ErrInvalidToken. It does not look at the expiry.
func (s *Identity) PeekMailToken(ctx context.Context, token, purpose string) (MailToken, error) {
	var row MailToken
	err := s.store.Reader.NewSelect().Model(&row).
		Where("token_hash = ?", HashMailToken(token)).Where("purpose = ?", purpose).Scan(ctx)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return MailToken{}, ErrInvalidToken
	case err != nil:
		return MailToken{}, fmt.Errorf("accounts: read %s token: %w", purpose, err)
	}
	return row, nil
}

// MailTokenRecords returns every row of token, whatever its purpose.
func (s *Identity) MailTokenRecords(ctx context.Context, token string) ([]MailToken, error) {
	var rows []MailToken
	if err := s.store.Reader.NewSelect().Model(&rows).Where("token_hash = ?", HashMailToken(token)).Scan(ctx); err != nil {
		return nil, fmt.Errorf("accounts: read token records: %w", err)
	}
	return rows, nil
}

// RetireMailTokens expires every token of userID with purpose.
func (s *Identity) RetireMailTokens(ctx context.Context, userID int64, purpose string) error {
	if err := expireMailTokens(ctx, s.store.DB, userID, purpose, s.now().UTC().Truncate(time.Microsecond)); err != nil {
		return fmt.Errorf("accounts: retire %s tokens: %w", purpose, err)
	}
	return nil
}

func expireMailTokens(ctx context.Context, db bun.IDB, userID int64, purpose string, now time.Time) error {
	_, err := db.NewUpdate().Model((*MailToken)(nil)).Set("expires_at = ?", now).
		Where("user_id = ?", userID).Where("purpose = ?", purpose).Where("expires_at > ?", now).Exec(ctx)
	return err
}

// PurposeResetPassword is the mail-token purpose of password-reset links.
const PurposeResetPassword = "reset_password"

// LinkRefusal says why a mail link was refused.
type LinkRefusal int

// Why a mail link is refused.
const (
	// LinkUnknown: no such token of that purpose (never issued, used,
	// or retired by a newer link).
	LinkUnknown LinkRefusal = iota
	// LinkExpired: the link's lifetime is over.
	LinkExpired
	// LinkPredatesAccount: the link was issued before its account was
	// created, so to an earlier account (identities are never reused).
	LinkPredatesAccount
	// LinkAddressLeft: a password-reset link whose account no longer uses
	// the address it was mailed to, or a release link whose account no
	// longer holds that former address.
	LinkAddressLeft
	// LinkPredatesPassword: an email-change or email-release link issued
	// before the password last changed; it dies with the password like
	// sessions do.
	LinkPredatesPassword
)

// LinkError refuses a mail link. It matches ErrInvalidToken with
// errors.Is, and its message is ErrInvalidToken's: the person is not told
// which rule refused the link.
type LinkError struct {
	Refusal LinkRefusal
}

func (e *LinkError) Error() string { return ErrInvalidToken.Error() }

// Is makes errors.Is(err, ErrInvalidToken) hold.
func (e *LinkError) Is(target error) bool { return target == ErrInvalidToken }

// TakeMailLink uses up token's link of purpose and returns its row once
// every rule about mail links holds (see checkMailLink); otherwise a
// *LinkError. Of two concurrent uses, one gets LinkUnknown. A refused link
// is used up all the same.
func (s *Identity) TakeMailLink(ctx context.Context, token, purpose string) (MailToken, error) {
	row, err := s.TakeMailToken(ctx, token, purpose)
	if errors.Is(err, ErrInvalidToken) {
		return MailToken{}, &LinkError{Refusal: LinkUnknown}
	}
	if err != nil {
		return MailToken{}, err
	}
	return s.checkMailLink(ctx, row)
}

// PeekMailLink is TakeMailLink without using the link up: for showing the
// form that will use it.
func (s *Identity) PeekMailLink(ctx context.Context, token, purpose string) (MailToken, error) {
	row, err := s.PeekMailToken(ctx, token, purpose)
	if errors.Is(err, ErrInvalidToken) {
		return MailToken{}, &LinkError{Refusal: LinkUnknown}
	}
	if err != nil {
		return MailToken{}, err
	}
	return s.checkMailLink(ctx, row)
}

// checkMailLink returns row unless a rule refuses it: it has expired; it
// was issued before its account was created; it is an email-change or
// email-release link issued before the password last changed; it is a password-reset link
// and the account has since left the address it was mailed to (a reset
// link waiting in a mailbox the person moved away from must not hand the
// account back).
func (s *Identity) checkMailLink(ctx context.Context, row MailToken) (MailToken, error) {
	if !s.now().Before(row.ExpiresAt) {
		return MailToken{}, &LinkError{Refusal: LinkExpired}
	}
	if err := s.credentials.CheckIssuedToAccount(ctx, row.UserID, row.CreatedAt); err != nil {
		if errors.Is(err, ErrInvalidToken) {
			return MailToken{}, &LinkError{Refusal: LinkPredatesAccount}
		}
		return MailToken{}, err
	}
	switch row.Purpose {
	case PurposeChangeEmail, PurposeReleaseEmail:
		if err := s.checkIssuedSincePasswordChange(ctx, row.UserID, row.CreatedAt); err != nil {
			if errors.Is(err, ErrInvalidToken) {
				return MailToken{}, &LinkError{Refusal: LinkPredatesPassword}
			}
			return MailToken{}, err
		}
	case PurposeResetPassword:
		if err := s.checkAddressKept(ctx, row); err != nil {
			return MailToken{}, err
		}
	}
	return row, nil
}

// CheckResetLink returns a *LinkError when token, a password-setup token,
// was also mailed as a password-reset link that has expired or whose
// account has left the address it was mailed to: the setup path must not
// stretch a reset link's life. A token never mailed as a reset link passes.
func (s *Credentials) CheckResetLink(ctx context.Context, token string) error {
	rows, err := s.identity.MailTokenRecords(ctx, token)
	if err != nil {
		return err
	}
	for _, row := range rows {
		if row.Purpose != PurposeResetPassword {
			continue
		}
		if !s.now().Before(row.ExpiresAt) {
			return &LinkError{Refusal: LinkExpired}
		}
		if err := s.checkAddressKept(ctx, row); err != nil {
			return err
		}
	}
	return nil
}

// checkAddressKept returns a LinkAddressLeft *LinkError when row's account
// is gone or no longer uses the address row was mailed to.
func (s *core) checkAddressKept(ctx context.Context, row MailToken) error {
	u, err := s.identity.UserByID(ctx, row.UserID)
	if errors.Is(err, ErrNotFound) {
		return &LinkError{Refusal: LinkAddressLeft}
	}
	if err != nil {
		return fmt.Errorf("accounts: read link account: %w", err)
	}
	if !strings.EqualFold(u.Email, row.Email) {
		return &LinkError{Refusal: LinkAddressLeft}
	}
	return nil
}
