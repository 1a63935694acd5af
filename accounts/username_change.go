package accounts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
)

// usernameHold is a row of username_holds: a name an account gave up,
// held for it until HeldUntil.
type usernameHold struct {
	bun.BaseModel `bun:"table:username_holds"`
	Username      string    `bun:"username,pk"`
	UserID        int64     `bun:"user_id,notnull"`
	HeldUntil     time.Time `bun:"held_until,notnull"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
}

// UsernameHoldsTable is how username_holds appears in the ownership
// inventory: owned through user_id, exported (the holder's own former
// names), deleted with the account.
var UsernameHoldsTable = storage.Table{Name: "username_holds", KeyColumn: "username"}

// heldForOther reports whether username is held, at now, for an account
// other than self (0 for none).
func heldForOther(ctx context.Context, db bun.IDB, username string, self int64, now time.Time) (bool, error) {
	return db.NewSelect().Model((*usernameHold)(nil)).
		Where("username = ?", username).Where("user_id <> ?", self).Where("held_until > ?", now).Exists(ctx)
}

// UsernameChange is what a change of username did.
type UsernameChange struct {
	// User is the account afterwards.
	User User
	// Previous is the username before; equal to User.Username when the
	// name asked for was already the account's (nothing changed).
	Previous string
	// HeldUntil is when Previous stops being held for the account; nil
	// when it is not held (nothing changed, an operator's change, or
	// Config.UsernameHold negative).
	HeldUntil *time.Time
	// NextChangeAt is the earliest time the holder may change their
	// username again; nil when there is no wait.
	NextChangeAt *time.Time
}

// Changed reports whether the username changed.
func (c UsernameChange) Changed() bool { return c.Previous != c.User.Username }

// ChangeOwnUsername is the account holder's own change of username, under
// the rules of signup (shape, the effective reserved set, uniqueness,
// case-insensitive) and three more: a name another account gave up and
// still holds is taken; the holder waits Config.UsernameChangeCooldown
// between changes (ErrUsernameCooldown, with NextChangeAt set); the
// name given up stays held for the account for Config.UsernameHold, so
// nobody else can claim it and pass for them (the holder may take it
// back). Of two accounts claiming one name at once, exactly one wins (the
// unique index decides); the other gets ErrUsernameTaken.
//
// inTx, when set, runs inside the changing transaction after a change
// (write the mail that tells the account to the outbox there); its error
// rolls the change back. Asking for the current name changes nothing and
// does not run inTx. Errors: ErrInvalidUsername, ErrUsernameReserved,
// ErrUsernameTaken, ErrUsernameCooldown, ErrSuspended, ErrDeleting,
// ErrNotFound.
func (s *Identity) ChangeOwnUsername(ctx context.Context, userID int64, newUsername string, inTx func(ctx context.Context, tx bun.IDB, c UsernameChange) error) (UsernameChange, error) {
	c, err := s.rename(ctx, userID, newUsername, true, inTx)
	if err != nil {
		return c, fmt.Errorf("accounts: change own username: %w", err)
	}
	return c, nil
}

// ChangeUsername gives userID a new username on an operator's authority
// (a handle that is abusive or impersonating, say): the rules of signup
// (shape, the effective reserved set, uniqueness, a name held for another
// account is taken), without the holder's cooldown, and the name given up
// is not held for the account. Errors: ErrInvalidUsername,
// ErrUsernameReserved, ErrUsernameTaken, ErrDeleting, ErrNotFound.
func (s *Identity) ChangeUsername(ctx context.Context, userID int64, newUsername string) (User, error) {
	c, err := s.rename(ctx, userID, newUsername, false, nil)
	if err != nil {
		return User{}, fmt.Errorf("accounts: change username: %w", err)
	}
	return c.User, nil
}

// rename is ChangeOwnUsername (own) and ChangeUsername.
func (s *Identity) rename(ctx context.Context, userID int64, raw string, own bool, inTx func(ctx context.Context, tx bun.IDB, c UsernameChange) error) (UsernameChange, error) {
	defer s.callerChanged(ctx, userID)
	username, err := NormalizeUsername(raw)
	if err != nil {
		return UsernameChange{}, err
	}
	cooldown, hold := s.cfg.UsernameChangeCooldown, s.cfg.UsernameHold
	if !own {
		cooldown, hold = 0, 0
	}
	var out UsernameChange
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		row, err := writableUser(ctx, tx, userID)
		if err != nil {
			return err
		}
		if own && row.SuspendedAt != nil {
			return ErrSuspended
		}
		out = UsernameChange{User: row.user(), Previous: row.Username}
		if row.Username == username {
			return nil
		}
		now := s.now()
		if cooldown > 0 && row.UsernameChangedAt != nil {
			if next := row.UsernameChangedAt.Add(cooldown).UTC(); now.Before(next) {
				out.NextChangeAt = &next
				return ErrUsernameCooldown
			}
		}
		if reserved, err := s.isReserved(ctx, tx, username); err != nil {
			return err
		} else if reserved {
			return ErrUsernameReserved
		}
		// Another account's current name first, then a name held for
		// another account, each in a statement of its own: a concurrent
		// change away from the name is seen either before it commits (the
		// name is still that account's) or after (its hold is there).
		if taken, err := tx.NewSelect().Model((*userRow)(nil)).Where("username = ?", username).Where("id <> ?", userID).Exists(ctx); err != nil {
			return err
		} else if taken {
			return ErrUsernameTaken
		}
		if held, err := heldForOther(ctx, tx, username, userID, now); err != nil {
			return err
		} else if held {
			return ErrUsernameTaken
		}
		q := tx.NewUpdate().Model((*userRow)(nil)).Set("username = ?", username).Set("updated_at = ?", now).
			Where("id = ?", userID).
			Where("NOT EXISTS (SELECT 1 FROM users AS o WHERE o.username = ?)", username)
		if own {
			q = q.Set("username_changed_at = ?", now)
		}
		if cooldown > 0 {
			// Decided in the statement too: of two changes of one account
			// at once, the second waits for the first's row and then sees
			// its stamp.
			q = q.Where("(username_changed_at IS NULL OR username_changed_at <= ?)", now.Add(-cooldown))
		}
		res, err := q.Exec(ctx)
		if isUniqueViolation(err) { // a concurrent change or signup took it (PostgreSQL)
			return ErrUsernameTaken
		}
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			if cooldown > 0 {
				cur, err := s.userWhere(ctx, tx, "id = ?", userID)
				if err != nil {
					return err
				}
				if cur.UsernameChangedAt != nil && now.Before(cur.UsernameChangedAt.Add(cooldown)) {
					next := cur.UsernameChangedAt.Add(cooldown).UTC()
					out.NextChangeAt = &next
					return ErrUsernameCooldown
				}
			}
			return ErrUsernameTaken
		}
		// A name of its own the account takes back is no longer held.
		if _, err := tx.NewDelete().Model((*usernameHold)(nil)).Where("username = ?", username).Where("user_id = ?", userID).Exec(ctx); err != nil {
			return err
		}
		if hold > 0 {
			until := now.Add(hold)
			// A row left for the name is an expired hold (a live one for
			// another account would have kept the name from this one).
			if _, err := tx.NewInsert().Model(&usernameHold{Username: row.Username, UserID: userID, HeldUntil: until, CreatedAt: now}).
				On("CONFLICT (username) DO UPDATE").
				Set("user_id = EXCLUDED.user_id, held_until = EXCLUDED.held_until, created_at = EXCLUDED.created_at").
				Returning("NULL").Exec(ctx); err != nil {
				return err
			}
			out.HeldUntil = &until
		}
		row.Username, row.UpdatedAt = username, now
		if own {
			row.UsernameChangedAt = &now
		}
		if cooldown > 0 {
			next := now.Add(cooldown)
			out.NextChangeAt = &next
		}
		out.User = row.user()
		if inTx != nil {
			return inTx(ctx, tx, out)
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, ErrUsernameCooldown) {
			out.NextChangeAt = nil
		}
		out.HeldUntil = nil
		return out, err
	}
	return out, nil
}

// UsernameHolds lists the names held for userID at the time of the call,
// with when each stops being held.
func (s *Identity) UsernameHolds(ctx context.Context, userID int64) (map[string]time.Time, error) {
	var rows []usernameHold
	if err := s.store.Reader.NewSelect().Model(&rows).Where("user_id = ?", userID).Where("held_until > ?", s.now()).Scan(ctx); err != nil {
		return nil, fmt.Errorf("accounts: username holds: %w", err)
	}
	out := make(map[string]time.Time, len(rows))
	for _, r := range rows {
		out[r.Username] = r.HeldUntil.UTC()
	}
	return out, nil
}

// NextUsernameChange returns the earliest time userID's holder may change
// their username again, or the zero time when they may now.
func (s *Identity) NextUsernameChange(ctx context.Context, userID int64) (time.Time, error) {
	row, err := s.userWhere(ctx, s.store.Reader, "id = ?", userID)
	if err != nil {
		return time.Time{}, err
	}
	if s.cfg.UsernameChangeCooldown <= 0 || row.UsernameChangedAt == nil {
		return time.Time{}, nil
	}
	if next := row.UsernameChangedAt.Add(s.cfg.UsernameChangeCooldown).UTC(); s.now().Before(next) {
		return next, nil
	}
	return time.Time{}, nil
}

// UsernameRules returns the wait between two changes of a holder's own
// username and how long a name given up stays held (each zero when off).
func (s *Identity) UsernameRules() (cooldown, hold time.Duration) {
	return max(s.cfg.UsernameChangeCooldown, 0), max(s.cfg.UsernameHold, 0)
}
