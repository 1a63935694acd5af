package audit_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/enclave-mcp/enclave/capabilities"
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

// adminAuditLogQuery's traceId is an admin's filter (a user cannot run
// it) and must be a W3C trace id: anything else is refused with a clear
// error, and one in capitals finds the stored (lowercase) id.
func TestQueryByTraceIDValidated(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		log := audit.New(s, key, quiet())
		reg := capabilities.NewRegistry(capabilities.Options{Auditor: log, AuditKey: key, Logger: quiet()})
		if err := reg.Register(log.Capability()); err != nil {
			t.Fatal(err)
		}
		tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
		sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
		traced := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
		if err := log.Record(traced, audit.Event{Category: audit.CategoryAuth, Action: "login", Result: audit.ResultSuccess}); err != nil {
			t.Fatal(err)
		}
		user := capabilities.Caller{UserID: "u-1", Roles: []string{"user"}, State: capabilities.AccountActive, AllScopes: true, Interactive: true}
		admin := user
		admin.UserID, admin.Roles = "admin-1", []string{"user", "admin"}
		ctx := context.Background()
		query := func(c capabilities.Caller, id string) (capabilities.Result, error) {
			b, _ := json.Marshal(map[string]string{"traceId": id})
			return reg.Invoke(ctx, c, "adminAuditLogQuery", b)
		}
		if _, err := query(user, tid.String()); err == nil {
			t.Error("a user queried the audit log by trace id")
		}
		for _, bad := range []string{"' OR 1=1 --", "4bf92f3577b34da6a3ce929d0e0e473", "4bf92f3577b34da6a3ce929d0e0e4736 ", "00000000000000000000000000000000", "zzf92f3577b34da6a3ce929d0e0e4736"} {
			_, err := query(admin, bad)
			if capabilities.CodeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), "32 hexadecimal") {
				t.Errorf("traceId %q: %v", bad, err)
			}
		}
		for _, good := range []string{tid.String(), strings.ToUpper(tid.String())} {
			res, err := query(admin, good)
			if err != nil {
				t.Fatalf("traceId %q: %v", good, err)
			}
			if evs := res.Structured.(audit.QueryOutput).Events; len(evs) != 1 || evs[0].TraceID != tid.String() {
				t.Errorf("traceId %q: %v", good, evs)
			}
		}
	})
}
