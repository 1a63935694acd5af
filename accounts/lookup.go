package accounts

import (
	"context"

	"github.com/uptrace/bun"
)

// StableIDByUsername returns the stable user id of the account named
// username in db ("" and sql.ErrNoRows when there is none), for callers
// that must name an account by its keyed hash, never its username (the
// audit log).
func StableIDByUsername(ctx context.Context, db bun.IDB, username string) (string, error) {
	var stable string
	err := db.NewSelect().Table("users").Column("stable_user_id").Where("username = ?", username).Scan(ctx, &stable)
	return stable, err
}

// UsernameOf returns the username of account id in db, inside the
// caller's transaction when db is one (sql.ErrNoRows when there is none).
func UsernameOf(ctx context.Context, db bun.IDB, id int64) (string, error) {
	var username string
	err := db.NewSelect().Table("users").Column("username").Where("id = ?", id).Scan(ctx, &username)
	return username, err
}
