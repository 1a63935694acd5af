package otelsql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	_ "modernc.org/sqlite"

	"github.com/enclave-mcp/enclave/internal/otelsql"
	"github.com/enclave-mcp/enclave/internal/tracing"
)

// Statements inside a recorded span get leaf spans named "OP table" with
// no values; a transaction's statements are siblings of its BEGIN; no span
// is started outside a trace.
func TestHook(t *testing.T) {
	sqldb, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	sqldb.SetMaxOpenConns(1)
	rec := tracetest.NewSpanRecorder()
	tp := trace.NewTracerProvider(trace.WithSpanProcessor(rec))
	db := bun.NewDB(sqldb, sqlitedialect.New()).WithQueryHook(otelsql.New(tracing.Tracer(tp), "sqlite"))
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE things (name TEXT)"); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans outside a trace", n)
	}
	ctx, root := tp.Tracer("t").Start(ctx, "root")
	const value = "bound-value-SECRET"
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&map[string]any{"name": value}).Table("things").Exec(ctx); err != nil {
			return err
		}
		var n int
		return tx.NewSelect().Table("things").ColumnExpr("count(*)").Where("name = ?", value).Scan(ctx, &n)
	})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = db.NewSelect().Table("missing").Exec(ctx) // fails
	root.End()
	got := map[string]bool{}
	for _, s := range rec.Ended() {
		if s.Name() == "root" {
			continue
		}
		got[s.Name()] = true
		if s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("span %q parent = %v, want the root", s.Name(), s.Parent().SpanID())
		}
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), value) || strings.Contains(kv.Value.Emit(), "no such table") {
				t.Errorf("span %q attribute %s = %q", s.Name(), kv.Key, kv.Value.Emit())
			}
		}
		if s.Name() == "SELECT missing" && s.Status().Code.String() != "Error" {
			t.Errorf("failed statement status = %v", s.Status())
		}
	}
	for _, want := range []string{"BEGIN", "INSERT things", "SELECT things", "COMMIT", "SELECT missing"} {
		if !got[want] {
			t.Errorf("no span %q among %v", want, got)
		}
	}
}
