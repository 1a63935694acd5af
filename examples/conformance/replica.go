package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/mcp/sqlsessions"
	"github.com/enclave-mcp/enclave/mcp/sqltasks"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// Replica mode (-database-url postgres://…): several processes serve the
// suite behind one round-robin proxy, sharing sessions, resumable streams,
// tasks and the request-state key through PostgreSQL and its bus, as
// replicas of an enclave server do (docs/scaling.md). The anonymous caller
// is then a row of the users table, which the shared tables reference.

// replicaOptions opens the shared stores and fills opts for replica mode;
// the returned func closes them.
func replicaOptions(ctx context.Context, databaseURL string, anonymous *capabilities.Caller, opts *mcp.Options, log *slog.Logger) (func(), error) {
	if !cluster.IsPostgresURL(databaseURL) {
		return nil, errors.New("replica mode needs a postgres:// database")
	}
	dir, err := os.MkdirTemp("", "enclave-conformance-*")
	if err != nil {
		return nil, err
	}
	store, err := storage.Open(ctx, storage.Config{DataDir: dir, DatabaseURL: databaseURL, Logger: log})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	closeAll := func() { store.Close(); os.RemoveAll(dir) }
	if _, err := migrations.Apply(ctx, store.DB); err != nil {
		closeAll()
		return nil, err
	}
	sum := sha256.Sum256([]byte("conformance"))
	anonymous.UserID = hex.EncodeToString(sum[:])
	now := time.Now().UTC()
	if _, err := store.DB.ExecContext(ctx, `INSERT INTO users (stable_user_id, email, username, created_at, updated_at)
		VALUES (?, 'conformance@example.invalid', 'conformance', ?, ?) ON CONFLICT DO NOTHING`, anonymous.UserID, now, now); err != nil {
		closeAll()
		return nil, fmt.Errorf("conformance user: %w", err)
	}
	bus, err := cluster.Open(ctx, cluster.OpenOptions{DatabaseURL: databaseURL, DB: store.DB.DB, Logger: log})
	if err != nil {
		closeAll()
		return nil, err
	}
	opts.Bus, opts.Sessions, opts.Tasks = bus, sqlsessions.New(store), sqltasks.New(store)
	// Every replica derives the same key; this server has authentication
	// off and serves loopback only.
	key := sha256.Sum256([]byte("enclave-conformance-request-state\x00" + databaseURL))
	opts.RequestStateKey = key[:]
	return func() { bus.Close(); closeAll() }, nil
}
