// Package idempotency keeps, in SQL, the results of capability calls made
// with an idempotency key (capabilities.MetaIdempotencyKey), so that a
// retry gets the first call's result instead of running it again.
//
// Rows live in idempotency_keys, one per user, capability and key (the
// key itself is stored as a SHA-256 hash), owned through user_id: they are
// deleted with the account, never exported, and purged by the retention
// program after capabilities.IdempotencyWindow.
package idempotency

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// Table is the ownership-inventory registration of the store's table:
// deleted with the account, left out of exports.
var Table = storage.Table{Name: "idempotency_keys", SkipExport: true}

type row struct {
	bun.BaseModel `bun:"table:idempotency_keys"`
	ID            int64      `bun:"id,pk,autoincrement"`
	UserID        int64      `bun:"user_id,notnull"`
	Capability    string     `bun:"capability,notnull"`
	KeyHash       string     `bun:"key_hash,notnull"`
	ArgsHash      string     `bun:"args_hash,notnull"`
	State         string     `bun:"state,notnull"`
	Result        *string    `bun:"result"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	CompletedAt   *time.Time `bun:"completed_at"`
}

// Store implements capabilities.IdempotencyStore on SQL.
type Store struct {
	db  *bun.DB
	now func() time.Time
}

var _ capabilities.IdempotencyStore = (*Store)(nil)

// New returns a store on the primary database of store.
func New(store *storage.Store) *Store {
	return &Store{db: store.DB, now: func() time.Time { return time.Now().UTC() }}
}

// Claim inserts a running row for k in a statement of its own (committed
// before the handler runs), or returns the live row that holds k. A row
// older than the window is replaced.
func (s *Store) Claim(ctx context.Context, k capabilities.IdempotencyKey) (capabilities.IdempotencyRecord, bool, error) {
	if k.OwnerID == 0 {
		if err := s.db.NewSelect().Table("users").Column("id").Where("stable_user_id = ?", k.UserID).Scan(ctx, &k.OwnerID); err != nil {
			return capabilities.IdempotencyRecord{}, false, fmt.Errorf("idempotency: find the caller's account: %w", err)
		}
	}
	for range 3 {
		now := s.now()
		r := &row{UserID: k.OwnerID, Capability: k.Capability, KeyHash: k.KeyHash, ArgsHash: k.ArgsHash, State: "running", CreatedAt: now}
		res, err := s.db.NewInsert().Model(r).On("CONFLICT DO NOTHING").Exec(ctx)
		if err != nil {
			return capabilities.IdempotencyRecord{}, false, fmt.Errorf("idempotency: claim: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			if r.ID == 0 {
				if err := s.db.NewSelect().Model(r).Column("id").
					Where("user_id = ? AND capability = ? AND key_hash = ?", k.OwnerID, k.Capability, k.KeyHash).Scan(ctx); err != nil {
					return capabilities.IdempotencyRecord{}, false, fmt.Errorf("idempotency: claim: %w", err)
				}
			}
			return capabilities.IdempotencyRecord{ID: r.ID, ArgsHash: k.ArgsHash}, true, nil
		}
		var ex row
		err = s.db.NewSelect().Model(&ex).
			Where("user_id = ? AND capability = ? AND key_hash = ?", k.OwnerID, k.Capability, k.KeyHash).Scan(ctx)
		if errors.Is(err, sql.ErrNoRows) {
			continue // released or purged meanwhile: try again
		}
		if err != nil {
			return capabilities.IdempotencyRecord{}, false, fmt.Errorf("idempotency: read: %w", err)
		}
		if ex.CreatedAt.Before(now.Add(-capabilities.IdempotencyWindow)) {
			// Expired: the key is free again.
			if _, err := s.db.NewDelete().Model((*row)(nil)).Where("id = ? AND created_at = ?", ex.ID, ex.CreatedAt).Exec(ctx); err != nil {
				return capabilities.IdempotencyRecord{}, false, fmt.Errorf("idempotency: expire: %w", err)
			}
			continue
		}
		rec := capabilities.IdempotencyRecord{ID: ex.ID, ArgsHash: ex.ArgsHash, Done: ex.State == "done"}
		if ex.Result != nil {
			rec.Result = []byte(*ex.Result)
		}
		return rec, false, nil
	}
	return capabilities.IdempotencyRecord{}, false, errors.New("idempotency: claim: the key keeps changing hands")
}

// Complete stores the outcome of the claimed row id.
func (s *Store) Complete(ctx context.Context, id int64, result []byte) error {
	now := s.now()
	res := string(result)
	if _, err := s.db.NewUpdate().Model((*row)(nil)).
		Set("state = 'done'").Set("result = ?", res).Set("completed_at = ?", now).
		Where("id = ? AND state = 'running'", id).Exec(ctx); err != nil {
		return fmt.Errorf("idempotency: complete: %w", err)
	}
	return nil
}

// Release deletes the claimed row id while it is still running.
func (s *Store) Release(ctx context.Context, id int64) error {
	if _, err := s.db.NewDelete().Model((*row)(nil)).Where("id = ? AND state = 'running'", id).Exec(ctx); err != nil {
		return fmt.Errorf("idempotency: release: %w", err)
	}
	return nil
}
