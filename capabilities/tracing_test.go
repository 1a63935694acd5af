package capabilities_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

func tracedRegistry(t testing.TB, tp *sdktrace.TracerProvider) *capabilities.Registry {
	opts := capabilities.Options{Auditor: &benchAuditor{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if tp != nil {
		opts.TracerProvider = tp
	}
	r := capabilities.NewRegistry(opts)
	err := r.Register(capabilities.Define(capabilities.Spec[benchEchoIn, capabilities.Result]{
		Name: "benchEcho", Domain: "bench", Description: "Echoes its text.",
		Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
		Requires:    capabilities.Requirement{Role: capabilities.RoleUser},
		Handler: func(_ context.Context, _ *capabilities.Call, in benchEchoIn) (capabilities.Result, error) {
			return capabilities.TextResult(in.Text), nil
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// With a TracerProvider every Invoke has a span "capability NAME" with
// the name and the outcome (the denial's reason when refused, a bounded
// name for an unknown capability), never the arguments or the result.
func TestInvokeSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	r := tracedRegistry(t, tp)
	ctx := context.Background()
	user := capabilities.Caller{UserID: "u1", Roles: []string{capabilities.RoleUser}, State: capabilities.AccountActive, AllScopes: true}
	const secret = "sk-span-SECRET-77"
	if _, err := r.Invoke(ctx, user, "benchEcho", json.RawMessage(`{"text":"`+secret+`"}`)); err != nil {
		t.Fatal(err)
	}
	noRole := user
	noRole.Roles = nil
	if _, err := r.Invoke(ctx, noRole, "benchEcho", json.RawMessage(`{"text":"`+secret+`"}`)); err == nil {
		t.Fatal("a caller without the role was served")
	}
	if _, err := r.Invoke(ctx, user, "guessed"+secret, nil); err == nil {
		t.Fatal("an unknown capability ran")
	}
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	type want struct{ name, outcome, reason string }
	for i, w := range []want{
		{"capability benchEcho", "ok", ""},
		{"capability benchEcho", "not_found", "role"},
		{"capability (unknown)", "not_found", "unknown"},
	} {
		s := spans[i]
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if s.Name() != w.name || attrs["enclave.capability.outcome"] != w.outcome || attrs["enclave.denial.reason"] != w.reason {
			t.Errorf("span %d = %q %v, want %+v", i, s.Name(), attrs, w)
		}
		for k, v := range attrs {
			if strings.Contains(v, secret) || strings.Contains(s.Name(), secret) {
				t.Errorf("span %d attribute %s holds the argument: %q", i, k, v)
			}
		}
		if want := map[bool]string{true: "benchEcho"}[i < 2]; attrs["enclave.capability.name"] != want {
			t.Errorf("span %d name attribute = %q", i, attrs["enclave.capability.name"])
		}
	}
}

// BenchmarkInvokeTraced is BenchmarkInvokeChokePoint's allowed call with
// tracing off (no provider: must cost what it did before tracing
// existed) and on (an SDK provider recording, with no exporter).
func BenchmarkInvokeTraced(b *testing.B) {
	ctx := context.Background()
	args := json.RawMessage(`{"text":"hello"}`)
	user := capabilities.Caller{UserID: "u1", Roles: []string{capabilities.RoleUser}, State: capabilities.AccountActive, AllScopes: true}
	for _, on := range []bool{false, true} {
		r, name := tracedRegistry(b, nil), "off"
		if on {
			r, name = tracedRegistry(b, sdktrace.NewTracerProvider()), "on"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Invoke(ctx, user, "benchEcho", args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A caller's own capability (a saved package's export) is named by the
// caller: its span is "capability (own)" with the provider's prefix, never
// the name (the caller's data, and unbounded in number across callers).
func TestInvokeSpansOwnCapability(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reg := capabilities.NewRegistry(capabilities.Options{Auditor: &benchAuditor{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), TracerProvider: tp})
	p := &ownCaps{reg: reg, caps: map[string][]capabilities.Capability{}, gen: map[string]uint64{}}
	if err := reg.AddProvider("own_", p); err != nil {
		t.Fatal(err)
	}
	const private = "own_lawsuitAgainstAcme"
	p.add(t, "alice", private, capabilities.Requirement{})
	alice := capabilitiestest.User("alice")
	if _, err := reg.Invoke(context.Background(), alice, private, json.RawMessage(`{"text":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Invoke(context.Background(), capabilitiestest.User("bob"), private, json.RawMessage(`{"text":"x"}`)); err == nil {
		t.Fatal("bob ran alice's capability")
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	for i, want := range []string{"capability (own)", "capability (unknown)"} {
		s := spans[i]
		if s.Name() != want {
			t.Errorf("span %d = %q, want %q", i, s.Name(), want)
		}
		for _, kv := range s.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, "lawsuit") {
				t.Errorf("span %d: attribute %s = %q", i, kv.Key, v)
			}
			if kv.Key == "enclave.capability.provider" && (i != 0 || kv.Value.Emit() != "own_") {
				t.Errorf("span %d: provider %q", i, kv.Value.Emit())
			}
		}
	}
}
