package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestFromMeta(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc, ok := FromMeta(map[string]any{"traceparent": tp, "tracestate": "vendor=x"})
	if !ok || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote() || sc.TraceState().Get("vendor") != "x" {
		t.Fatalf("FromMeta = %v %v", sc, ok)
	}
	for _, bad := range []map[string]any{nil, {}, {"traceparent": 7}, {"traceparent": "00-zz-00f067aa0ba902b7-01"},
		{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}} {
		if _, ok := FromMeta(bad); ok {
			t.Errorf("FromMeta(%v) accepted", bad)
		}
	}
}

// The server span is named after the method and the mux pattern (not the
// path), continues a traceparent header, and records no path, query or
// header.
func TestHTTPSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := Tracer(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		if TraceID(r.Context()) != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("handler trace id = %q", TraceID(r.Context()))
		}
		w.WriteHeader(http.StatusTeapot)
	})
	h := HTTP(tracer, func(*http.Request) string { return "web" }, func(context.Context) string { return "rid" }, Route(mux))
	req := httptest.NewRequest("GET", "/items/secret-id?token=hunter2", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	req.Header.Set("Authorization", "Bearer hunter2")
	h.ServeHTTP(httptest.NewRecorder(), req)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/elsewhere", nil))
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	s := spans[0]
	if s.Name() != "GET /items/{id}" || s.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("span %q parent %v", s.Name(), s.Parent())
	}
	for _, kv := range s.Attributes() {
		if v := kv.Value.Emit(); v == "hunter2" || v == "/items/secret-id" || len(v) > 40 {
			t.Errorf("attribute %s = %q", kv.Key, v)
		}
	}
	if spans[1].Name() != "GET web" {
		t.Errorf("unmatched route span = %q", spans[1].Name())
	}
	if HTTP(nil, nil, nil, mux) != http.Handler(mux) {
		t.Error("HTTP with no tracer wraps the handler")
	}
}
