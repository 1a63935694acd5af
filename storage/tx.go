package storage

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
)

// RunInTx runs fn in a transaction on the primary database, committing when
// fn returns nil and rolling back otherwise (also when fn panics). On SQLite
// the transaction holds the write lock from its start, so it never fails
// half-way with "database is locked".
//
// fn must do all its SQL through tx; the error it returns is passed through
// unwrapped so callers can match domain errors with errors.Is.
func (s *Store) RunInTx(ctx context.Context, fn func(ctx context.Context, tx bun.Tx) error) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("storage: begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	if err := fn(ctx, tx); err != nil {
		done = true
		_ = tx.Rollback()
		return err
	}
	done = true
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("storage: commit: %w", err)
	}
	return nil
}
