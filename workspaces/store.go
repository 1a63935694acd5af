package workspaces

import (
	"container/list"
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/sqlitedialect"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

//go:embed schema
var schemaFiles embed.FS

// CoreSchema is the schema every workspace store carries (revision, events,
// idempotency results, pending jobs). It is applied by the stores
// themselves; embedders add their own tables with Config.Schema.
var CoreSchema = migrations.Source{Name: "workspaces", FS: mustSub(schemaFiles, "schema")}

func mustSub(f fs.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return s
}

// Store holds the state of every workspace: the data its named operations
// read and write. Each workspace is its own serialization unit: Update runs
// one transaction at a time per workspace, while different workspaces run
// in parallel. Every table of a workspace store has a workspace_id column,
// and every query of an operation filters by it, so the same SQL runs on
// both implementations.
//
// Two implementations ship: SQLiteStore (one database file per workspace)
// and PostgresStore (rows of all workspaces in the main database,
// serialized by a per-workspace advisory lock). NewStore picks the one that
// matches the main store's dialect.
type Store interface {
	// Update runs fn in a write transaction of workspace id, after every
	// earlier Update of the same workspace has finished. fn's error rolls
	// the transaction back and is returned unwrapped.
	Update(ctx context.Context, id string, fn func(ctx context.Context, tx bun.Tx) error) error
	// View runs fn in a read transaction of workspace id.
	View(ctx context.Context, id string, fn func(ctx context.Context, tx bun.Tx) error) error
	// Drop removes the whole state of workspace id. Dropping a workspace
	// that has no state is not an error.
	Drop(ctx context.Context, id string) error
	// Close releases the store's resources (open files).
	Close() error
}

// DefaultMaxOpen bounds the workspace database files SQLiteStore keeps open.
const DefaultMaxOpen = 256

var workspaceID = regexp.MustCompile(`^w_[a-z2-7]{26}$`)

// validID guards every path and lock built from a workspace id.
func validID(id string) error {
	if !workspaceID.MatchString(id) {
		return errNotFound
	}
	return nil
}

// NewStore returns the workspace store for the main store's dialect: on
// SQLite, a SQLiteStore keeping its files in dir with at most maxOpen open
// (DefaultMaxOpen when ≤ 0); on PostgreSQL, a PostgresStore on main. Both
// apply CoreSchema and the sources in schema.
func NewStore(ctx context.Context, main *storage.Store, dir string, maxOpen int, schema ...migrations.Source) (Store, error) {
	srcs := append([]migrations.Source{CoreSchema}, schema...)
	if main.Dialect() == storage.Postgres {
		return NewPostgresStore(ctx, main.DB, srcs...)
	}
	return NewSQLiteStore(dir, maxOpen, srcs...)
}

// PostgresStore keeps every workspace's rows in one database, partitioned
// by the workspace_id column, and serializes the writes of one workspace
// with a transaction-scoped advisory lock on its id.
type PostgresStore struct {
	db *bun.DB
	// tables lists the tables Drop clears and Export reads: those the
	// sources applied create that have a workspace_id column. The main
	// database holds other tables too, and one of them having a
	// workspace_id column (an embedder's per-user table naming a
	// workspace) does not make it workspace state.
	tables []string
}

var createTable = regexp.MustCompile(`(?i)\bCREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"?([A-Za-z_][A-Za-z0-9_]*)"?`)

// sourceTables names the tables the dialect's migrations of srcs create.
func sourceTables(dialect string, srcs []migrations.Source) (map[string]bool, error) {
	out := map[string]bool{}
	for _, src := range srcs {
		err := fs.WalkDir(src.FS, dialect, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := fs.ReadFile(src.FS, p)
			if err != nil {
				return err
			}
			for _, m := range createTable.FindAllStringSubmatch(string(b), -1) {
				out[strings.ToLower(m[1])] = true
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("workspaces: read schema %s: %w", src.Name, err)
		}
	}
	return out, nil
}

// advisoryNamespace is the first key of the per-workspace advisory locks;
// the two-key lock space never overlaps the one-key space of migrations.
const advisoryNamespace = 0x77737063 // "wspc"

// NewPostgresStore applies srcs to db and returns the store.
func NewPostgresStore(ctx context.Context, db *bun.DB, srcs ...migrations.Source) (*PostgresStore, error) {
	s := &PostgresStore{db: db}
	for _, src := range srcs {
		if _, err := migrations.ApplySource(ctx, db, src); err != nil {
			return nil, fmt.Errorf("workspaces: apply schema %s: %w", src.Name, err)
		}
	}
	tables, err := workspaceTables(ctx, db)
	if err != nil {
		return nil, err
	}
	own, err := sourceTables("postgres", srcs)
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		if own[t] {
			s.tables = append(s.tables, t)
		}
	}
	return s, nil
}

// workspaceTables lists the tables of db's current schema that have a
// workspace_id column, except the directory's own.
func workspaceTables(ctx context.Context, db bun.IDB) ([]string, error) {
	var names []string
	q := `SELECT table_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND column_name = 'workspace_id'
		AND table_name NOT IN ('workspace_members', 'workspace_invitations', 'workspace_api_keys')
		ORDER BY table_name`
	if db.Dialect().Name().String() == "sqlite" {
		q = `SELECT m.name FROM sqlite_master m JOIN pragma_table_info(m.name) p
			WHERE m.type = 'table' AND p.name = 'workspace_id' ORDER BY m.name`
	}
	if err := db.NewRaw(q).Scan(ctx, &names); err != nil {
		return nil, fmt.Errorf("workspaces: list workspace tables: %w", err)
	}
	return names, nil
}

func (s *PostgresStore) Update(ctx context.Context, id string, fn func(ctx context.Context, tx bun.Tx) error) error {
	if err := validID(id); err != nil {
		return err
	}
	return runTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(?, hashtext(?))", advisoryNamespace, id); err != nil {
			return fmt.Errorf("workspaces: lock workspace: %w", err)
		}
		return fn(ctx, tx)
	})
}

func (s *PostgresStore) View(ctx context.Context, id string, fn func(ctx context.Context, tx bun.Tx) error) error {
	if err := validID(id); err != nil {
		return err
	}
	return runTx(ctx, s.db, fn)
}

func (s *PostgresStore) Drop(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	return s.Update(ctx, id, func(ctx context.Context, tx bun.Tx) error {
		for _, t := range s.tables {
			if _, err := tx.NewDelete().Table(t).Where("workspace_id = ?", id).Exec(ctx); err != nil {
				return fmt.Errorf("workspaces: drop %s: %w", t, err)
			}
		}
		return nil
	})
}

func (s *PostgresStore) Close() error { return nil }

// runTx is storage.Store.RunInTx for any handle: fn's error comes back
// unwrapped.
func runTx(ctx context.Context, db *bun.DB, fn func(ctx context.Context, tx bun.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("workspaces: begin: %w", err)
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
		return fmt.Errorf("workspaces: commit: %w", err)
	}
	return nil
}

// SQLiteStore keeps each workspace in its own SQLite file, <dir>/<id>.db:
// the isolation and recovery unit of one workspace. Files are opened on
// demand, each with a single connection whose transactions take the write
// lock at BEGIN, so the operations of one workspace run one at a time while
// other workspaces' files are written in parallel. At most maxOpen files
// are open at once: the least recently used idle one is closed to make
// room, and a caller waits when every open file is in use.
type SQLiteStore struct {
	// Known, when set, is asked before a missing workspace file is
	// created: a file is made only for a workspace it knows (the
	// service's directory), so that a late job or an op that raced with
	// the workspace's deletion never brings back a file of a deleted one.
	Known func(ctx context.Context, id string) (bool, error)

	dir     string
	max     int
	srcs    []migrations.Source
	version int32 // PRAGMA user_version of a file carrying every source

	mu     sync.Mutex
	cond   *sync.Cond
	open   map[string]*handle
	lru    *list.List // of *handle, most recently used first; idle and busy
	closed bool
	peak   int
}

type handle struct {
	id    string
	db    *bun.DB
	refs  int
	ready chan struct{} // closed once db is set or err
	err   error
	elem  *list.Element
}

// NewSQLiteStore returns a store keeping its files in dir.
func NewSQLiteStore(dir string, maxOpen int, srcs ...migrations.Source) (*SQLiteStore, error) {
	if maxOpen <= 0 {
		maxOpen = DefaultMaxOpen
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("workspaces: create directory: %w", err)
	}
	h := fnv.New32a()
	for _, src := range srcs {
		fmt.Fprintf(h, "%s\n", src.Name)
		_ = fs.WalkDir(src.FS, "sqlite", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			b, _ := fs.ReadFile(src.FS, p)
			fmt.Fprintf(h, "%s\n%s\n", p, b)
			return nil
		})
	}
	s := &SQLiteStore{dir: dir, max: maxOpen, srcs: srcs, version: int32(h.Sum32() & 0x7fffffff), open: map[string]*handle{}, lru: list.New()}
	s.cond = sync.NewCond(&s.mu)
	if err := s.buildTemplate(); err != nil {
		return nil, err
	}
	return s, nil
}

// template is the path of an empty, migrated workspace file that new
// workspaces start as a copy of: copying a file is much cheaper than
// running every migration in each new file.
func (s *SQLiteStore) template() string {
	return filepath.Join(s.dir, fmt.Sprintf(".template-%d.db", s.version))
}

func (s *SQLiteStore) buildTemplate() error {
	if _, err := os.Stat(s.template()); err == nil {
		return nil
	}
	tmp := filepath.Join(s.dir, ".template-"+rand.Text()+".tmp")
	db, err := s.openPath(context.Background(), tmp)
	if err == nil {
		_, err = db.ExecContext(context.Background(), "PRAGMA wal_checkpoint(TRUNCATE)")
		err = errors.Join(err, db.Close())
	}
	if err != nil {
		removeFile(tmp)
		return fmt.Errorf("workspaces: build template file: %w", err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		_ = os.Remove(tmp + suffix)
	}
	if err := os.Rename(tmp, s.template()); err != nil {
		removeFile(tmp)
		return fmt.Errorf("workspaces: build template file: %w", err)
	}
	return nil
}

func removeFile(p string) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(p + suffix)
	}
}

// create makes the file of a new workspace as a copy of the template.
func (s *SQLiteStore) create(path string) error {
	if _, err := os.Stat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	src, err := os.Open(s.template())
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := path + "." + rand.Text() + ".tmp"
	dst, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	err = errors.Join(err, dst.Sync(), dst.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// OpenFiles reports how many workspace files are open now.
func (s *SQLiteStore) OpenFiles() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// PeakOpen reports the most files that were open at once.
func (s *SQLiteStore) PeakOpen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// MaxOpen reports the bound on open files.
func (s *SQLiteStore) MaxOpen() int { return s.max }

func (s *SQLiteStore) path(id string) string { return filepath.Join(s.dir, id+".db") }

// acquire returns the open handle of id, opening its file (and closing the
// least recently used idle file) when needed.
func (s *SQLiteStore) acquire(ctx context.Context, id string) (*handle, error) {
	return s.acquireFile(ctx, id, true)
}

// acquireFile is acquire; with create false a missing file is not made
// (the error wraps fs.ErrNotExist).
func (s *SQLiteStore) acquireFile(ctx context.Context, id string, create bool) (*handle, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	for {
		if s.closed {
			s.mu.Unlock()
			return nil, errors.New("workspaces: store closed")
		}
		if h, ok := s.open[id]; ok {
			h.refs++
			s.lru.MoveToFront(h.elem)
			s.mu.Unlock()
			<-h.ready
			if h.err != nil {
				s.release(h)
				return nil, h.err
			}
			return h, nil
		}
		if len(s.open) < s.max {
			break
		}
		// Evict the least recently used idle file, if any.
		var victim *handle
		for e := s.lru.Back(); e != nil; e = e.Prev() {
			if h := e.Value.(*handle); h.refs == 0 {
				victim = h
				break
			}
		}
		if victim != nil {
			s.lru.Remove(victim.elem)
			delete(s.open, victim.id)
			if victim.db != nil {
				_ = victim.db.Close()
			}
			break
		}
		s.cond.Wait()
	}
	h := &handle{id: id, refs: 1, ready: make(chan struct{})}
	h.elem = s.lru.PushFront(h)
	s.open[id] = h
	s.peak = max(s.peak, len(s.open))
	s.mu.Unlock()

	h.db, h.err = s.openFile(ctx, id, create)
	close(h.ready)
	if h.err != nil {
		s.mu.Lock()
		if s.open[id] == h {
			delete(s.open, id)
			s.lru.Remove(h.elem)
		}
		h.refs--
		s.cond.Broadcast()
		s.mu.Unlock()
		return nil, h.err
	}
	return h, nil
}

func (s *SQLiteStore) release(h *handle) {
	s.mu.Lock()
	h.refs--
	if h.refs == 0 {
		if s.closed && s.open[h.id] == h {
			delete(s.open, h.id)
			s.lru.Remove(h.elem)
			if h.db != nil {
				_ = h.db.Close()
			}
		}
		s.cond.Broadcast()
	}
	s.mu.Unlock()
}

// openFile opens (creating if needed and create is set) the file of id and
// brings its schema up to date; a file whose user_version matches the
// sources is not migrated again.
func (s *SQLiteStore) openFile(ctx context.Context, id string, create bool) (*bun.DB, error) {
	if !create {
		return s.openExisting(ctx, s.path(id))
	}
	if s.Known != nil {
		if _, err := os.Stat(s.path(id)); errors.Is(err, fs.ErrNotExist) {
			ok, err := s.Known(ctx, id)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, errNotFound
			}
		}
	}
	if err := s.create(s.path(id)); err != nil {
		return nil, fmt.Errorf("workspaces: create workspace file: %w", err)
	}
	return s.openPath(ctx, s.path(id))
}

func (s *SQLiteStore) openPath(ctx context.Context, path string) (*bun.DB, error) {
	return s.openDSN(ctx, path+"?"+fileParams().Encode())
}

// openExisting is openPath for a file that must exist already: SQLite
// opens it with mode=rw, which never creates it.
func (s *SQLiteStore) openExisting(ctx context.Context, path string) (*bun.DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("workspaces: open workspace file: %w", err)
	}
	db, err := s.openDSN(ctx, existingDSN(path, fileParams()))
	if err != nil && !fileExists(path) {
		return nil, fmt.Errorf("workspaces: open workspace file: %w", fs.ErrNotExist)
	}
	return db, err
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// fileParams are the connection parameters of a workspace file.
func fileParams() url.Values {
	params := url.Values{}
	params.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", storage.SQLiteBusyTimeout.Milliseconds()))
	params.Add("_pragma", "journal_mode(WAL)")
	params.Add("_pragma", "foreign_keys(1)")
	params.Add("_pragma", "synchronous(NORMAL)")
	params.Set("_time_format", "sqlite")
	params.Set("_txlock", "immediate")
	return params
}

// existingDSN is the URI of the SQLite file at path opened read-write
// without being created.
func existingDSN(path string, params url.Values) string {
	params.Set("mode", "rw")
	return "file:" + (&url.URL{Path: filepath.ToSlash(path)}).EscapedPath() + "?" + params.Encode()
}

func (s *SQLiteStore) openDSN(ctx context.Context, dsn string) (*bun.DB, error) {
	sqldb, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("workspaces: open workspace file: %w", err)
	}
	sqldb.SetMaxOpenConns(1)
	sqldb.SetMaxIdleConns(1)
	sqldb.SetConnMaxIdleTime(0)
	sqldb.SetConnMaxLifetime(0)
	db := bun.NewDB(sqldb, sqlitedialect.New())
	var have int32
	if err := db.NewRaw("PRAGMA user_version").Scan(ctx, &have); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("workspaces: open workspace file: %w", err)
	}
	if have != s.version {
		for _, src := range s.srcs {
			if _, err := migrations.ApplySource(ctx, db, src); err != nil {
				_ = db.Close()
				return nil, fmt.Errorf("workspaces: apply schema %s: %w", src.Name, err)
			}
		}
		if _, err := db.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", s.version)); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("workspaces: record schema version: %w", err)
		}
	}
	return db, nil
}

func (s *SQLiteStore) Update(ctx context.Context, id string, fn func(ctx context.Context, tx bun.Tx) error) error {
	h, err := s.acquire(ctx, id)
	if err != nil {
		return err
	}
	defer s.release(h)
	return runTx(ctx, h.db, fn)
}

// View runs fn in a transaction on the workspace's single connection: on
// SQLite reads of one workspace queue with its writes, which keeps one
// open connection per file.
func (s *SQLiteStore) View(ctx context.Context, id string, fn func(ctx context.Context, tx bun.Tx) error) error {
	return s.Update(ctx, id, fn)
}

// Drop closes the workspace's file (waiting for its operations to end)
// and removes it.
func (s *SQLiteStore) Drop(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	s.mu.Lock()
	for {
		h, ok := s.open[id]
		if !ok {
			break
		}
		if h.refs == 0 {
			s.lru.Remove(h.elem)
			delete(s.open, id)
			if h.db != nil {
				_ = h.db.Close()
			}
			break
		}
		s.cond.Wait()
	}
	s.mu.Unlock()
	var errs []error
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(s.path(id) + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("workspaces: remove workspace file: %w", err)
	}
	return nil
}

// Close closes every open file. Operations still running keep their file
// until they end; later calls fail.
func (s *SQLiteStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var errs []error
	for id, h := range s.open {
		if h.refs == 0 && h.db != nil {
			errs = append(errs, h.db.Close())
			delete(s.open, id)
			s.lru.Remove(h.elem)
		}
	}
	s.cond.Broadcast()
	return errors.Join(errs...)
}
