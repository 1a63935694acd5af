package mcp

import (
	"net/http"
	"slices"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

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
	if msg.Method == "tools/call" && msg.Params.Name != "" && s.reg.Has(msg.Params.Name) {
		// A registered name only: any string can be sent (the capability
		// span says "capability (unknown)" the same way), and one cut
		// mid-rune, or a header's raw bytes, would be invalid UTF-8, which
		// the OTLP exporter refuses with the whole batch of spans.
		attrs = append(attrs, attribute.String("gen_ai.tool.name", msg.Params.Name))
	}
	if v := r.Header.Get(versionHeader); v != "" && slices.Contains(ProtocolVersions, v) {
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

// methodLabel is method when it is a method of MCP (knownMethods), else
// "mcp (unknown)": any string can be sent, and span names are for a
// bounded set (a client inventing names would flood the operator's
// backend with distinct span names).
func methodLabel(method string) string {
	if knownMethods[method] {
		return method
	}
	return "mcp (unknown)"
}

// knownMethods are the MCP methods (and notifications) of the protocol
// versions served.
var knownMethods = func() map[string]bool {
	m := map[string]bool{}
	for _, name := range []mcpgo.MCPMethod{
		mcpgo.MethodInitialize, mcpgo.MethodPing, mcpgo.MethodResourcesList, mcpgo.MethodResourcesTemplatesList,
		mcpgo.MethodResourcesRead, mcpgo.MethodResourcesSubscribe, mcpgo.MethodResourcesUnsubscribe,
		mcpgo.MethodPromptsList, mcpgo.MethodPromptsGet, mcpgo.MethodToolsList, mcpgo.MethodToolsCall,
		mcpgo.MethodSetLogLevel, mcpgo.MethodElicitationCreate, mcpgo.MethodNotificationElicitationComplete,
		mcpgo.MethodListRoots, mcpgo.MethodTasksGet, mcpgo.MethodTasksList, mcpgo.MethodTasksResult, mcpgo.MethodTasksCancel,
		mcpgo.MethodNotificationInitialized, mcpgo.MethodNotificationCancelled, mcpgo.MethodNotificationProgress,
		mcpgo.MethodNotificationMessage, mcpgo.MethodNotificationResourcesListChanged, mcpgo.MethodNotificationResourceUpdated,
		mcpgo.MethodNotificationPromptsListChanged, mcpgo.MethodNotificationToolsListChanged,
		mcpgo.MethodNotificationRootsListChanged, mcpgo.MethodNotificationTasksStatus, mcpgo.MethodCompletionComplete,
		mcpgo.MethodServerDiscover, mcpgo.MethodSubscriptionsListen, mcpgo.MethodNotificationSubscriptionsAcknowledged,
		mcpgo.MethodSamplingCreateMessage,
		"tasks/update", // 2026-07-28 (tasks.go)
	} {
		m[string(name)] = true
	}
	return m
}()
