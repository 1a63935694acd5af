package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/internal/tracing/otlpexport"
	"github.com/enclave-mcp/enclave/storage"
)

// otlpReceiver is an in-process OTLP/HTTP collector: it decodes every
// ExportTraceServiceRequest posted to /v1/traces and keeps its spans.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource []*commonpb.KeyValue
	raw      [][]byte // the request bodies, to search for leaked values
}

func newOTLPReceiver(t testing.TB) *otlpReceiver {
	rc := &otlpReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read", http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("OTLP receiver: %v", err)
			http.Error(w, "decode", http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.raw = append(rc.raw, body)
		for _, rs := range req.ResourceSpans {
			rc.resource = rs.GetResource().GetAttributes()
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *otlpReceiver) all() []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.spans)
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			if v := kv.Value.GetStringValue(); v != "" {
				return v
			}
			return fmt.Sprint(kv.Value.GetIntValue())
		}
	}
	return ""
}

// tracedCall posts one 2026-07-28 tools/call; meta may hold a traceparent,
// header is the traceparent header ("" for none).
func tracedCall(t testing.TB, base, token, name string, args, meta map[string]any, header string) map[string]any {
	t.Helper()
	m := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}
	for k, v := range meta {
		m[k] = v
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": name, "arguments": args, "_meta": m}})
	req, _ := http.NewRequest("POST", base+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", name)
	if header != "" {
		req.Header.Set("traceparent", header)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw := readMessage(t, resp)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil || (out["error"] != nil) != (name == "adminAuditLogQuery") {
		t.Fatalf("tools/call %s: %d %s", name, resp.StatusCode, raw)
	}
	return out
}

// One server exporting with OTLP/HTTP (the binary's exporter, pointed at
// an in-process receiver): an MCP tools/call yields the span tree HTTP
// server span → MCP method span → capability span → SQL spans, continuing
// the caller's trace from the traceparent header, and from params._meta
// (which then parents the MCP span, linked to the HTTP span); the audit
// rows of the calls carry the trace ids; the arguments, the bearer token
// and the query's values appear in no span.
func TestTracingSpanTree(t *testing.T) {
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) { testTracingSpanTree(t, d) })
	}
}

func testTracingSpanTree(t *testing.T, dialect storage.Dialect) {
	ctx := context.Background()
	rc := newOTLPReceiver(t)
	tp, err := otlpexport.New(ctx, otlpexport.Options{Endpoint: rc.URL, Version: "test-version",
		Batch: []sdktrace.BatchSpanProcessorOption{sdktrace.WithBatchTimeout(100 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Shutdown(ctx)

	const secret = "sk-trace-SECRET-4242-do-not-record"
	type probeIn struct {
		Token string `json:"token"`
	}
	type probeOut struct {
		Users int64 `json:"users"`
	}
	var srv *enclave.Server
	s := enclavetest.Start(t, enclavetest.Options{Dialect: dialect, Config: enclave.Config{TracerProvider: tp}, Setup: func(es *enclave.Server) error {
		srv = es
		return es.Registry().Register(capabilities.Define(capabilities.Spec[probeIn, probeOut]{
			Name: "traceProbe", Domain: "test", Description: "Counts users and records an audit event.",
			Annotations: &capabilities.Annotations{},
			Handler: func(ctx context.Context, _ *capabilities.Call, in probeIn) (probeOut, error) {
				n, err := es.Store().DB.NewSelect().Table("users").Where("username <> ?", in.Token).Count(ctx)
				if err != nil {
					return probeOut{}, err
				}
				if err := es.Audit().Record(ctx, audit.Event{Category: audit.CategoryCapability, Action: "traceProbe", Result: audit.ResultSuccess}); err != nil {
					return probeOut{}, err
				}
				return probeOut{Users: n}, nil
			},
		}))
	}})
	alice := s.CreateUser(t, "alice")
	token := alice.Token(t)

	const (
		metaTrace   = "4bf92f3577b34da6a3ce929d0e0e4736"
		metaSpan    = "00f067aa0ba902b7"
		headerTrace = "5cf92f3577b34da6a3ce929d0e0e4737"
		headerSpan  = "11f067aa0ba902b8"
		denyTrace   = "6df92f3577b34da6a3ce929d0e0e4738"
		kitTrace    = "7ef92f3577b34da6a3ce929d0e0e4739"
		bothTrace   = "8ff92f3577b34da6a3ce929d0e0e473a"
		bothSpan    = "22f067aa0ba902b9"
	)
	args := map[string]any{"token": secret}
	tracedCall(t, s.URL, token, "traceProbe", args, map[string]any{"traceparent": "00-" + metaTrace + "-" + metaSpan + "-01"}, "")
	tracedCall(t, s.URL, token, "traceProbe", args, nil, "00-"+headerTrace+"-"+headerSpan+"-01")
	// Both, in one trace (a client injecting both from one span): the MCP
	// span stays under the HTTP span.
	tracedCall(t, s.URL, token, "traceProbe", args, map[string]any{"traceparent": "00-" + bothTrace + "-" + bothSpan + "-01"}, "00-"+bothTrace+"-"+bothSpan+"-01")
	// A denied call (an admin capability) is audited in its trace too.
	tracedCall(t, s.URL, token, "adminAuditLogQuery", map[string]any{}, map[string]any{"traceparent": "00-" + denyTrace + "-" + metaSpan + "-01"}, "")
	// And a session (2025-06-18) call through the kit's client.
	if _, err := alice.MCP(t).Request("tools/call", map[string]any{"name": "traceProbe", "arguments": args,
		"_meta": map[string]any{"traceparent": "00-" + kitTrace + "-" + metaSpan + "-01"}}); err != nil {
		t.Fatal(err)
	}
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	spans := rc.all()

	hexID := func(b []byte) string { return hex.EncodeToString(b) }
	inTrace := func(trace string) []*tracepb.Span {
		var out []*tracepb.Span
		for _, sp := range spans {
			if hexID(sp.TraceId) == trace {
				out = append(out, sp)
			}
		}
		return out
	}
	find := func(list []*tracepb.Span, name string, parent []byte) *tracepb.Span {
		t.Helper()
		for _, sp := range list {
			if sp.Name == name && (parent == nil || bytes.Equal(sp.ParentSpanId, parent)) {
				return sp
			}
		}
		var names []string
		for _, sp := range list {
			names = append(names, fmt.Sprintf("%s(parent %x)", sp.Name, sp.ParentSpanId))
		}
		t.Fatalf("no span %q with parent %x among %v", name, parent, names)
		return nil
	}
	byID := func(id []byte) *tracepb.Span {
		for _, sp := range spans {
			if bytes.Equal(sp.SpanId, id) {
				return sp
			}
		}
		return nil
	}
	// below checks capability → SQL under an MCP span.
	below := func(trace string, mcpSpan *tracepb.Span) {
		t.Helper()
		list := inTrace(trace)
		if got := spanAttr(mcpSpan, "mcp.method.name"); got != "tools/call" {
			t.Errorf("MCP span method = %q", got)
		}
		if got := spanAttr(mcpSpan, "gen_ai.tool.name"); got != "traceProbe" {
			t.Errorf("MCP span tool = %q", got)
		}
		capSpan := find(list, "capability traceProbe", mcpSpan.SpanId)
		if got := spanAttr(capSpan, "enclave.capability.outcome"); got != "ok" {
			t.Errorf("capability outcome = %q", got)
		}
		sel := find(list, "SELECT users", capSpan.SpanId)
		if spanAttr(sel, "db.operation.name") != "SELECT" || spanAttr(sel, "db.collection.name") != "users" || !slices.Contains([]string{"sqlite", "postgresql"}, spanAttr(sel, "db.system.name")) {
			t.Errorf("SQL span attributes = %v", sel.Attributes)
		}
		find(list, "INSERT audit_events", capSpan.SpanId)
	}

	// _meta: the MCP span continues the caller's span, linked to the HTTP
	// span (which began before the body was read, in a trace of its own).
	mcpMeta := find(inTrace(metaTrace), "tools/call", mustHex(t, metaSpan))
	if len(mcpMeta.Links) != 1 {
		t.Fatalf("the _meta-parented MCP span has %d links, want 1 (the HTTP span)", len(mcpMeta.Links))
	}
	httpSpan := byID(mcpMeta.Links[0].SpanId)
	if httpSpan == nil || httpSpan.Name != "POST /mcp" || spanAttr(httpSpan, "http.response.status_code") != "200" || spanAttr(httpSpan, "http.route") != "/mcp" {
		t.Fatalf("the linked HTTP span = %v", httpSpan)
	}
	below(metaTrace, mcpMeta)

	// The header: HTTP span → MCP span → capability → SQL.
	httpHeader := find(inTrace(headerTrace), "POST /mcp", mustHex(t, headerSpan))
	if httpHeader.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("HTTP span kind = %v", httpHeader.Kind)
	}
	mcpHeader := find(inTrace(headerTrace), "tools/call", httpHeader.SpanId)
	below(headerTrace, mcpHeader)

	httpBoth := find(inTrace(bothTrace), "POST /mcp", mustHex(t, bothSpan))
	mcpBoth := find(inTrace(bothTrace), "tools/call", httpBoth.SpanId)
	if len(mcpBoth.Links) != 0 {
		t.Errorf("the MCP span under its HTTP span has links: %v", mcpBoth.Links)
	}
	below(bothTrace, mcpBoth)

	// The kit's session call (mcp-go's path or the direct one).
	below(kitTrace, find(inTrace(kitTrace), "tools/call", mustHex(t, metaSpan)))

	// A hidden capability is refused before Invoke (as an unknown one):
	// the MCP span names the denial's reason, and the audit row's insert
	// is under it.
	denied := find(inTrace(denyTrace), "tools/call", mustHex(t, metaSpan))
	find(inTrace(denyTrace), "INSERT audit_events", denied.SpanId)
	if got := spanAttr(denied, "enclave.denial.reason"); got != "role" {
		t.Errorf("denied span reason = %q", got)
	}

	// The resource names the service.
	rc.mu.Lock()
	res := map[string]string{}
	for _, kv := range rc.resource {
		res[kv.Key] = kv.Value.GetStringValue()
	}
	raw := slices.Clone(rc.raw)
	rc.mu.Unlock()
	if res["service.name"] != "enclave" || res["service.version"] != "test-version" {
		t.Errorf("resource = %v", res)
	}

	// Audit rows carry the trace ids.
	var rows []audit.Event
	if err := srv.Store().DB.NewSelect().Model(&rows).Where("action IN (?, ?)", "traceProbe", "tool:adminAuditLogQuery").Scan(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range rows {
		got[r.TraceID] = true
	}
	for _, want := range []string{metaTrace, headerTrace, denyTrace, kitTrace, bothTrace} {
		if !got[want] {
			t.Errorf("no audit row carries trace %s (rows: %+v)", want, rows)
		}
	}

	// Nothing secret left the server in a span: not the arguments, not the
	// token, in no attribute, name or export body.
	for _, b := range raw {
		for _, leak := range []string{secret, token} {
			if bytes.Contains(b, []byte(leak)) {
				t.Errorf("an OTLP export holds %.12q…", leak)
			}
		}
	}
}

// BenchmarkTracedToolCall is one tools/call over HTTP (2026-07-28, with a
// capability doing one SELECT and one audit INSERT) with tracing off, and
// on with spans batched to an in-process OTLP receiver.
func BenchmarkTracedToolCall(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		cfg := enclave.Config{}
		if on {
			name = "on"
			rc := newOTLPReceiver(b)
			tp, err := otlpexport.New(context.Background(), otlpexport.Options{Endpoint: rc.URL})
			if err != nil {
				b.Fatal(err)
			}
			defer tp.Shutdown(context.Background())
			cfg.TracerProvider = tp
		}
		s := enclavetest.Start(b, enclavetest.Options{Config: cfg, Setup: func(es *enclave.Server) error {
			return es.Registry().Register(capabilities.Define(capabilities.Spec[struct{}, struct{}]{
				Name: "traceProbe", Domain: "test", Description: "Counts users and records an audit event.",
				Annotations: &capabilities.Annotations{},
				Handler: func(ctx context.Context, _ *capabilities.Call, _ struct{}) (struct{}, error) {
					if _, err := es.Store().DB.NewSelect().Table("users").Count(ctx); err != nil {
						return struct{}{}, err
					}
					return struct{}{}, es.Audit().Record(ctx, audit.Event{Category: audit.CategoryCapability, Action: "traceProbe", Result: audit.ResultSuccess})
				},
			}))
		}})
		token := s.CreateUser(b, "bench").Token(b)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tracedCall(b, s.URL, token, "traceProbe", map[string]any{}, map[string]any{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "")
			}
		})
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
