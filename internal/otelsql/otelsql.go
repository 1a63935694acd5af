// Package otelsql is a bun query hook giving SQL statements OpenTelemetry
// spans (see Hook). It is apart from package tracing so that packages that
// know no SQL (capabilities) do not link bun through it.
package otelsql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/enclave-mcp/enclave/internal/tracing"
	"github.com/enclave-mcp/enclave/storage"
)

// Hook is a bun query hook that gives each statement run inside a
// recorded span a client span of its own, named "OPERATION table"
// ("SELECT users", "INSERT audit_events"). It records the database
// system, the operation and the table, never the statement's text, its
// bound values or a driver's error message (which can quote a value):
// a failure is marked with its Go type only. A statement with no
// recorded span around it (a background poll, say) gets none: the hook
// starts no traces of its own.
type Hook struct {
	tracer trace.Tracer
	system string
}

// New returns the hook for a database of the given system
// ("sqlite" or "postgresql"), or nil when tracer is nil.
func New(tracer trace.Tracer, system string) *Hook {
	if tracer == nil {
		return nil
	}
	return &Hook{tracer: tracer, system: system}
}

type sqlSpanKey struct{}

// BeforeQuery implements bun.QueryHook.
func (h *Hook) BeforeQuery(ctx context.Context, e *bun.QueryEvent) context.Context {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	op := strings.ToUpper(e.Operation())
	if !plainWord(op) {
		op = "SQL"
	}
	name, table := op, ""
	if q, ok := e.IQuery.(interface{ GetTableName() string }); ok {
		if table = strings.ReplaceAll(q.GetTableName(), `"`, ""); plainIdent(table) {
			name += " " + table
		} else {
			table = ""
		}
	}
	attrs := []attribute.KeyValue{
		attribute.String("db.system.name", h.system),
		attribute.String("db.operation.name", op),
	}
	if table != "" {
		attrs = append(attrs, attribute.String("db.collection.name", table))
	}
	// A statement's span is a leaf: the context bun goes on with keeps the
	// caller's span current, not this one. bun hands BEGIN's context to
	// the whole transaction (RunInTx), whose statements are then siblings
	// of BEGIN under the caller's span, not children of an ended span.
	_, span := h.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, sqlSpanKey{}, &sqlSpan{span: span, event: e})
}

// sqlSpan is a statement's span, with the event it was started for: a
// context carrying one reaches later statements (bun's transactions keep
// BEGIN's), which must not end it again.
type sqlSpan struct {
	span  trace.Span
	event *bun.QueryEvent
}

// AfterQuery implements bun.QueryHook.
func (h *Hook) AfterQuery(ctx context.Context, e *bun.QueryEvent) {
	s, ok := ctx.Value(sqlSpanKey{}).(*sqlSpan)
	if !ok || s.event != e {
		return
	}
	span := s.span
	if e.Err != nil && e.Err != sql.ErrNoRows {
		span.SetAttributes(attribute.String("error.type", fmt.Sprintf("%T", e.Err)))
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

var _ bun.QueryHook = (*Hook)(nil)

// plainWord: 1–16 ASCII letters (an SQL keyword).
func plainWord(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// plainIdent: a table name of 1–64 characters of [A-Za-z0-9_.].
func plainIdent(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// Instrument gives the store's SQL handles the query hook that records a
// span per statement run inside a traced request. Call it right after
// storage.Open, before anything else holds the handles; without a
// provider it changes nothing (bun then builds no query events at all).
func Instrument(store *storage.Store, tp trace.TracerProvider) {
	system := "sqlite"
	if store.Dialect() == storage.Postgres {
		system = "postgresql" // OpenTelemetry's db.system.name
	}
	hook := New(tracing.Tracer(tp), system)
	if hook == nil {
		return
	}
	same := store.Reader == store.DB
	store.DB = store.DB.WithQueryHook(hook)
	if same {
		store.Reader = store.DB
	} else if store.Reader != nil {
		store.Reader = store.Reader.WithQueryHook(hook)
	}
}
