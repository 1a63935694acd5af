package buckets

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
)

// Tables are the buckets' user-owned tables, in registration order: the
// inventory deletes in reverse, entries before their buckets.
var Tables = []storage.Table{
	// One row per user: its primary key is the owner column.
	{Name: "storage_usage", KeyColumn: "user_id"},
	{Name: "storage_buckets"},
	// Exported page by page by id, so any number of keys exports in
	// bounded memory, and a page ends at storage.MaxExportPageBytes of
	// values (a thousand values of 1 MiB are never read at once).
	{Name: "storage_entries", SizeColumn: "bytes"},
}

// RegisterInventory records the bucket tables: exported with the account
// and deleted with it. The tables exist whether or not buckets are on, so
// this is always called.
func RegisterInventory(inv *storage.Inventory) error {
	var errs []error
	for _, t := range Tables {
		errs = append(errs, inv.AddTable(t))
	}
	return errors.Join(errs...)
}

// DefaultBoundGrace is how long a bucket bound to a run or a package stays
// untouched before retention may remove it for want of its run record or
// package: longer than any run, whose record is written when it ends.
const DefaultBoundGrace = time.Hour

// RetentionOptions tune RetentionPolicies; zero fields take the defaults.
type RetentionOptions struct {
	// Grace is DefaultBoundGrace unless set.
	Grace time.Duration
	// RunTimeout is the longest a code run can last (code mode's
	// Limits.Timeout). A run's record is written only when it ends, so the
	// grace is never less than twice this: a bucket a long run wrote at
	// its start is not removed while the run still goes.
	RunTimeout time.Duration
}

// grace is the effective grace period of o.
func (o RetentionOptions) grace() time.Duration {
	return max(cmp.Or(o.Grace, DefaultBoundGrace), 2*o.RunTimeout)
}

// RetentionPolicies declares how long the bucket tables keep their rows:
// counters and entries as long as the account; a bucket bound to a code
// run (exec:) whose run record is gone, or to a package (package:, job:)
// that was deleted, is removed with its entries once untouched for the
// grace period; other buckets stay until dropped. Run records and
// packages are code mode's tables (code_runs, code_packages), which exist
// whether or not code mode is on.
func RetentionPolicies(o RetentionOptions) []retention.Policy {
	grace := o.grace()
	return []retention.Policy{
		retention.UntilAccountDeleted("storage_usage").Because("a user's storage counters"),
		retention.Custom("storage_buckets", fmt.Sprintf("a bucket bound to a code run (exec:) whose run record is gone, or to a package (package:, job:) that was deleted, is removed with its keys once untouched for %s; other buckets stay until dropped or the account is deleted", span(grace)),
			func(ctx context.Context, db bun.IDB, now time.Time, limit int) (int64, error) {
				return purgeUnbound(ctx, db, now.UTC().Add(-grace), limit)
			}),
		retention.UntilAccountDeleted("storage_entries").Because("or until deleted, or their bucket is dropped or removed by retention"),
	}
}

// span says d in words for the docs: "1 hour", "90 minutes".
func span(d time.Duration) string {
	unit, n := "", int64(0)
	switch {
	case d%time.Hour == 0:
		unit, n = "hour", int64(d/time.Hour)
	case d%time.Minute == 0:
		unit, n = "minute", int64(d/time.Minute)
	default:
		return d.String()
	}
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// unbound is the condition of a bucket whose run or package is gone.
const unbound = `((b.kind = 'exec' AND NOT EXISTS (SELECT 1 FROM code_runs AS r WHERE r.user_id = b.user_id AND r.id = b.bound_name))
	OR (b.kind IN ('package', 'job') AND NOT EXISTS (SELECT 1 FROM code_packages AS p WHERE p.user_id = b.user_id AND p.name = b.bound_name)))`

// purgeUnbound removes at most limit unbound buckets untouched since
// cutoff, each in its own transaction that checks the condition again
// under the owner's counter lock (a write meanwhile keeps the bucket).
func purgeUnbound(ctx context.Context, db bun.IDB, cutoff time.Time, limit int) (int64, error) {
	var found []struct {
		ID     int64 `bun:"id"`
		UserID int64 `bun:"user_id"`
	}
	if err := db.NewSelect().TableExpr("storage_buckets AS b").ColumnExpr("b.id, b.user_id").
		Where("b.kind <> 'named' AND b.updated_at < ?", cutoff).Where(unbound).
		// An account being deleted loses its buckets with it; skipping it
		// here keeps its buckets from taking every slot of the batch.
		Where("EXISTS (SELECT 1 FROM users AS u WHERE u.id = b.user_id AND u.deleting_at IS NULL)").
		OrderExpr("b.id").Limit(int64(limit)).Scan(ctx, &found); err != nil {
		return 0, fmt.Errorf("buckets: find unbound buckets: %w", err)
	}
	var n int64
	for _, b := range found {
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			now := time.Now().UTC()
			if _, err := lockUsage(ctx, tx, b.UserID, now); errors.Is(err, errAccountGone) {
				return nil // the account's deletion removes the bucket
			} else if err != nil {
				return err
			}
			var id int64
			err := tx.NewSelect().TableExpr("storage_buckets AS b").ColumnExpr("b.id").
				Where("b.id = ? AND b.user_id = ? AND b.updated_at < ?", b.ID, b.UserID, cutoff).Where(unbound).Scan(ctx, &id)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("buckets: recheck bucket: %w", err)
			}
			if _, err := dropBucket(ctx, tx, b.UserID, b.ID, now); err != nil {
				return err
			}
			n++
			return nil
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ReconcileLane names the schedule that reconciles the counters.
const ReconcileLane = "storage-reconcile"

// reconcilePerTick bounds the users one tick of ReconcileLane checks.
const reconcilePerTick = 500

// Schedule returns the hourly lane that reconciles the counters of up to
// 500 users per tick, sweeping all users in id order over the ticks.
func (s *Service) Schedule() schedules.Schedule {
	return schedules.Schedule{Name: ReconcileLane, Every: time.Hour, Run: func(ctx context.Context, _ schedules.Tick) error {
		n, err := s.Reconcile(ctx, reconcilePerTick)
		if n > 0 {
			s.log.InfoContext(ctx, "buckets: corrected drifted storage counters", "users", n)
		}
		return err
	}}
}

// Reconcile recomputes the counters of up to limitUsers users from their
// rows, continuing after the users the previous call checked (wrapping
// around after the last), corrects every counter that drifted (the user's
// and each bucket's), removes buckets left without keys, and returns how
// many users needed a correction. The sweep position is kept in memory:
// a restart begins again from the first user.
func (s *Service) Reconcile(ctx context.Context, limitUsers int) (int, error) {
	if limitUsers <= 0 {
		return 0, nil
	}
	s.reconcileMu.Lock()
	defer s.reconcileMu.Unlock()
	var ids []int64
	if err := s.store.Reader.NewSelect().Table("users").Column("id").Where("id > ?", s.reconcileAfter).
		OrderExpr("id").Limit(int64(limitUsers)).Scan(ctx, &ids); err != nil {
		return 0, fmt.Errorf("buckets: reconcile: %w", err)
	}
	corrected := 0
	for _, id := range ids {
		changed, err := s.ReconcileUser(ctx, id)
		if err != nil {
			return corrected, err
		}
		if changed {
			corrected++
		}
		s.reconcileAfter = id
	}
	if len(ids) < limitUsers {
		s.reconcileAfter = 0
	}
	return corrected, nil
}

// ReconcileUser recomputes one user's counters (users.id userID) from
// their entries, under the counter lock, and reports whether any was
// wrong.
func (s *Service) ReconcileUser(ctx context.Context, userID int64) (bool, error) {
	var owned int
	if err := s.store.Reader.NewRaw(`SELECT COUNT(*) FROM (
		SELECT 1 AS x FROM storage_usage WHERE user_id = ?
		UNION ALL SELECT 1 AS x FROM storage_buckets WHERE user_id = ?) AS t`, userID, userID).Scan(ctx, &owned); err != nil {
		return false, fmt.Errorf("buckets: reconcile: %w", err)
	}
	if owned == 0 {
		return false, nil // nothing stored, nothing counted
	}
	changed := false
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		changed = false
		now := time.Now().UTC()
		u, err := lockUsage(ctx, tx, userID, now)
		if errors.Is(err, errAccountGone) {
			return nil // being deleted: its rows go with it
		}
		if err != nil {
			return err
		}
		var bytes, keys int64
		if err := tx.NewSelect().Table("storage_entries").ColumnExpr("COALESCE(SUM(bytes), 0), COUNT(*)").
			Where("user_id = ?", userID).Scan(ctx, &bytes, &keys); err != nil {
			return fmt.Errorf("buckets: reconcile: sum entries: %w", err)
		}
		if bytes != u.bytes || keys != u.keys {
			changed = true
			s.log.WarnContext(ctx, "buckets: storage counter drifted", "user", userID,
				"counted_bytes", u.bytes, "stored_bytes", bytes, "counted_keys", u.keys, "stored_keys", keys)
			if _, err := tx.NewRaw("UPDATE storage_usage SET bytes = ?, key_count = ?, updated_at = ? WHERE user_id = ?",
				bytes, keys, now, userID).Exec(ctx); err != nil {
				return fmt.Errorf("buckets: reconcile: set usage: %w", err)
			}
		}
		const sums = `(SELECT COALESCE(SUM(e.bytes), 0) FROM storage_entries AS e WHERE e.user_id = storage_buckets.user_id AND e.bucket_id = storage_buckets.id)`
		const counts = `(SELECT COUNT(*) FROM storage_entries AS e WHERE e.user_id = storage_buckets.user_id AND e.bucket_id = storage_buckets.id)`
		res, err := tx.NewRaw("UPDATE storage_buckets SET bytes = "+sums+", key_count = "+counts+
			" WHERE user_id = ? AND (bytes <> "+sums+" OR key_count <> "+counts+")", userID).Exec(ctx)
		if err != nil {
			return fmt.Errorf("buckets: reconcile: set bucket counters: %w", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			changed = true
		}
		res, err = tx.NewRaw(`DELETE FROM storage_buckets WHERE user_id = ?
			AND NOT EXISTS (SELECT 1 FROM storage_entries AS e WHERE e.bucket_id = storage_buckets.id)`, userID).Exec(ctx)
		if err != nil {
			return fmt.Errorf("buckets: reconcile: remove empty buckets: %w", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			changed = true
		}
		return nil
	})
	return changed, err
}
