package tracing

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
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

// Any token is an HTTP method to net/http: one the client made up is
// "_OTHER" in the span's name and attribute, so span names stay a
// bounded set; a 404's path is never in a name either.
func TestHTTPSpanMethodBounded(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := Tracer(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(http.ResponseWriter, *http.Request) {})
	h := HTTP(tracer, func(*http.Request) string { return "web" }, func(context.Context) string { return "" }, Route(mux))
	for _, m := range []string{"HUNTER2", "PROPFIND", "get"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(m, "/items/1", nil))
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("DELETE", "/no-such-secret-path", nil))
	want := []string{"_OTHER web", "_OTHER web", "_OTHER web", "DELETE web"}
	spans := rec.Ended()
	if len(spans) != len(want) {
		t.Fatalf("%d spans", len(spans))
	}
	for i, s := range spans {
		if s.Name() != want[i] {
			t.Errorf("span %d = %q, want %q", i, s.Name(), want[i])
		}
		for _, kv := range s.Attributes() {
			if v := kv.Value.Emit(); kv.Key == "http.request.method" && v != strings.Fields(want[i])[0] {
				t.Errorf("span %d: http.request.method = %q", i, v)
			}
		}
	}
}

// FuzzFromMeta: any _meta values parse without panicking, an accepted
// context is valid W3C (version 00 traceparent of 55 characters, or a
// later version's prefix), and what is kept of tracestate is bounded
// (32 members, as W3C allows).
func FuzzFromMeta(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=x,b=y")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=1")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", strings.Repeat("k=v,", 40))
	f.Add(strings.Repeat("0", 10000), strings.Repeat("a", 10000)+"=1")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		sc, ok := FromMeta(map[string]any{"traceparent": tp, "tracestate": ts})
		if !ok {
			return
		}
		if !sc.IsValid() || !sc.IsRemote() || len(tp) < 55 {
			t.Fatalf("accepted %q: %v", tp, sc)
		}
		if strings.HasPrefix(tp, "00") && len(tp) != 55 {
			t.Fatalf("version 00 traceparent of %d characters accepted", len(tp))
		}
		if sc.TraceState().Len() > 32 || len(sc.TraceState().String()) > MaxTraceState {
			t.Fatalf("tracestate of %d members kept", sc.TraceState().Len())
		}
	})
}

// A tracestate longer than W3C's 512 characters is dropped (the traceparent
// still continues the trace): it would travel with every span of the
// request and swell each export batch.
func TestTraceStateBounded(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var long []string
	for i := range 32 {
		long = append(long, fmt.Sprintf("v%02d=%s", i, strings.Repeat("x", 200)))
	}
	huge := strings.Join(long, ",")
	for _, c := range []struct {
		state string
		keep  bool
	}{{"a=1,b=2", true}, {huge, false}} {
		sc, ok := FromMeta(map[string]any{"traceparent": tp, "tracestate": c.state})
		if !ok || (sc.TraceState().Len() > 0) != c.keep {
			t.Errorf("FromMeta with a tracestate of %d characters: %v, kept %d members", len(c.state), ok, sc.TraceState().Len())
		}
		rec := tracetest.NewSpanRecorder()
		tracer := Tracer(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
		h := HTTP(tracer, func(*http.Request) string { return "web" }, func(context.Context) string { return "" }, http.NotFoundHandler())
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("traceparent", tp)
		req.Header.Set("tracestate", c.state)
		h.ServeHTTP(httptest.NewRecorder(), req)
		s := rec.Ended()[0]
		if s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || (s.SpanContext().TraceState().Len() > 0) != c.keep {
			t.Errorf("header tracestate of %d characters: parent %v, span keeps %d members", len(c.state), s.Parent().TraceID(), s.SpanContext().TraceState().Len())
		}
	}
}
