package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Both dialect folders hold the same migrations, version for version.
func TestDialectsHaveTheSameMigrations(t *testing.T) {
	lite, err := migrations.Load("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	pg, err := migrations.Load("postgres")
	if err != nil {
		t.Fatal(err)
	}
	name := func(m migrations.Migration) string { return fmt.Sprintf("%04d_%s", m.Version, m.Name) }
	var a, b []string
	for _, m := range lite {
		a = append(a, name(m))
	}
	for _, m := range pg {
		b = append(b, name(m))
	}
	if !slices.Equal(a, b) {
		t.Fatalf("sqlite migrations %v differ from postgres %v", a, b)
	}
	for i, m := range lite {
		if i > 0 && m.Version <= lite[i-1].Version {
			t.Fatalf("migration %s: versions must increase", name(m))
		}
	}
}

type column struct {
	Table, Name string
	NotNull     bool
}

// schema lists every table and column of the current schema.
func schema(t *testing.T, s *storage.Store) []column {
	t.Helper()
	ctx := context.Background()
	var cols []column
	switch s.Dialect() {
	case storage.SQLite:
		var tables []string
		// Ordinary tables only: an FTS5 virtual table and its shadow
		// tables are SQLite's full-text index, the counterpart of a GIN
		// index on PostgreSQL, not tables of either schema.
		if err := s.Reader.NewRaw("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").Scan(ctx, &tables); err != nil {
			t.Fatal(err)
		}
		for _, tbl := range tables {
			var info []struct {
				Name    string `bun:"name"`
				NotNull bool   `bun:"column:notnull"`
				PK      int    `bun:"pk"`
			}
			if err := s.Reader.NewRaw("SELECT name, \"notnull\", pk FROM pragma_table_info(?)", tbl).Scan(ctx, &info); err != nil {
				t.Fatal(err)
			}
			for _, c := range info {
				// SQLite lets primary-key columns hold NULL unless declared
				// NOT NULL; PostgreSQL makes them NOT NULL. Compare intent.
				cols = append(cols, column{tbl, c.Name, c.NotNull || c.PK > 0})
			}
		}
	case storage.Postgres:
		var info []struct {
			Table    string `bun:"table_name"`
			Name     string `bun:"column_name"`
			Nullable string `bun:"is_nullable"`
		}
		if err := s.Reader.NewRaw(`SELECT table_name, column_name, is_nullable FROM information_schema.columns
			WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`).Scan(ctx, &info); err != nil {
			t.Fatal(err)
		}
		for _, c := range info {
			cols = append(cols, column{c.Table, c.Name, c.Nullable == "NO"})
		}
	}
	slices.SortFunc(cols, func(a, b column) int {
		return strings.Compare(a.Table+"."+a.Name, b.Table+"."+b.Name)
	})
	return cols
}

// Applying both dialects yields the same tables and columns.
func TestNoDriftBetweenDialects(t *testing.T) {
	lite := schema(t, storagetest.Open(t, storage.SQLite))
	if len(lite) == 0 {
		t.Fatal("sqlite schema is empty")
	}
	want := map[string][]string{
		"users": {"id", "stable_user_id", "email", "username", "password_hash", "email_verified_at",
			"password_changed_at", "suspended_at", "deleting_at", "created_at", "updated_at"},
		"roles": nil, "permissions": nil, "role_permissions": nil, "user_roles": nil, "schema_migrations": nil,
	}
	for tbl, cols := range want {
		var have []string
		for _, c := range lite {
			if c.Table == tbl {
				have = append(have, c.Name)
			}
		}
		if len(have) == 0 {
			t.Errorf("table %s missing", tbl)
		}
		for _, c := range cols {
			if !slices.Contains(have, c) {
				t.Errorf("column %s.%s missing", tbl, c)
			}
		}
	}
	pg := schema(t, storagetest.Open(t, storage.Postgres)) // skips without PostgreSQL
	if !slices.Equal(lite, pg) {
		t.Errorf("schemas differ\nsqlite:   %v\npostgres: %v", lite, pg)
	}
}

// Concurrent runners apply each migration exactly once and all succeed.
func TestConcurrentRunners(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			cfg := storagetest.Config(t, d)
			const runners = 4
			var wg sync.WaitGroup
			applied := make([]int, runners)
			for i := range runners {
				s, err := storage.Open(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				wg.Go(func() {
					res, err := migrations.Apply(ctx, s.DB)
					if err != nil {
						t.Errorf("runner %d: %v", i, err)
					}
					applied[i] = len(res.Applied)
				})
			}
			wg.Wait()
			all, _ := migrations.Load(string(d))
			total := 0
			for _, n := range applied {
				total += n
			}
			if total != len(all) {
				t.Fatalf("runners applied %v migrations in all, want each of %d exactly once", applied, len(all))
			}
		})
	}
}

// A migration that fails leaves no record and no partial schema; fixing the
// cause and re-running completes it.
func TestFailedMigrationIsNotRecorded(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		// Sabotage 0001: a table it creates already exists.
		if _, err := s.DB.ExecContext(ctx, "CREATE TABLE roles (x INTEGER)"); err != nil {
			t.Fatal(err)
		}
		if _, err := migrations.Apply(ctx, s.DB); err == nil {
			t.Fatal("Apply succeeded over a conflicting table")
		}
		n, err := s.DB.NewSelect().Table("schema_migrations").Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("%d migrations recorded after a failure, want 0", n)
		}
		var users int
		err = s.DB.NewRaw("SELECT count(*) FROM users").Scan(ctx, &users)
		if err == nil {
			t.Fatal("the failed migration left table users behind")
		}
		if _, err := s.DB.ExecContext(ctx, "DROP TABLE roles"); err != nil {
			t.Fatal(err)
		}
		res, err := migrations.Apply(ctx, s.DB)
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		if len(res.Applied) == 0 {
			t.Fatal("retry applied nothing")
		}
	}, storagetest.Unmigrated)
}

// A recorded migration whose SQL changed afterwards stops Apply.
func TestChangedMigrationIsRefused(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		if _, err := s.DB.NewUpdate().Table("schema_migrations").Set("checksum = ?", "tampered").Where("source = ? AND version = 1", migrations.EnclaveSource).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := migrations.Apply(ctx, s.DB); !errors.Is(err, migrations.ErrChecksumMismatch) {
			t.Fatalf("Apply = %v, want ErrChecksumMismatch", err)
		}
	})
}

// An embedder's migrations are recorded under their own source name, with
// versions of their own.
func TestApplySource(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		src := migrations.Source{Name: "notes", FS: fstest.MapFS{
			"sqlite/0001_notes.up.sql":   {Data: []byte("CREATE TABLE notes (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL REFERENCES users (id))")},
			"postgres/0001_notes.up.sql": {Data: []byte("CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, user_id BIGINT NOT NULL REFERENCES users (id))")},
		}}
		res, err := migrations.ApplySource(ctx, s.DB, src)
		if err != nil || len(res.Applied) != 1 || res.Current != 1 {
			t.Fatalf("first apply: %+v, %v", res, err)
		}
		if res, err := migrations.ApplySource(ctx, s.DB, src); err != nil || len(res.Applied) != 0 {
			t.Fatalf("second apply: %+v, %v", res, err)
		}
		if res, err := migrations.Apply(ctx, s.DB); err != nil || len(res.Applied) != 0 || len(res.Unknown) != 0 {
			t.Fatalf("enclave's migrations after an embedder's: %+v, %v", res, err)
		}
		if _, err := migrations.ApplySource(ctx, s.DB, migrations.Source{Name: "Bad Name", FS: src.FS}); err == nil {
			t.Fatal("a bad source name was accepted")
		}
	})
}

// StatusOf reads pending, applied, changed and unknown migrations without
// changing anything.
func TestStatus(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		dir := "sqlite"
		if s.Dialect() == storage.Postgres {
			dir = "postgres"
		}
		all, err := migrations.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		st, err := migrations.EnclaveStatus(ctx, s.DB)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Pending) != len(all) || len(st.Applied) != 0 || st.Current() {
			t.Fatalf("fresh database: %d pending, %d applied, current %v; want all %d pending", len(st.Pending), len(st.Applied), st.Current(), len(all))
		}
		if _, err := migrations.Apply(ctx, s.DB); err != nil {
			t.Fatal(err)
		}
		st, err = migrations.EnclaveStatus(ctx, s.DB)
		if err != nil || !st.Current() || len(st.Applied) != len(all) || st.Applied[0].AppliedAt.IsZero() {
			t.Fatalf("after Apply: %+v, %v", st, err)
		}
		if _, err := s.DB.NewUpdate().Table("schema_migrations").Set("checksum = ?", "tampered").Where("source = ? AND version = 1", migrations.EnclaveSource).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB.NewDelete().Table("schema_migrations").Where("source = ? AND version = ?", migrations.EnclaveSource, all[len(all)-1].Version).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB.ExecContext(ctx, "INSERT INTO schema_migrations (source, version, name, checksum, applied_at) VALUES (?, ?, ?, ?, ?)",
			migrations.EnclaveSource, 9999, "future", "x", time.Now().UTC()); err != nil {
			t.Fatal(err)
		}
		st, err = migrations.EnclaveStatus(ctx, s.DB)
		if err != nil {
			t.Fatal(err)
		}
		if st.Current() || len(st.Pending) != 1 || st.Pending[0].Version != all[len(all)-1].Version ||
			!slices.Equal(st.Changed, []int{1}) || !slices.Equal(st.Unknown, []int{9999}) {
			t.Fatalf("after tampering: pending %v changed %v unknown %v", st.Pending, st.Changed, st.Unknown)
		}
	}, storagetest.Unmigrated)
}
