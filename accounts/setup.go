package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// PasswordSetupPath is the web path that takes a password-setup token in
// its "token" query parameter.
const PasswordSetupPath = "/password/setup"

// PasswordSetupURL returns the link an operator hands to a person whose
// account was created without a password.
func PasswordSetupURL(baseURL, token string) string {
	return strings.TrimRight(baseURL, "/") + PasswordSetupPath + "?token=" + url.QueryEscape(token)
}

type setupToken struct {
	bun.BaseModel `bun:"table:password_setup_tokens"`
	TokenHash     string    `bun:"token_hash,pk"`
	UserID        int64     `bun:"user_id,notnull"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
	ExpiresAt     time.Time `bun:"expires_at,notnull"`
}

func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func (s *core) insertSetupToken(ctx context.Context, tx bun.IDB, userID int64, now time.Time) (string, error) {
	return s.insertToken(ctx, tx, userID, now, s.cfg.PasswordSetupTTL)
}

func (s *core) insertToken(ctx context.Context, tx bun.IDB, userID int64, now time.Time, ttl time.Duration) (string, error) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	token := base64.RawURLEncoding.EncodeToString(b)
	row := &setupToken{TokenHash: hashToken(token), UserID: userID, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if _, err := tx.NewInsert().Model(row).Returning("NULL").Exec(ctx); err != nil {
		return "", fmt.Errorf("insert password-setup token: %w", err)
	}
	return token, nil
}

// NewPasswordSetupToken returns a fresh one-time password-setup token for
// userID (earlier ones stay valid until used or expired). Only its hash is
// stored. ErrDeleting for an account being deleted.
func (s *Credentials) NewPasswordSetupToken(ctx context.Context, userID int64) (string, error) {
	token, err := s.newToken(ctx, userID, s.cfg.PasswordSetupTTL)
	if err != nil {
		return "", fmt.Errorf("accounts: new password-setup token: %w", err)
	}
	return token, nil
}

// NewPasswordResetToken is NewPasswordSetupToken for a forgotten password:
// the token is valid for Config.PasswordResetTTL and is redeemed the same
// way, with SetPasswordWithToken (at PasswordSetupPath). Using it ends every
// earlier session, like any password change. Send it only to the account's
// current email, and answer the request the same way whether or not an
// account has that email.
func (s *Credentials) NewPasswordResetToken(ctx context.Context, userID int64) (string, error) {
	token, err := s.newToken(ctx, userID, s.cfg.PasswordResetTTL)
	if err != nil {
		return "", fmt.Errorf("accounts: new password-reset token: %w", err)
	}
	return token, nil
}

func (s *Credentials) newToken(ctx context.Context, userID int64, ttl time.Duration) (string, error) {
	var token string
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := writableUser(ctx, tx, userID); err != nil {
			return err
		}
		var err error
		token, err = s.insertToken(ctx, tx, userID, s.now(), ttl)
		return err
	})
	return token, err
}

// SetPasswordWithToken consumes a password-setup token and sets the
// account's password, which must meet the policy (a refused password leaves
// the token usable). Like every password change, it ends earlier sessions.
// It returns ErrInvalidToken for an unknown, used or expired token, and for
// one issued before its account was created.
func (s *Credentials) SetPasswordWithToken(ctx context.Context, token, password string) (User, error) {
	u, _, err := s.ResetPasswordWithToken(ctx, token, password)
	return u, err
}

// ResetPasswordWithToken is SetPasswordWithToken that also reports whether
// second factors were removed: a password reset turns off the
// authenticator app and deletes passkeys and recovery codes, in the same
// transaction (tell the owner by mail).
func (s *Credentials) ResetPasswordWithToken(ctx context.Context, token, password string) (User, bool, error) {
	var cleared bool
	h := hashToken(token)
	var tok setupToken
	err := s.store.Reader.NewSelect().Model(&tok).Where("token_hash = ?", h).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !s.now().Before(tok.ExpiresAt)) {
		return User{}, false, fmt.Errorf("accounts: set password: %w", ErrInvalidToken)
	}
	if err != nil {
		return User{}, false, fmt.Errorf("accounts: set password: %w", err)
	}
	u, err := s.setPassword(ctx, tok.UserID, password, func(ctx context.Context, tx bun.Tx) error {
		// Spend the token in the same transaction: of two concurrent uses,
		// one deletes it and the other finds nothing.
		res, err := tx.NewDelete().Model((*setupToken)(nil)).Where("token_hash = ?", h).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrInvalidToken
		}
		// A link issued before the account existed was not issued to it.
		if err := checkIssuedToAccount(ctx, tx, tok.UserID, tok.CreatedAt); err != nil {
			return err
		}
		// Whoever resets the password by mail proved control of the
		// address only: the second factors go (the owner is told).
		cleared, err = clearFactorsInTx(ctx, tx, tok.UserID)
		return err
	})
	if err != nil {
		return User{}, false, fmt.Errorf("accounts: set password: %w", err)
	}
	return u, cleared, nil
}

// checkIssuedToAccount returns ErrInvalidToken unless userID is an account
// created at or before issuedAt: a link, token or cookie issued before its
// account existed belonged to another (deleted) account.
func checkIssuedToAccount(ctx context.Context, db bun.IDB, userID int64, issuedAt time.Time) error {
	var created time.Time
	err := db.NewSelect().Model((*userRow)(nil)).Column("created_at").Where("id = ?", userID).Scan(ctx, &created)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && issuedAt.Before(created)) {
		return ErrInvalidToken
	}
	return err
}

// CheckIssuedSincePassword is CheckIssuedToAccount that also returns
// ErrInvalidToken for a link issued before the account's last password
// change (compared at the microsecond precision links are stored with). A link that hands the account to another address (an
// email change) must die with the password, like sessions and grants:
// changing or resetting the password is how a person throws out someone
// who learned it, and a link that person requested must not outlive it.
func (s *Credentials) CheckIssuedSincePassword(ctx context.Context, userID int64, issuedAt time.Time) error {
	if err := s.CheckIssuedToAccount(ctx, userID, issuedAt); err != nil {
		return err
	}
	return s.checkIssuedSincePasswordChange(ctx, userID, issuedAt)
}

// checkIssuedSincePasswordChange returns ErrInvalidToken when userID is
// gone or its password changed after issuedAt.
func (s *core) checkIssuedSincePasswordChange(ctx context.Context, userID int64, issuedAt time.Time) error {
	var changed *time.Time
	err := s.store.Reader.NewSelect().Model((*userRow)(nil)).Column("password_changed_at").Where("id = ?", userID).Scan(ctx, &changed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrInvalidToken
	case err != nil:
		return fmt.Errorf("accounts: check link: %w", err)
	case changed != nil && issuedAt.Before(changed.Truncate(time.Microsecond)):
		return ErrInvalidToken
	}
	return nil
}

// CheckIssuedToAccount returns ErrInvalidToken unless userID is an
// existing account created at or before issuedAt. Callers that keep their
// own single-use links for an account (verification and reset mail) check
// a link with it before acting on it: a link issued before its account
// existed was issued to an earlier account, and identities are never
// reused.
func (s *Credentials) CheckIssuedToAccount(ctx context.Context, userID int64, issuedAt time.Time) error {
	if err := checkIssuedToAccount(ctx, s.store.Reader, userID, issuedAt); err != nil {
		if errors.Is(err, ErrInvalidToken) {
			return err
		}
		return fmt.Errorf("accounts: check link: %w", err)
	}
	return nil
}
