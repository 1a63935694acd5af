package accounts

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
)

// UnverifiedWindow is how long a sign-up may stay unverified before the
// retention program deletes the account and frees its email and username.
const UnverifiedWindow = 7 * 24 * time.Hour

// unverifiedSignup is the condition, on a users row, of an account that
// may be purged as an unverified sign-up: it was opened on the sign-up
// page (not by an operator or admin), never verified any address, was
// created before the cutoff (the first argument), is neither being deleted
// nor suspended (an admin is looking at it), and holds no admin role.
// %[1]s is the alias of users.
const unverifiedSignup = `%[1]s.self_signup AND %[1]s.first_verified_at IS NULL AND %[1]s.email_verified_at IS NULL
	AND %[1]s.deleting_at IS NULL AND %[1]s.suspended_at IS NULL AND %[1]s.created_at < ?
	AND NOT EXISTS (SELECT 1 FROM user_roles AS r WHERE r.user_id = %[1]s.id AND r.role_name = ?)`

// UnverifiedSignups lists up to limit accounts that never verified an
// address and were created before before, oldest first: the candidates of
// ClaimUnverified.
func (s *Service) UnverifiedSignups(ctx context.Context, before time.Time, limit int) ([]User, error) {
	var rows []userRow
	err := s.store.DB.NewSelect().Model(&rows).
		Where(fmt.Sprintf(unverifiedSignup, "u"), before.UTC(), capabilities.RoleAdmin).
		OrderExpr("u.created_at, u.id").Limit(int64(limit)).Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("accounts: unverified sign-ups: %w", err)
	}
	out := make([]User, len(rows))
	for i := range rows {
		out[i] = rows[i].user()
	}
	return out, nil
}

// ClaimUnverified marks userID deleting, in one conditional UPDATE, only
// while it is still an unverified sign-up created before before. It
// reports whether it claimed the account. A verification that committed
// first makes the claim fail; once claimed, MarkEmailVerified refuses the
// account (ErrDeleting), so it cannot become verified on its way out. The
// caller then deletes the account through the lifecycle; an interrupted
// deletion is finished by the deletion-resume lane.
func (s *Service) ClaimUnverified(ctx context.Context, userID int64, before time.Time) (bool, error) {
	var n int64
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		// An admin grant in flight holds this lock: the UPDATE below, a
		// statement of its own, then sees the role and spares the
		// account (on PostgreSQL its NOT EXISTS would otherwise read a
		// snapshot taken before the grant committed).
		if err := lockAdmins(ctx, tx, s.store.Dialect()); err != nil {
			return err
		}
		now := s.now()
		res, err := tx.NewRaw("UPDATE users SET deleting_at = ?, updated_at = ? WHERE users.id = ? AND "+fmt.Sprintf(unverifiedSignup, "users"),
			now, now, userID, before.UTC(), capabilities.RoleAdmin).Exec(ctx)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("accounts: claim unverified account: %w", err)
	}
	if n == 1 {
		// Marked deleting (committed): callers cached for it (with
		// oauth.Options.AllowUnverifiedEmail) go now, not when the
		// deletion that follows gets to its own mark.
		s.callerChanged(ctx, userID)
	}
	return n == 1, nil
}
