package enclave

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/enclave-mcp/enclave/internal/otelsql"
	"github.com/enclave-mcp/enclave/internal/tracing"
	"github.com/enclave-mcp/enclave/storage"
)

// traceSQL gives the store's SQL handles the query hook that records a
// span per statement run inside a traced request (Config.TracerProvider).
// It runs right after storage.Open, before anything else holds the
// handles; without a provider it changes nothing (bun then builds no
// query events at all).
func traceSQL(store *storage.Store, tp trace.TracerProvider) {
	hook := otelsql.New(tracing.Tracer(tp), dbSystem(store.Dialect()))
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

// dbSystem is the OpenTelemetry db.system.name of a dialect.
func dbSystem(d storage.Dialect) string {
	if d == storage.Postgres {
		return "postgresql"
	}
	return "sqlite"
}
