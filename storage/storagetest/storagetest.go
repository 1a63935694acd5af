// Package storagetest opens real, migrated stores for tests: an SQLite file
// in a temporary directory always, and PostgreSQL when ENCLAVE_TEST_POSTGRES
// holds a connection URL. Each PostgreSQL store lives in a fresh schema that
// is dropped when the test ends, so tests run in parallel without seeing each
// other's rows.
//
// When ENCLAVE_TEST_POSTGRES is set, a PostgreSQL failure fails the test: the
// suites that CI runs against PostgreSQL cannot silently skip.
package storagetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"slices"
	"testing"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// PostgresEnv names the environment variable holding the PostgreSQL URL.
const PostgresEnv = "ENCLAVE_TEST_POSTGRES"

// Dialects returns the dialects available to this test run: SQLite, plus
// PostgreSQL when PostgresEnv is set.
func Dialects() []storage.Dialect {
	if os.Getenv(PostgresEnv) != "" {
		return []storage.Dialect{storage.SQLite, storage.Postgres}
	}
	return []storage.Dialect{storage.SQLite}
}

// Option changes what EachDialect hands out.
type Option int

// Unmigrated makes EachDialect hand out stores without the schema.
const Unmigrated Option = 1

// EachDialect runs fn as a subtest once per available dialect, with a fresh
// migrated store (or an empty one, with Unmigrated).
func EachDialect(t *testing.T, fn func(t *testing.T, s *storage.Store), opts ...Option) {
	t.Helper()
	for _, d := range Dialects() {
		t.Run(string(d), func(t *testing.T) {
			if slices.Contains(opts, Unmigrated) {
				fn(t, OpenUnmigrated(t, d))
				return
			}
			fn(t, Open(t, d))
		})
	}
}

// Open returns a fresh, migrated store of dialect d, closed when t ends.
func Open(t testing.TB, d storage.Dialect) *storage.Store {
	t.Helper()
	s := OpenUnmigrated(t, d)
	if _, err := migrations.Apply(context.Background(), s.DB); err != nil {
		t.Fatalf("storagetest: migrate %s: %v", d, err)
	}
	return s
}

// OpenUnmigrated is Open without the migrations.
func OpenUnmigrated(t testing.TB, d storage.Dialect) *storage.Store {
	t.Helper()
	cfg := Config(t, d)
	s, err := storage.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("storagetest: open %s: %v", d, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("storagetest: close: %v", err)
		}
	})
	return s
}

// Config returns a storage configuration for dialect d in a fresh temporary
// data directory, with a fresh PostgreSQL schema when d is Postgres.
func Config(t testing.TB, d storage.Dialect) storage.Config {
	t.Helper()
	cfg := storage.Config{DataDir: t.TempDir()}
	if d == storage.Postgres {
		cfg.DatabaseURL = PostgresSchemaURL(t)
	}
	return cfg
}

// PostgresSchemaURL creates a fresh schema in the PostgreSQL database named
// by PostgresEnv and returns a URL whose search_path is that schema. It skips
// the test when PostgresEnv is unset and fails it when PostgreSQL is set but
// unusable. The schema is dropped when t ends.
func PostgresSchemaURL(t testing.TB) string {
	t.Helper()
	base := os.Getenv(PostgresEnv)
	if base == "" {
		t.Skipf("storagetest: %s not set", PostgresEnv)
	}
	adminDir := t.TempDir() // removed after the cleanup below, which uses it
	admin, err := storage.Open(context.Background(), storage.Config{DataDir: adminDir, DatabaseURL: base})
	if err != nil {
		t.Fatalf("storagetest: %s: %v", PostgresEnv, err)
	}
	defer admin.Close()
	schema := randomName("t")
	if _, err := admin.DB.ExecContext(context.Background(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("storagetest: create schema: %v", err)
	}
	t.Cleanup(func() {
		a, err := storage.Open(context.Background(), storage.Config{DataDir: adminDir, DatabaseURL: base})
		if err != nil {
			t.Errorf("storagetest: drop schema: %v", err)
			return
		}
		defer a.Close()
		if _, err := a.DB.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("storagetest: drop schema: %v", err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("storagetest: %s: %v", PostgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func randomName(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}
