package accounts

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
)

// Lifecycle owns the states an account passes through after creation:
// suspension and unsuspension, the deletion mark and the queue of accounts
// being deleted, and the queue of unverified sign-ups to purge (claims,
// retries, failures). Package accounts/lifecycle drives it.
//
// Get it as Service.Lifecycle; it is safe for concurrent use.
type Lifecycle struct{ *core }

// keepsAnActiveAdmin is the condition, on the users row being changed,
// that leaves at least one active admin: the account holds no admin role,
// or another account that is neither suspended nor being deleted does.
const keepsAnActiveAdmin = `(NOT EXISTS (SELECT 1 FROM user_roles AS mine WHERE mine.user_id = users.id AND mine.role_name = ?)
	OR EXISTS (SELECT 1 FROM user_roles AS other JOIN users AS o ON o.id = other.user_id
		WHERE other.role_name = ? AND other.user_id <> users.id AND o.suspended_at IS NULL AND o.deleting_at IS NULL))`

// stampKeepingAdmin sets column (suspended_at or deleting_at) to now
// where it is NULL, unless that would leave no active admin: then it
// returns ErrLastAdmin. The refusal is decided inside the UPDATE statement
// itself, so concurrent changes can never leave zero active admins. It
// reports whether the row changed; ErrNotFound when there is no such user.
func (s *Lifecycle) stampKeepingAdmin(ctx context.Context, userID int64, column string) (bool, error) {
	defer s.callerChanged(ctx, userID)
	var changed bool
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := lockAdmins(ctx, tx, s.store.Dialect()); err != nil {
			return err
		}
		now := s.now()
		res, err := tx.NewRaw("UPDATE users SET ? = ?, updated_at = ? WHERE id = ? AND ? IS NULL AND "+keepsAnActiveAdmin,
			bun.Ident(column), now, now, userID, bun.Ident(column), capabilities.RoleAdmin, capabilities.RoleAdmin).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			changed = true
			if column != "suspended_at" {
				return nil
			}
			row, err := s.userWhere(ctx, tx, "id = ?", userID)
			if err != nil {
				return err
			}
			return s.changed(ctx, tx, Change{Kind: ChangeUserSuspended, UserID: userID, StableID: row.StableID})
		}
		row, err := s.userWhere(ctx, tx, "id = ?", userID)
		if err != nil {
			return err
		}
		if (column == "suspended_at" && row.SuspendedAt != nil) || (column == "deleting_at" && row.DeletingAt != nil) {
			return nil // already set
		}
		return ErrLastAdmin
	})
	return changed, err
}

// Suspend suspends an account: every session, token and capability call of
// it is refused until Unsuspend. It reports whether the state changed.
// Suspending the last active admin returns ErrLastAdmin, decided
// atomically like RemoveRole.
func (s *Lifecycle) Suspend(ctx context.Context, userID int64) (bool, error) {
	changed, err := s.stampKeepingAdmin(ctx, userID, "suspended_at")
	if err != nil {
		return false, fmt.Errorf("accounts: suspend: %w", err)
	}
	if changed {
		s.cfg.Logger.InfoContext(ctx, "accounts: suspended", "user_id", userID)
	}
	return changed, nil
}

// Unsuspend lifts a suspension. It reports whether the state changed.
func (s *Lifecycle) Unsuspend(ctx context.Context, userID int64) (bool, error) {
	var changed bool
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		now := s.now()
		res, err := tx.NewUpdate().Model((*userRow)(nil)).Set("suspended_at = NULL").Set("updated_at = ?", now).
			Where("id = ? AND suspended_at IS NOT NULL", userID).Exec(ctx)
		if err != nil {
			return err
		}
		row, err := s.userWhere(ctx, tx, "id = ?", userID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		changed = true
		return s.changed(ctx, tx, Change{Kind: ChangeUserUnsuspended, UserID: userID, StableID: row.StableID})
	})
	if err != nil {
		return false, fmt.Errorf("accounts: unsuspend: %w", err)
	}
	if changed {
		s.cfg.Logger.InfoContext(ctx, "accounts: unsuspended", "user_id", userID)
	}
	return changed, nil
}

// MarkDeleting stamps deleting_at, the first step of account deletion: from
// then on every mutation path refuses writes for the account. Idempotent;
// it reports whether the state changed. Marking the last active admin
// returns ErrLastAdmin, decided atomically like RemoveRole; the account's
// roles stay until its rows are deleted.
func (s *Lifecycle) MarkDeleting(ctx context.Context, userID int64) (bool, error) {
	changed, err := s.stampKeepingAdmin(ctx, userID, "deleting_at")
	if err != nil {
		return false, fmt.Errorf("accounts: mark deleting: %w", err)
	}
	return changed, nil
}

// DeletingAccounts returns up to limit accounts marked deleting before
// before, oldest mark first: deletions a failure or a crash interrupted,
// for the lifecycle to finish. Suspended accounts are not listed: a
// suspension freezes the deletion until it is lifted.
func (s *Lifecycle) DeletingAccounts(ctx context.Context, before time.Time, limit int) ([]User, error) {
	var rows []userRow
	err := s.store.Reader.NewSelect().Model(&rows).
		Where("deleting_at IS NOT NULL AND deleting_at < ? AND suspended_at IS NULL", before.UTC()).
		OrderExpr("deleting_at, id").Limit(int64(limit)).Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("accounts: deleting accounts: %w", err)
	}
	users := make([]User, len(rows))
	for i := range rows {
		users[i] = rows[i].user()
	}
	return users, nil
}
