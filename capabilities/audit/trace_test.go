package audit_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// An event recorded inside a span carries its trace id, one recorded
// outside none; Filter.TraceID finds a trace's events.
func TestEventsCarryTheTraceID(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		log := audit.New(s, key, quiet())
		tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
		sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
		traced := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
		for _, ctx := range []context.Context{traced, context.Background()} {
			if err := log.Record(ctx, audit.Event{Category: audit.CategoryAuth, Action: "login", Result: audit.ResultSuccess}); err != nil {
				t.Fatal(err)
			}
		}
		all, err := log.Query(context.Background(), audit.Filter{}, storage.PageRequest{})
		if err != nil || len(all.Items) != 2 {
			t.Fatalf("Query = %v, %v", all.Items, err)
		}
		if all.Items[0].TraceID != "" || all.Items[1].TraceID != tid.String() {
			t.Errorf("trace ids = %q, %q", all.Items[1].TraceID, all.Items[0].TraceID)
		}
		one, err := log.Query(context.Background(), audit.Filter{TraceID: tid.String()}, storage.PageRequest{})
		if err != nil || len(one.Items) != 1 || one.Items[0].TraceID != tid.String() {
			t.Errorf("Query by trace = %v, %v", one.Items, err)
		}
	})
}
