// Package migrations holds enclave's SQL schema, one folder per dialect
// (sqlite/ and postgres/, files named NNNN_name.up.sql), embedded into the
// binary, and the runner that applies it.
//
// Apply is safe to call from every replica at start-up:
//
//   - each migration runs in its own transaction together with the row that
//     records it, so a migration is recorded only if it succeeded, and a
//     failure leaves nothing half-applied (both dialects have transactional
//     DDL);
//   - concurrent runners are serialized inside that transaction
//     (pg_advisory_xact_lock on PostgreSQL; on SQLite the write lock taken at
//     BEGIN IMMEDIATE), and the applied set is re-read under the lock, so each
//     migration runs exactly once. A crashed runner leaves no stale lock;
//   - a recorded migration whose file has changed since is an error, so a
//     schema never silently differs between installations.
//
// The runner is ours rather than bun's migrate package because bun's records
// a migration before running it unless configured otherwise, and keeps its
// lock in a table that a crashed process leaves locked.
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// Migration is one schema step.
type Migration struct {
	Version  int
	Name     string
	SQL      string
	Checksum string // hex SHA-256 of SQL
}

// Result says what Apply did.
type Result struct {
	// Applied lists the migrations run by this call, in order.
	Applied []Migration
	// Current is the highest version recorded after the call.
	Current int
	// Unknown lists recorded versions this binary does not know: the database
	// was migrated by a newer release. Apply leaves them alone.
	Unknown []int
}

// lockKey identifies enclave's migration advisory lock on PostgreSQL.
const lockKey = 0x656e636c617665 // "enclave"

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.up\.sql$`)

// folder returns the migrations folder for db's dialect.
func folder(db bun.IDB) (string, error) {
	switch db.Dialect().Name() {
	case dialect.SQLite:
		return "sqlite", nil
	case dialect.PG:
		return "postgres", nil
	default:
		return "", fmt.Errorf("migrations: unsupported dialect %s", db.Dialect().Name())
	}
}

// Load returns enclave's embedded migrations of one dialect folder
// ("sqlite" or "postgres") in version order.
func Load(dir string) ([]Migration, error) { return load(files, dir) }

func load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrations: read %s: %w", dir, err)
	}
	var out []Migration
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrations: %s/%s: want NNNN_name.up.sql", dir, e.Name())
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", e.Name(), err)
		}
		v, _ := strconv.Atoi(m[1])
		sum := sha256.Sum256(body)
		if len(out) > 0 && out[len(out)-1].Version == v {
			return nil, fmt.Errorf("migrations: %s: version %d used twice", dir, v)
		}
		out = append(out, Migration{Version: v, Name: m[2], SQL: string(body), Checksum: hex.EncodeToString(sum[:])})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	return out, nil
}

// ErrChecksumMismatch reports an applied migration whose embedded SQL has
// changed since it ran.
var ErrChecksumMismatch = errors.New("migrations: applied migration has changed")

type record struct {
	bun.BaseModel `bun:"table:schema_migrations"`
	Source        string    `bun:"source,pk"`
	Version       int       `bun:"version,pk"`
	Name          string    `bun:"name,notnull"`
	Checksum      string    `bun:"checksum,notnull"`
	AppliedAt     time.Time `bun:"applied_at,notnull"`
}

// Source is a named set of migrations: enclave's own, or an embedder's for
// the tables of its own capabilities. FS holds the folders sqlite/ and
// postgres/ with NNNN_name.up.sql files; versions are per source.
type Source struct {
	Name string
	FS   fs.FS
}

// EnclaveSource is the name under which enclave's own migrations are
// recorded.
const EnclaveSource = "enclave"

// Apply runs every pending enclave migration on db, in order. db must be
// the primary (writable) handle; on SQLite, one opened by package storage,
// whose transactions begin immediately.
func Apply(ctx context.Context, db *bun.DB) (Result, error) {
	return ApplySource(ctx, db, Source{Name: EnclaveSource, FS: files})
}

var sourceName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// ApplySource runs the pending migrations of src on db, with the same
// guarantees as Apply. Apply enclave's migrations first: an embedder's
// tables reference users.
func ApplySource(ctx context.Context, db *bun.DB, src Source) (Result, error) {
	if !sourceName.MatchString(src.Name) || src.FS == nil {
		return Result{}, fmt.Errorf("migrations: source %q: want a lowercase name and an FS", src.Name)
	}
	dir, err := folder(db)
	if err != nil {
		return Result{}, err
	}
	all, err := load(src.FS, dir)
	if err != nil {
		return Result{}, err
	}
	var res Result
	if err := locked(ctx, db, func(tx bun.Tx) error {
		_, err := tx.NewCreateTable().Model((*record)(nil)).IfNotExists().Exec(ctx)
		return err
	}); err != nil {
		return res, fmt.Errorf("migrations: create schema_migrations: %w", err)
	}
	for _, m := range all {
		ran := false
		err := locked(ctx, db, func(tx bun.Tx) error {
			var got []record
			if err := tx.NewSelect().Model(&got).Where("source = ? AND version = ?", src.Name, m.Version).Scan(ctx); err != nil {
				return err
			}
			if len(got) == 1 {
				if got[0].Checksum != m.Checksum {
					return fmt.Errorf("%w: %04d_%s", ErrChecksumMismatch, m.Version, m.Name)
				}
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			rec := &record{Source: src.Name, Version: m.Version, Name: m.Name, Checksum: m.Checksum, AppliedAt: time.Now().UTC()}
			if _, err := tx.NewInsert().Model(rec).Exec(ctx); err != nil {
				return err
			}
			ran = true
			return nil
		})
		if err != nil {
			if errors.Is(err, ErrChecksumMismatch) {
				return res, err
			}
			return res, fmt.Errorf("migrations: %04d_%s: %w", m.Version, m.Name, err)
		}
		if ran {
			res.Applied = append(res.Applied, m)
		}
	}
	var versions []int
	if err := db.NewSelect().Model((*record)(nil)).Column("version").Where("source = ?", src.Name).Order("version").Scan(ctx, &versions); err != nil {
		return res, fmt.Errorf("migrations: read applied: %w", err)
	}
	known := make(map[int]bool, len(all))
	for _, m := range all {
		known[m.Version] = true
	}
	for _, v := range versions {
		if !known[v] {
			res.Unknown = append(res.Unknown, v)
		}
		res.Current = max(res.Current, v)
	}
	return res, nil
}

// locked runs fn in a transaction that holds the migration lock.
func locked(ctx context.Context, db *bun.DB, fn func(bun.Tx) error) error {
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if db.Dialect().Name() == dialect.PG {
			if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(?)", int64(lockKey)); err != nil {
				return fmt.Errorf("take migration lock: %w", err)
			}
		}
		return fn(tx)
	})
}

// AppliedMigration is a migration recorded in the database.
type AppliedMigration struct {
	Version   int
	Name      string
	AppliedAt time.Time
}

// Status says where a database stands against one source of migrations.
type Status struct {
	Source string
	// Applied lists the recorded migrations, in version order.
	Applied []AppliedMigration
	// Pending lists the migrations of the source not yet recorded.
	Pending []Migration
	// Unknown lists recorded versions the source does not have (a newer
	// release migrated the database).
	Unknown []int
	// Changed lists recorded migrations whose SQL differs from the source's.
	Changed []int
}

// Current reports whether nothing is pending or changed.
func (s Status) Current() bool { return len(s.Pending) == 0 && len(s.Changed) == 0 }

// StatusOf reads, without changing anything, which migrations of src db
// has applied and which are pending. A database never migrated has every
// migration pending.
func StatusOf(ctx context.Context, db bun.IDB, src Source) (Status, error) {
	st := Status{Source: src.Name}
	if src.FS == nil {
		return st, fmt.Errorf("migrations: source %q has no FS", src.Name)
	}
	dir, err := folder(db)
	if err != nil {
		return st, err
	}
	all, err := load(src.FS, dir)
	if err != nil {
		return st, err
	}
	exists, err := tableExists(ctx, db, "schema_migrations")
	if err != nil {
		return st, fmt.Errorf("migrations: status: %w", err)
	}
	var got []record
	if exists {
		if err := db.NewSelect().Model(&got).Where("source = ?", src.Name).Order("version").Scan(ctx); err != nil {
			return st, fmt.Errorf("migrations: status: %w", err)
		}
	}
	byVersion := make(map[int]record, len(got))
	for _, r := range got {
		byVersion[r.Version] = r
	}
	known := make(map[int]bool, len(all))
	for _, m := range all {
		known[m.Version] = true
		r, ok := byVersion[m.Version]
		switch {
		case !ok:
			st.Pending = append(st.Pending, m)
		case r.Checksum != m.Checksum:
			st.Changed = append(st.Changed, m.Version)
		}
	}
	for _, r := range got {
		st.Applied = append(st.Applied, AppliedMigration{Version: r.Version, Name: r.Name, AppliedAt: r.AppliedAt})
		if !known[r.Version] {
			st.Unknown = append(st.Unknown, r.Version)
		}
	}
	return st, nil
}

// EnclaveStatus is StatusOf for enclave's own migrations.
func EnclaveStatus(ctx context.Context, db bun.IDB) (Status, error) {
	return StatusOf(ctx, db, Source{Name: EnclaveSource, FS: files})
}

func tableExists(ctx context.Context, db bun.IDB, name string) (bool, error) {
	var n int
	var err error
	switch db.Dialect().Name() {
	case dialect.PG:
		err = db.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?", name).Scan(&n)
	default:
		err = db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", name).Scan(&n)
	}
	return n > 0, err
}
