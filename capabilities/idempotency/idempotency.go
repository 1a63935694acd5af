// Package idempotency keeps, in SQL, the results of capability calls made
// with an idempotency key (capabilities.MetaIdempotencyKey), so that a
// retry gets the first call's result instead of running it again.
//
// Rows live in idempotency_keys, one per user, capability and key (the
// key itself is stored as a SHA-256 hash), owned through user_id: they are
// deleted with the account, never exported, and purged by the retention
// program after capabilities.IdempotencyWindow. While a call runs, the
// registry renews its row (completed_at holds the last renewal until the
// row is done); a running row not renewed for capabilities.IdempotencyStale
// belongs to a replica that died, and the next claim of its key takes it
// over. A stored result is sealed
// (AES-256-GCM under the server's data keys) and bound to its row and
// owner: a result can hold something shown only once, such as a new
// credential, and never sits in SQL in clear.
package idempotency

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/internal/envelope"
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
	KeyID         *int64     `bun:"key_id"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	CompletedAt   *time.Time `bun:"completed_at"`
}

// Store implements capabilities.IdempotencyStore on SQL.
type Store struct {
	db   *bun.DB
	ring *envelope.Ring
	now  func() time.Time
}

var (
	_ capabilities.IdempotencyStore   = (*Store)(nil)
	_ capabilities.IdempotencyRenewer = (*Store)(nil)
)

// New returns a store on the primary database of store, sealing results
// with ring.
func New(store *storage.Store, ring *envelope.Ring) *Store {
	return &Store{db: store.DB, ring: ring, now: func() time.Time { return time.Now().UTC() }}
}

// additionalData binds a sealed result to its row and owner.
func additionalData(userID, id int64) string {
	return fmt.Sprintf("idempotency:user:%d:row:%d", userID, id)
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
		// A random id, never the next one: SQLite hands the id of a
		// deleted newest row out again, and a handler whose row was
		// deleted while it ran (its account deleted, or expired) would
		// then complete or release the new claim, perhaps another user's.
		r := &row{ID: randomID(), UserID: k.OwnerID, Capability: k.Capability, KeyHash: k.KeyHash, ArgsHash: k.ArgsHash, State: "running", CreatedAt: now}
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
		if ex.State == "running" && renewedAt(ex).Before(now.Add(-capabilities.IdempotencyStale)) {
			// Neither completed nor renewed for IdempotencyStale: the
			// replica running it died. The key is free again (the
			// DELETE checks again, so a renewal that lands first wins).
			if _, err := s.db.NewDelete().Model((*row)(nil)).
				Where("id = ? AND state = 'running' AND COALESCE(completed_at, created_at) < ?", ex.ID, now.Add(-capabilities.IdempotencyStale)).Exec(ctx); err != nil {
				return capabilities.IdempotencyRecord{}, false, fmt.Errorf("idempotency: take over: %w", err)
			}
			continue
		}
		rec := capabilities.IdempotencyRecord{ID: ex.ID, ArgsHash: ex.ArgsHash, Done: ex.State == "done"}
		if rec.Done {
			if ex.Result == nil || ex.KeyID == nil {
				return capabilities.IdempotencyRecord{}, false, errors.New("idempotency: a completed row has no result")
			}
			plain, err := s.ring.Open(ctx, *ex.KeyID, *ex.Result, additionalData(ex.UserID, ex.ID))
			if err != nil {
				return capabilities.IdempotencyRecord{}, false, fmt.Errorf("idempotency: open result: %w", err)
			}
			rec.Result = plain
		}
		return rec, false, nil
	}
	return capabilities.IdempotencyRecord{}, false, errors.New("idempotency: claim: the key keeps changing hands")
}

// renewedAt is when a running row was last known alive: its last renewal
// (kept in completed_at while the row runs), else its claim.
func renewedAt(r row) time.Time {
	if r.CompletedAt != nil {
		return *r.CompletedAt
	}
	return r.CreatedAt
}

// Renew records that the running row id is still running (in
// completed_at, which holds the completion time once the row is done).
func (s *Store) Renew(ctx context.Context, id int64) error {
	if _, err := s.db.NewUpdate().Model((*row)(nil)).Set("completed_at = ?", s.now()).
		Where("id = ? AND state = 'running'", id).Exec(ctx); err != nil {
		return fmt.Errorf("idempotency: renew: %w", err)
	}
	return nil
}

// randomID is a positive 63-bit row id.
func randomID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	if id := int64(binary.BigEndian.Uint64(b[:]) >> 1); id != 0 {
		return id
	}
	return 1
}

// Complete stores the outcome of the claimed row id.
func (s *Store) Complete(ctx context.Context, id int64, result []byte) error {
	now := s.now()
	var owner int64
	if err := s.db.NewSelect().Model((*row)(nil)).Column("user_id").Where("id = ?", id).Scan(ctx, &owner); err != nil {
		return fmt.Errorf("idempotency: complete: %w", err)
	}
	keyID, sealed, err := s.ring.Seal(additionalData(owner, id), result)
	if err != nil {
		return fmt.Errorf("idempotency: complete: %w", err)
	}
	if _, err := s.db.NewUpdate().Model((*row)(nil)).
		Set("state = 'done'").Set("result = ?", sealed).Set("key_id = ?", keyID).Set("completed_at = ?", now).
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
