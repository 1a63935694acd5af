package main

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"regexp"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/oauth"
)

// BenchmarkVerifyQuerySQLite splits the cost of the bearer check's one
// query on SQLite: as enclave runs it (bun interpolates the arguments, so
// every token's statement is new text that SQLite parses and plans again),
// the same text through database/sql without bun, and the same statement
// prepared once with a placeholder.
//
//	go test -run '^$' -bench VerifyQuery ./bench
func BenchmarkVerifyQuerySQLite(b *testing.B) {
	ctx := context.Background()
	login := newBenchLogin()
	srv, err := enclave.New(ctx, enclave.Config{
		DataDir:  b.TempDir(),
		OAuth:    oauth.Options{LoginConsent: login},
		Accounts: accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1}},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	tokens, err := issueTokens(ctx, srv.OAuth(), login, srv.Accounts(), 1)
	if err != nil {
		b.Fatal(err)
	}
	token := tokens[0]
	if _, err := srv.OAuth().VerifyAccessToken(ctx, token); err != nil {
		b.Fatal(err)
	}
	rec := recordQueries(srv.Store())
	seen, err := rec.during(func() error { _, err := srv.OAuth().VerifyAccessToken(ctx, token); return err })
	if err != nil || len(seen) != 1 {
		b.Fatalf("want the one query of the bearer check, got %d: %v", len(seen), err)
	}
	text := seen[0]
	lit := regexp.MustCompile(`t\.signature = '([^']*)'`)
	m := lit.FindStringSubmatch(text)
	if m == nil {
		b.Fatalf("no signature literal in %s", text)
	}
	sig, withPlaceholder := m[1], lit.ReplaceAllString(text, "t.signature = ?")
	db := srv.Store().Reader.DB

	scan := func(b *testing.B, rows *sql.Rows, err error) {
		if err != nil {
			b.Fatal(err)
		}
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		for i := range vals {
			vals[i] = new(sql.RawBytes)
		}
		if !rows.Next() {
			b.Fatal("no row")
		}
		if err := rows.Scan(vals...); err != nil {
			b.Fatal(err)
		}
		rows.Close()
	}
	b.Run("enclave", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := srv.OAuth().VerifyAccessToken(ctx, token); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("same-text-database-sql", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rows, err := db.QueryContext(ctx, text)
			scan(b, rows, err)
		}
	})
	b.Run("prepared-once", func(b *testing.B) {
		stmt, err := db.PrepareContext(ctx, withPlaceholder)
		if err != nil {
			b.Fatal(err)
		}
		defer stmt.Close()
		b.ReportAllocs()
		for b.Loop() {
			rows, err := stmt.QueryContext(ctx, sig)
			scan(b, rows, err)
		}
	})
}
