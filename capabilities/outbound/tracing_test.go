package outbound_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Inside a recorded span, a gateway request has a client span with the
// method, host and status: no path, query, header, body or secret, and no
// traceparent reaches the remote host.
func TestGatewaySpan(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		f := setup(t, st)
		// Even with a global propagator set (an embedder's, say) no trace
		// context or baggage leaves: the gateway injects nothing.
		prev := otel.GetTextMapPropagator()
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
		t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
		var gotTraceparent string
		srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
			gotTraceparent = r.Header.Get("traceparent") + r.Header.Get("tracestate") + r.Header.Get("baggage")
			w.WriteHeader(http.StatusCreated)
		})
		const key = "sk-span-secret-99"
		f.secret(t, f.alice, "api", key, []string{"127.0.0.1:" + srv.port()}, nil)
		g := f.gateway(srv, outbound.Options{AllowPrivate: true})
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		m, _ := baggage.NewMember("user", "alice")
		bag, _ := baggage.New(m)
		ctx, root := tp.Tracer("t").Start(baggage.ContextWithBaggage(context.Background(), bag), "root")
		if _, err := g.Do(ctx, f.aliceC, outbound.Request{Method: "POST", URL: srv.URL + "/private/path?q=hidden",
			Headers: map[string]string{"X-Key": "{{secret:api}}"}, Body: "b={{secret:api}}"}); err != nil {
			t.Fatal(err)
		}
		root.End()
		if gotTraceparent != "" {
			t.Errorf("the remote host got trace context or baggage %q", gotTraceparent)
		}
		var span sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == "outbound POST" {
				span = s
			}
		}
		if span == nil || span.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Fatalf("no outbound span under the root: %v", rec.Ended())
		}
		attrs := map[string]string{}
		for _, kv := range span.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
			for _, leak := range []string{key, "private", "hidden"} {
				if strings.Contains(kv.Value.Emit(), leak) {
					t.Errorf("attribute %s = %q", kv.Key, kv.Value.Emit())
				}
			}
		}
		if attrs["server.address"] != "127.0.0.1" || attrs["http.response.status_code"] != "201" || attrs["http.request.method"] != "POST" {
			t.Errorf("attributes = %v", attrs)
		}
	})
}
