// Package tracing holds enclave's OpenTelemetry instrumentation that more
// than one package shares: the instrumentation scope, W3C trace-context
// propagation (HTTP headers and MCP _meta), the server span of an HTTP
// request and a bun query hook for SQL spans. It uses the OpenTelemetry
// API only; the SDK and the OTLP exporter are the binary's business
// (package internal/tracing/otlpexport).
//
// What a span records is chosen here once: names of routes, MCP methods,
// capabilities, SQL operations and tables, hosts and status codes. Never
// arguments, results, bound SQL values, headers, bodies, query strings or
// tokens.
package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/enclave-mcp/enclave/internal/statuswriter"
)

// Scope is the instrumentation scope (tracer name) of every enclave span.
const Scope = "github.com/enclave-mcp/enclave"

// Tracer returns enclave's tracer from tp, or nil when tp is nil (tracing
// off: callers then skip every span, at no cost).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(Scope)
}

// Propagator is W3C Trace Context (traceparent, tracestate). It is used
// as it is, never through otel's global propagator, so an embedder's
// global setting does not change what enclave accepts.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// FromMeta returns the remote span context carried by an MCP request's
// params._meta (the keys "traceparent" and "tracestate", SEP-414), and
// whether it holds a valid one. A malformed value is ignored.
func FromMeta(meta map[string]any) (trace.SpanContext, bool) {
	tp, _ := meta["traceparent"].(string)
	if tp == "" {
		return trace.SpanContext{}, false
	}
	c := metaCarrier{traceparent: tp}
	c.tracestate, _ = meta["tracestate"].(string)
	sc := trace.SpanContextFromContext(Propagator.Extract(context.Background(), bounded{c}))
	return sc, sc.IsValid()
}

// MaxTraceState is the longest tracestate kept (W3C: 512 characters is
// what every vendor must propagate; anything longer may be dropped). A
// longer one is ignored: the state travels with every span of the
// request, so 32 members of 512 characters on every unauthenticated
// request would swell each export batch (and a collector's body limit
// then refuses the whole batch).
const MaxTraceState = 512

// bounded is a carrier whose tracestate is "" when longer than
// MaxTraceState.
type bounded struct{ propagation.TextMapCarrier }

func (b bounded) Get(key string) string {
	v := b.TextMapCarrier.Get(key)
	if key == "tracestate" && len(v) > MaxTraceState {
		return ""
	}
	return v
}

type metaCarrier struct{ traceparent, tracestate string }

func (c metaCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.traceparent
	case "tracestate":
		return c.tracestate
	}
	return ""
}
func (metaCarrier) Set(string, string) {}
func (metaCarrier) Keys() []string     { return []string{"traceparent", "tracestate"} }

// TraceID returns the hex trace id of the span in ctx, or "" when ctx has
// no valid span context (tracing off, or no span).
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

type routeKey struct{}

// HTTP returns middleware that gives every request a server span,
// continuing the trace of a W3C traceparent header. The span is named
// "METHOD route": route is the pattern of the mux wrapped with Route
// inside next (or class(r) when the pattern is the catch-all "/" or none
// matched). It records the method, the route, the status and the request
// id (requestID, read after the request), never the path, query string
// or headers. With a nil tracer it returns next.
func HTTP(tracer trace.Tracer, class func(*http.Request) string, requestID func(context.Context) string, next http.Handler) http.Handler {
	if tracer == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := Propagator.Extract(r.Context(), bounded{propagation.HeaderCarrier(r.Header)})
		method := methodLabel(r.Method)
		ctx, span := tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", method)))
		defer span.End()
		var route string
		sw := statuswriter.New(w)
		ctx = context.WithValue(ctx, routeKey{}, &route)
		next.ServeHTTP(sw, r.WithContext(ctx))
		if route == "" || route == "/" {
			route = class(r)
		} else {
			span.SetAttributes(attribute.String("http.route", route))
		}
		span.SetName(method + " " + route)
		status := sw.StatusOr200()
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if id := requestID(ctx); id != "" {
			span.SetAttributes(attribute.String("enclave.request_id", id))
		}
		if status >= 500 {
			span.SetStatus(codes.Error, "")
		}
	})
}

// methodLabel is an HTTP method of RFC 9110 (and PATCH), else "_OTHER"
// (the semantic conventions' word): any token is a method to net/http,
// and a client inventing methods must not make span names unbounded.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// Route wraps a mux so that the HTTP middleware above it learns the
// pattern that matched (http.ServeMux sets Request.Pattern on the request
// it is given). Without the middleware it only calls mux.
func Route(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r)
		if p, ok := r.Context().Value(routeKey{}).(*string); ok {
			pat := r.Pattern
			for i := 0; i < len(pat); i++ { // "GET /healthz" → "/healthz"; a host stays
				if pat[i] == ' ' {
					pat = pat[i+1:]
					break
				}
			}
			*p = pat
		}
	})
}
