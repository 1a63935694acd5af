package mcp

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/enclave-mcp/enclave/internal/tracing"
)

// traceMethod starts the span of one MCP request (Options.TracerProvider)
// and returns r carrying it, and the function that ends it. The span is
// named after the method ("tools/call") and records the method, the tool
// name of a tools/call and the protocol version: never arguments, _meta
// values, the session id or the token.
//
// Its parent: the request's params._meta traceparent (SEP-414; the
// 2026-07-28 convention) when it holds one, which wins over the HTTP
// traceparent header: _meta names the caller's span of this very
// message. When _meta continues the trace the HTTP span is already in
// (a client that sends both the same), the span stays under the HTTP
// span; otherwise it joins the caller's trace under the _meta span and
// links to the HTTP span, whose trace began before the body was read.
func (s *Server) traceMethod(r *http.Request, msg envelope) (*http.Request, func()) {
	ctx := r.Context()
	attrs := []attribute.KeyValue{attribute.String("mcp.method.name", methodLabel(msg.Method))}
	if msg.Method == "tools/call" && msg.Params.Name != "" {
		name := msg.Params.Name
		if len(name) > 128 {
			name = name[:128]
		}
		attrs = append(attrs, attribute.String("gen_ai.tool.name", name))
	}
	if v := r.Header.Get(versionHeader); v != "" && len(v) <= 32 {
		attrs = append(attrs, attribute.String("mcp.protocol.version", v))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	if msg.Params.Meta != nil {
		if remote, ok := tracing.FromMeta(msg.Params.Meta.AdditionalFields); ok {
			outer := trace.SpanContextFromContext(ctx)
			if !outer.IsValid() || outer.TraceID() != remote.TraceID() {
				if outer.IsValid() {
					opts = append(opts, trace.WithLinks(trace.Link{SpanContext: outer}))
				}
				ctx = trace.ContextWithRemoteSpanContext(ctx, remote)
			}
		}
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	ctx, span := s.tracer.Start(ctx, methodLabel(msg.Method), opts...)
	return r.WithContext(ctx), func() { span.End() }
}

// methodLabel is method when it is a plausible MCP method name (at most 64
// of [A-Za-z/_]), else "unknown": any string can be sent, and span names
// are for a bounded set.
func methodLabel(method string) string {
	if method == "" || len(method) > 64 {
		return "unknown"
	}
	for i := 0; i < len(method); i++ {
		switch c := method[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '/', c == '_':
		default:
			return "unknown"
		}
	}
	return method
}
