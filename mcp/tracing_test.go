package mcp

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// An MCP span's name is a method of the protocol, never a string the client
// made up (a client inventing method names would flood the operator's
// backend with distinct span names), and its attributes hold no text the
// client chose: no unknown tool name, no unknown protocol version. Raw
// header bytes or a name cut mid-rune would be invalid UTF-8, which the
// OTLP exporter refuses along with every other span of the batch.
func TestTracingMCPSpanNamesAndAttributes(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := newFixture(t, func(o *Options) { o.TracerProvider = tp })
	sid := f.initialize("alice-token")

	send := func(body, version string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(body))
		must(t, err)
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set(sessionHeader, sid)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(versionHeader, version)
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		readAll(resp)
		resp.Body.Close()
	}
	for i, m := range []string{"madeUp/method", "secretProjectXyz", "tools/cal"} {
		send(rpc(10+i, m, map[string]any{}), testProtocol)
	}
	send(rpc(20, "tools/call", map[string]any{"name": strings.Repeat("a", 127) + "é-hunter2", "arguments": map[string]any{}}), testProtocol)
	send(rpc(21, "tools/list", map[string]any{}), "\xff\xfehunter2")
	send(rpc(22, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}}), testProtocol)

	names := map[string]int{}
	var sawEcho bool
	for _, s := range rec.Ended() {
		names[s.Name()]++
		if !utf8.ValidString(s.Name()) || strings.Contains(s.Name(), "hunter2") {
			t.Errorf("span name %q", s.Name())
		}
		for _, kv := range s.Attributes() {
			v := kv.Value.Emit()
			if !utf8.ValidString(v) || strings.Contains(v, "hunter2") || strings.Contains(v, "aaaa") {
				t.Errorf("span %q: attribute %s = %q", s.Name(), kv.Key, v)
			}
			if kv.Key == "gen_ai.tool.name" && v == "echo" {
				sawEcho = true
			}
		}
	}
	for name := range names {
		if name != "mcp (unknown)" && !knownMethods[name] {
			t.Errorf("span named %q (a method the client made up)", name)
		}
	}
	if names["mcp (unknown)"] != 3 {
		t.Errorf("spans = %v, want the 3 made-up methods as \"mcp (unknown)\"", names)
	}
	if !sawEcho {
		t.Error("a call of a registered tool does not record gen_ai.tool.name")
	}
}
