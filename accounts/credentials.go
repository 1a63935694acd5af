package accounts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// Credentials owns how an account proves who it is with a password or a
// browser session: login, password changes and checks, password setup and
// reset tokens and links, the rule that credentials issued before a
// password change (or before the account existed) are refused, and the
// signed session cookies and their keys.
//
// Get it as Service.Credentials; it is safe for concurrent use.
type Credentials struct{ *core }

// Login checks an email and password. Unknown emails, accounts without a
// password and wrong passwords all return ErrInvalidCredentials after the
// same amount of hashing work. A correct password on a suspended account
// returns ErrSuspended (also when it is being deleted); on a deleting
// account it returns the User together with ErrDeleting (see
// StartDeletingSession). Login never checks
// the password policy; a hash made with older parameters is replaced.
func (s *Credentials) Login(ctx context.Context, email, password string) (User, error) {
	if len(password) > MaxPasswordBytes {
		return User{}, ErrInvalidCredentials
	}
	row, err := s.userWhere(ctx, s.store.Reader, "email = ?", strings.ToLower(strings.TrimSpace(email)))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return User{}, fmt.Errorf("accounts: login: %w", err)
	}
	encoded := s.dummyHash
	if err == nil && row.PasswordHash != nil {
		encoded = *row.PasswordHash
	}
	ok, stale, verr := s.hasher.verify(ctx, encoded, password)
	if verr != nil {
		if ctx.Err() != nil {
			return User{}, fmt.Errorf("accounts: login: %w", ctx.Err())
		}
		s.cfg.Logger.WarnContext(ctx, "accounts: unreadable password hash", "user_id", row.ID, "error", verr)
		return User{}, ErrInvalidCredentials
	}
	if err != nil || row.PasswordHash == nil || !ok {
		return User{}, ErrInvalidCredentials
	}
	u := row.user()
	if err := u.CheckActive(); err != nil {
		if u.SuspendedAt != nil {
			// Suspension wins, also over a half-finished deletion.
			return User{}, ErrSuspended
		}
		if errors.Is(err, ErrDeleting) {
			// The person proved who they are: the deletion page lets them
			// finish a deletion that failed midway.
			return u, err
		}
		return User{}, err
	}
	if stale {
		s.rehash(ctx, row, password)
	}
	return u, nil
}

// rehash replaces a hash made with other parameters, unless the password
// changed meanwhile. Failure is logged: the login itself succeeded.
func (s *Credentials) rehash(ctx context.Context, row userRow, password string) {
	h, err := s.hasher.hash(ctx, password)
	if err == nil {
		_, err = s.store.DB.NewUpdate().Model((*userRow)(nil)).
			Set("password_hash = ?", h).
			Where("id = ? AND password_hash = ?", row.ID, *row.PasswordHash).Exec(ctx)
	}
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "accounts: re-hash password", "user_id", row.ID, "error", err)
	}
}

// ChangePassword replaces the password of userID after checking the
// current one (ErrInvalidCredentials when wrong). Every session issued
// before the change stops working and the password-change hooks run in the
// same transaction. The returned User carries the new PasswordChangedAt:
// start a new session for the person who made the change.
func (s *Credentials) ChangePassword(ctx context.Context, userID int64, current, next string) (User, error) {
	if _, err := s.VerifyPassword(ctx, userID, current); err != nil {
		return User{}, fmt.Errorf("accounts: change password: %w", err)
	}
	u, err := s.setPassword(ctx, userID, next, func(context.Context, bun.Tx) error { return nil })
	if err != nil {
		return User{}, fmt.Errorf("accounts: change password: %w", err)
	}
	return u, nil
}

// VerifyPassword checks password against userID's current one, for
// actions that ask for it again (changing the password or the email,
// deleting the account). It returns ErrInvalidCredentials when it is wrong
// or the account has none, after the same hashing work either way, and
// ErrNotFound for an unknown account. It does not look at the account's
// state.
func (s *Credentials) VerifyPassword(ctx context.Context, userID int64, password string) (User, error) {
	row, err := s.userWhere(ctx, s.store.Reader, "id = ?", userID)
	if err != nil {
		return User{}, err
	}
	if len(password) > MaxPasswordBytes {
		return User{}, ErrInvalidCredentials
	}
	encoded := s.dummyHash
	if row.PasswordHash != nil {
		encoded = *row.PasswordHash
	}
	ok, _, err := s.hasher.verify(ctx, encoded, password)
	if err != nil && ctx.Err() != nil {
		return User{}, ctx.Err()
	}
	if !ok || row.PasswordHash == nil {
		return User{}, ErrInvalidCredentials
	}
	return row.user(), nil
}

// setPassword checks the policy, hashes next and stores it in a transaction
// that also runs before (first), stamps password_changed_at, drops pending
// setup tokens and runs the password-change hooks.
func (s *Credentials) setPassword(ctx context.Context, userID int64, next string, before func(context.Context, bun.Tx) error) (User, error) {
	defer s.callerChanged(ctx, userID)
	cur, err := s.userWhere(ctx, s.store.Reader, "id = ?", userID)
	if err != nil {
		return User{}, err
	}
	if err := checkPasswordPolicy(next, cur.Email, cur.Username, s.cfg.MinPasswordLength); err != nil {
		return User{}, err
	}
	hash, err := s.hasher.hash(ctx, next)
	if err != nil {
		return User{}, err
	}
	var row userRow
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := before(ctx, tx); err != nil {
			return err
		}
		if row, err = writableUser(ctx, tx, userID); err != nil {
			return err
		}
		now := s.now()
		// Sessions are refused when issued at or before this stamp; keep it
		// strictly increasing so a session issued in the same microsecond
		// as an earlier change cannot survive this one.
		if row.PasswordChangedAt != nil && !now.After(*row.PasswordChangedAt) {
			now = row.PasswordChangedAt.Add(time.Microsecond)
		}
		row.PasswordHash, row.PasswordChangedAt, row.UpdatedAt = &hash, &now, now
		if _, err := tx.NewUpdate().Model(&row).Column("password_hash", "password_changed_at", "updated_at").WherePK().Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*setupToken)(nil)).Where("user_id = ?", userID).Exec(ctx); err != nil {
			return err
		}
		for _, hook := range s.passwordHooks() {
			if err := hook(ctx, tx, userID); err != nil {
				return fmt.Errorf("password-change hook: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return User{}, err
	}
	s.cfg.Logger.InfoContext(ctx, "accounts: password changed", slog.Int64("user_id", userID))
	return row.user(), nil
}
