package otlpexport

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestEndpoint(t *testing.T) {
	for _, ok := range []string{"http://localhost:4318", "https://collector.example.com", "http://c:4318/custom/traces/"} {
		if err := CheckEndpoint(ok); err != nil {
			t.Errorf("CheckEndpoint(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "localhost:4318", "grpc://c:4317", "http://", "http://u:p@c:4318", "http://c:4318?x=1"} {
		if err := CheckEndpoint(bad); err == nil {
			t.Errorf("CheckEndpoint(%q) accepted", bad)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	h, err := ParseHeaders(" x-api-key = abc%3D ,b=2,")
	if err != nil || len(h) != 2 || h["x-api-key"] != "abc=" || h["b"] != "2" {
		t.Fatalf("ParseHeaders = %v, %v", h, err)
	}
	if _, err := ParseHeaders("novalue"); err == nil {
		t.Error("a pair without = accepted")
	}
	// A header net/http cannot send is refused at start, not at every
	// export; the error never holds the value.
	for _, bad := range []string{"x-api-key=sk-SECRET%0Ainjected: 1", "x api key=sk-SECRET", "x-api-key: sk-SECRET=", "x-api-key=sk-SECRET\x00"} {
		_, err := ParseHeaders(bad)
		if err == nil {
			t.Errorf("ParseHeaders(%q) accepted", bad)
		} else if strings.Contains(err.Error(), "sk-SECRET") {
			t.Errorf("ParseHeaders(%q) = %v: the error holds the value", bad, err)
		}
	}
	if h, err := ParseHeaders(""); err != nil || len(h) != 0 {
		t.Errorf("empty = %v, %v", h, err)
	}
}

// A span holding invalid UTF-8 (a client's raw header bytes, a name cut
// mid-rune) must not make the exporter drop the batch: the protobuf
// refuses invalid strings, so the other requests' spans would be lost.
func TestInvalidUTF8DoesNotDropTheBatch(t *testing.T) {
	var mu sync.Mutex
	var names []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("collector: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
					for _, kv := range s.Attributes {
						if v := kv.Value.GetStringValue(); !utf8.ValidString(v) {
							t.Errorf("attribute %s = %q", kv.Key, v)
						}
					}
				}
			}
		}
	}))
	defer srv.Close()
	tp, err := New(context.Background(), Options{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	tr := tp.Tracer("test")
	_, s := tr.Start(context.Background(), "good")
	s.End()
	_, s = tr.Start(context.Background(), "bad\xff")
	s.SetAttributes(attribute.String("v", "\xff\xfe"), attribute.StringSlice("vs", []string{"ok", "\xc3"}))
	s.AddEvent("ev\xff", trace.WithAttributes(attribute.String("e", "\xff")))
	s.SetStatus(codes.Error, "st\xff")
	s.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(names) != 2 || names[0] != "good" || names[1] != "bad\uFFFD" {
		t.Fatalf("the collector got spans %q, want good and bad\\uFFFD", names)
	}
}

// A collector that never answers slows neither requests nor shutdown: the
// batch queue is bounded and drops when full (a flood of requests cannot
// grow memory or block the request path), and Shutdown returns at its
// context's deadline.
func TestHangingCollector(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	tp, err := New(context.Background(), Options{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	tr := tp.Tracer("test")
	start := time.Now()
	for range 50000 {
		_, s := tr.Start(context.Background(), "flood")
		s.End()
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("50000 spans took %v with the collector hanging", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	_ = tp.Shutdown(ctx)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Shutdown took %v past its 300 ms deadline", d)
	}
}
