// Package sqltasks keeps the tasks of the MCP tasks extension (protocol
// 2026-07-28) in SQL, so that any replica can answer for a task: an
// mcp.TaskStore on table mcp_tasks, owned by users.id through user_id.
// Every method filters by the caller's stable user id, so another user's
// task id answers exactly like an unknown one.
package sqltasks

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"

	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/storage"
)

// Table is the ownership-inventory entry of the tasks table.
var Table = storage.Table{Name: "mcp_tasks"}

// Store is an mcp.TaskStore in SQL.
type Store struct {
	store *storage.Store
	now   func() time.Time
}

var _ mcp.TaskStore = (*Store)(nil)

// New returns a Store on store (migrated: migration 0020).
func New(store *storage.Store) *Store { return &Store{store: store, now: time.Now} }

type row struct {
	bun.BaseModel `bun:"table:mcp_tasks"`
	ID            string         `bun:"id,pk"`
	UserID        int64          `bun:"user_id,notnull"`
	Capability    string         `bun:"capability,notnull"`
	Status        string         `bun:"status,notnull"`
	InputRequests sql.NullString `bun:"input_requests"`
	Answers       sql.NullString `bun:"answers"`
	Result        sql.NullString `bun:"result"`
	Error         sql.NullString `bun:"error"`
	CreatedAt     time.Time      `bun:"created_at,notnull"`
	UpdatedAt     time.Time      `bun:"updated_at,notnull"`
	ExpiresAt     time.Time      `bun:"expires_at,notnull"`
}

func text(b []byte) sql.NullString {
	if len(b) == 0 {
		return sql.NullString{}
	}
	return sql.NullString{String: string(b), Valid: true}
}

func raw(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

func (r *row) set(t mcp.Task) {
	r.Capability, r.Status = t.Capability, t.Status
	r.InputRequests, r.Result, r.Error = text(t.InputRequests), text(t.Result), text(t.Error)
	r.Answers = sql.NullString{}
	if len(t.Answers) > 0 {
		b, _ := json.Marshal(t.Answers)
		r.Answers = text(b)
	}
	r.CreatedAt, r.UpdatedAt, r.ExpiresAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC(), t.ExpiresAt.UTC()
}

func (r row) task(userID string) mcp.Task {
	t := mcp.Task{ID: r.ID, UserID: userID, Capability: r.Capability, Status: r.Status,
		InputRequests: raw(r.InputRequests), Result: raw(r.Result), Error: raw(r.Error),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ExpiresAt: r.ExpiresAt}
	if r.Answers.Valid {
		_ = json.Unmarshal([]byte(r.Answers.String), &t.Answers)
	}
	return t
}

// ownerID is the subquery resolving a stable user id to users.id.
const ownerID = "(SELECT id FROM users WHERE stable_user_id = ?)"

// Create stores a task for t.UserID, and drops expired tasks.
func (s *Store) Create(ctx context.Context, t mcp.Task) error {
	now := s.now().UTC()
	if _, err := s.store.DB.NewDelete().Model((*row)(nil)).Where("expires_at < ?", now).Exec(ctx); err != nil {
		return fmt.Errorf("sqltasks: expire: %w", err)
	}
	var r row
	r.set(t)
	res, err := s.store.DB.NewRaw(`INSERT INTO mcp_tasks (id, user_id, capability, status, input_requests, answers, result, error, created_at, updated_at, expires_at)
		SELECT ?, u.id, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM users AS u WHERE u.stable_user_id = ?`,
		t.ID, r.Capability, r.Status, r.InputRequests, r.Answers, r.Result, r.Error, r.CreatedAt, r.UpdatedAt, r.ExpiresAt, t.UserID).Exec(ctx)
	if err != nil {
		return fmt.Errorf("sqltasks: create: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("sqltasks: create: no user %q", t.UserID)
	}
	return nil
}

func (s *Store) get(ctx context.Context, db bun.IDB, userID, id string, lock bool) (row, error) {
	var r row
	q := db.NewSelect().Model(&r).Where("id = ? AND user_id = "+ownerID+" AND expires_at >= ?", id, userID, s.now().UTC())
	if lock && s.store.DB.Dialect().Name() == dialect.PG {
		q = q.For("UPDATE")
	}
	if err := q.Scan(ctx); errors.Is(err, sql.ErrNoRows) {
		return r, mcp.ErrTaskNotFound
	} else if err != nil {
		return r, fmt.Errorf("sqltasks: get: %w", err)
	}
	return r, nil
}

// Get returns userID's task id, or mcp.ErrTaskNotFound.
func (s *Store) Get(ctx context.Context, userID, id string) (mcp.Task, error) {
	r, err := s.get(ctx, s.store.DB, userID, id, false)
	if err != nil {
		return mcp.Task{}, err
	}
	return r.task(userID), nil
}

// Update applies fn to userID's task id in one transaction.
func (s *Store) Update(ctx context.Context, userID, id string, fn func(*mcp.Task) error) (mcp.Task, error) {
	var out mcp.Task
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		r, err := s.get(ctx, tx, userID, id, true)
		if err != nil {
			return err
		}
		t := r.task(userID)
		if err := fn(&t); err != nil {
			return err
		}
		r.set(t)
		if _, err := tx.NewUpdate().Model(&r).WherePK().Exec(ctx); err != nil {
			return fmt.Errorf("sqltasks: update: %w", err)
		}
		out = t
		return nil
	})
	return out, err
}
