package mcp

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
)

// benchWriter is a ResponseWriter that keeps the status and the body of
// one answer, reused across a benchmark's requests.
type benchWriter struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(p)
}

func (w *benchWriter) reset() {
	clear(w.h)
	w.status = 0
	w.body.Reset()
}

// BenchmarkDirectToolCall is one tools/call on the direct path (direct.go),
// served in process (no network): authentication, the session or
// 2026-07-28 checks, the request's decoding, Registry.Invoke of a
// capability needing a role and a permission, and the answer's encoding.
// The answer is checked on every call.
func BenchmarkDirectToolCall(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := newFixture(b, func(o *Options) { o.Logger = quiet })
	must(b, f.reg.Register(capabilities.Define(capabilities.Spec[echoIn, capabilities.Result]{
		Name: "benchEcho", Domain: "test", Description: "Echoes its text.", Annotations: readOnly,
		Requires: capabilities.Requirement{Role: capabilities.RoleUser, Permissions: []capabilities.Permission{capabilities.ReadUserOwn}},
		Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (capabilities.Result, error) {
			return capabilities.TextResult(in.Text), nil
		},
	})))
	sid := f.initialize("alice-token")
	f.request(http.MethodPost, "alice-token", sid, rpc(2, "tools/list", nil)).Body.Close() // as an agent does, and mirrors benchEcho

	run := func(b *testing.B, body string, header http.Header, want string) {
		req := httptest.NewRequest(http.MethodPost, "http://mcp.test"+Path, nil)
		req.Header = header
		payload := []byte(body)
		rd := bytes.NewReader(payload)
		w := &benchWriter{h: http.Header{}}
		serve := func() {
			w.reset()
			rd.Reset(payload)
			req.Body = io.NopCloser(rd)
			req.ContentLength = int64(len(payload))
			f.srv.ServeHTTP(w, req)
			if w.status != http.StatusOK || !bytes.Contains(w.body.Bytes(), []byte(want)) {
				b.Fatalf("answer %d: %s", w.status, w.body.String())
			}
		}
		serve()
		if !strings.HasPrefix(w.h.Get("Content-Type"), "application/json") {
			b.Fatalf("not a JSON answer: %q", w.h.Get("Content-Type"))
		}
		b.ReportAllocs()
		for b.Loop() {
			serve()
		}
	}
	b.Run("session", func(b *testing.B) {
		h := http.Header{}
		h.Set("Authorization", "Bearer alice-token")
		h.Set("Content-Type", "application/json")
		h.Set("Accept", "application/json, text/event-stream")
		h.Set(sessionHeader, sid)
		h.Set(versionHeader, testProtocol)
		run(b, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"benchEcho","arguments":{"text":"client 3 call 7"}}}`,
			h, `"text":"client 3 call 7"`)
	})
	b.Run("modern", func(b *testing.B) {
		h := http.Header{}
		h.Set("Authorization", "Bearer alice-token")
		h.Set("Content-Type", "application/json")
		h.Set("Accept", "application/json, text/event-stream")
		h.Set(versionHeader, "2026-07-28")
		h.Set("Mcp-Method", "tools/call")
		h.Set("Mcp-Name", "benchEcho")
		run(b, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"benchEcho","arguments":{"text":"client 3 call 7"},`+
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},`+
			`"io.modelcontextprotocol/clientCapabilities":{}}}}`,
			h, `"text":"client 3 call 7"`)
	})
}
