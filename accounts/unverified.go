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
// address and were created before before, in the order the purge takes
// them (see UnverifiedCandidates): the candidates of ClaimUnverified.
func (s *Lifecycle) UnverifiedSignups(ctx context.Context, before time.Time, limit int) ([]User, error) {
	cands, err := s.UnverifiedCandidates(ctx, before, limit)
	if err != nil {
		return nil, err
	}
	out := make([]User, len(cands))
	for i := range cands {
		out[i] = cands[i].User
	}
	return out, nil
}

// UnverifiedCandidate is an account the unverified sign-up purge may
// claim, with the purge's record of earlier attempts on it.
type UnverifiedCandidate struct {
	User User
	// Attempts counts earlier claims of the account by the purge; their
	// deletions failed before anything was removed (see
	// ReleaseUnverifiedClaim).
	Attempts int
	// LastAttemptAt is when the last of them was made.
	LastAttemptAt *time.Time
	// LastFailure is the class of the last failure (a deletion stage).
	LastFailure string
}

type candidateRow struct {
	userRow       `bun:",extend"`
	Attempts      int        `bun:"purge_attempts"`
	LastAttemptAt *time.Time `bun:"purge_attempted_at"`
	LastFailure   *string    `bun:"purge_failure"`
}

// UnverifiedCandidates lists up to limit accounts that never verified an
// address and were created before before, in the purge's order: accounts
// never attempted first (oldest sign-up first), then earlier failures,
// the oldest attempt first. An account whose last attempt failed is
// skipped until its retry time (ReleaseUnverifiedClaim) has come.
func (s *Lifecycle) UnverifiedCandidates(ctx context.Context, before time.Time, limit int) ([]UnverifiedCandidate, error) {
	var rows []candidateRow
	err := s.store.DB.NewSelect().Model(&rows).
		Where(fmt.Sprintf(unverifiedSignup, "u"), before.UTC(), capabilities.RoleAdmin).
		Where("(u.purge_retry_at IS NULL OR u.purge_retry_at <= ?)", s.now()).
		OrderExpr("CASE WHEN u.purge_attempted_at IS NULL THEN 0 ELSE 1 END, u.purge_attempted_at, u.created_at, u.id").
		Limit(int64(limit)).Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("accounts: unverified sign-ups: %w", err)
	}
	out := make([]UnverifiedCandidate, len(rows))
	for i, r := range rows {
		out[i] = UnverifiedCandidate{User: r.user(), Attempts: r.Attempts}
		if r.LastAttemptAt != nil {
			t := r.LastAttemptAt.UTC()
			out[i].LastAttemptAt = &t
		}
		if r.LastFailure != nil {
			out[i].LastFailure = *r.LastFailure
		}
	}
	return out, nil
}

// ClaimUnverified marks userID deleting, in one conditional UPDATE, only
// while it is still an unverified sign-up created before before and not
// waiting for the retry time of a failed attempt. It
// reports whether it claimed the account. A verification that committed
// first makes the claim fail; once claimed, MarkEmailVerified refuses the
// account (ErrDeleting), so it cannot become verified on its way out. The
// caller then deletes the account through the lifecycle; an interrupted
// deletion is finished by the deletion-resume lane.
func (s *Lifecycle) ClaimUnverified(ctx context.Context, userID int64, before time.Time) (bool, error) {
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
		// The claim counts as an attempt, stamped like the fence, which
		// tells the purge's own fence apart (ReleaseUnverifiedClaim).
		res, err := tx.NewRaw("UPDATE users SET deleting_at = ?, updated_at = ?, purge_attempts = purge_attempts + 1, purge_attempted_at = ?, purge_retry_at = NULL"+
			" WHERE users.id = ? AND (users.purge_retry_at IS NULL OR users.purge_retry_at <= ?) AND "+fmt.Sprintf(unverifiedSignup, "users"),
			now, now, now, userID, now, before.UTC(), capabilities.RoleAdmin).Exec(ctx)
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

// ReleaseUnverifiedClaim lifts the purge's claim on userID after its
// deletion failed before anything was removed: the account is no longer
// marked deleting (it may be verified again), failure (the class of the
// failure, a deletion stage) is recorded on it, and the purge skips it
// until retryAt. It reports whether it released the claim: only the
// purge's own mark is lifted (one stamped by ClaimUnverified, on an
// account that still never verified an address), never a deletion its
// holder or an operator started.
func (s *Lifecycle) ReleaseUnverifiedClaim(ctx context.Context, userID int64, failure string, retryAt time.Time) (bool, error) {
	defer s.callerChanged(ctx, userID)
	res, err := s.store.DB.NewRaw("UPDATE users SET deleting_at = NULL, updated_at = ?, purge_failure = ?, purge_retry_at = ?"+
		" WHERE id = ? AND deleting_at IS NOT NULL AND deleting_at = purge_attempted_at AND self_signup AND first_verified_at IS NULL",
		s.now(), boundFailure(failure), retryAt.UTC(), userID).Exec(ctx)
	if err != nil {
		return false, fmt.Errorf("accounts: release unverified claim: %w", err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// RecordUnverifiedPurgeFailure records failure (the class of a failure, a
// deletion stage) on userID, whose purge failed after removing some of its
// data: the account stays marked deleting, for the deletion-resume lane.
func (s *Lifecycle) RecordUnverifiedPurgeFailure(ctx context.Context, userID int64, failure string) error {
	if _, err := s.store.DB.NewRaw("UPDATE users SET purge_failure = ? WHERE id = ?", boundFailure(failure), userID).Exec(ctx); err != nil {
		return fmt.Errorf("accounts: record purge failure: %w", err)
	}
	return nil
}

// boundFailure keeps a recorded failure class within 200 bytes.
func boundFailure(s string) string {
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
