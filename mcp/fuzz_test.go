package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
	"github.com/enclave-mcp/enclave/internal/fuzzseed"
)

// The fuzz targets of this file check the transport's one promise about
// bad input: whatever arrives, the answer is a well-formed refusal or a
// JSON-RPC reply, never a panic, never a 5xx, never bigger than the body
// limit. Seeds live under testdata/fuzz/<Target>/; .ci/run runs each
// target for a bounded time.

// fuzzMaxBody is the body limit the fuzzed server runs with: small, so the
// fuzzer reaches it.
const fuzzMaxBody = 64 << 10

type nested struct {
	Name  string            `json:"name"`
	Count int               `json:"count,omitempty"`
	Tags  []string          `json:"tags,omitempty"`
	Attrs map[string]string `json:"attrs,omitempty"`
}

type richIn struct {
	Text   string   `json:"text"`
	N      int64    `json:"n,omitempty"`
	F      float64  `json:"f,omitempty"`
	Flag   bool     `json:"flag,omitempty"`
	Kind   string   `json:"kind,omitempty" jsonschema:"a kind"`
	Items  []nested `json:"items,omitempty"`
	Nested *nested  `json:"nested,omitempty"`
}

// fuzzServer is an MCP server with capabilities of varied input schemas,
// served in process (no sockets: the fuzzer runs thousands of inputs a
// second), and a session for alice.
type fuzzServer struct {
	srv  *Server
	h    http.Handler
	sid  string
	logs *syncBuffer
}

var (
	fuzzOnce sync.Once
	fuzzSrv  *fuzzServer
)

func newFuzzServer(tb testing.TB) *fuzzServer {
	fuzzOnce.Do(func() {
		logs := &syncBuffer{}
		reg := capabilities.NewRegistry(capabilities.Options{Auditor: &capabilitiestest.Auditor{}, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
		err := reg.Register(
			capabilities.Define(capabilities.Spec[echoIn, echoOut]{
				Name: "echo", Domain: "test", Description: "Echoes text.", Annotations: readOnly,
				Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
					return echoOut{Echo: in.Text}, nil
				},
			}),
			capabilities.Define(capabilities.Spec[richIn, capabilities.Result]{
				Name: "rich", Domain: "test", Description: "Takes every kind of argument.", Annotations: readOnly,
				Handler: func(_ context.Context, _ *capabilities.Call, in richIn) (capabilities.Result, error) {
					b, _ := json.Marshal(in)
					return capabilities.TextResult(string(b)), nil
				},
			}),
			capabilities.Define(capabilities.Spec[echoIn, echoOut]{
				Name: "adminOnly", Domain: "test", Description: "Admins only.", Annotations: writes,
				Requires: capabilities.Requirement{Role: capabilities.RoleAdmin},
				Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
					return echoOut{Echo: in.Text}, nil
				},
			}),
			capabilities.Define(capabilities.Spec[tagIn, capabilities.Result]{
				Name: "progress", Domain: "test", Description: "Reports progress.", Annotations: readOnly,
				Handler: func(ctx context.Context, call *capabilities.Call, in tagIn) (capabilities.Result, error) {
					if err := call.Progress(ctx, 1, 2, in.Tag); err != nil {
						return capabilities.Result{}, err
					}
					return capabilities.TextResult(in.Tag), nil
				},
			}),
		)
		if err != nil {
			panic(err)
		}
		verifier := TokenVerifierFunc(func(_ context.Context, token string) (TokenInfo, error) {
			if token == "alice-token" {
				return TokenInfo{UserID: "alice", Scopes: []string{"mcp"}, Audience: []string{"https://mcp.test/mcp"}, ExpiresAt: time.Now().Add(time.Hour)}, nil
			}
			return TokenInfo{}, ErrInvalidToken
		})
		srv, err := New(Options{
			Registry: reg, Verifier: verifier, BaseURL: "https://mcp.test",
			Loader:       capabilitiestest.NewLoader(capabilitiestest.User("alice")),
			MaxBodyBytes: fuzzMaxBody,
			Logger:       slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil {
			panic(err)
		}
		fs := &fuzzServer{srv: srv, h: srv, logs: logs}
		rec := fs.post("alice-token", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+testProtocol+`","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}`, false)
		fs.sid = rec.Header().Get(sessionHeader)
		if rec.Code != http.StatusOK || fs.sid == "" {
			panic("fuzz server: initialize: " + rec.Body.String())
		}
		fs.post("alice-token", fs.sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, true)
		fuzzSrv = fs
	})
	if fuzzSrv == nil {
		tb.Fatal("fuzz server did not start")
	}
	return fuzzSrv
}

func (fs *fuzzServer) post(token, sid, body string, version bool) *httptest.ResponseRecorder {
	return fs.do(token, sid, []byte(body), version)
}

func (fs *fuzzServer) do(token, sid string, body []byte, version bool) *httptest.ResponseRecorder {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "https://mcp.test"+Path, bytes.NewReader(body))
	req.RemoteAddr = "127.0.0.1:1234"
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if sid != "" {
		req.Header.Set(sessionHeader, sid)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if version {
		req.Header.Set(versionHeader, testProtocol)
	}
	rec := httptest.NewRecorder()
	start := time.Now()
	fs.h.ServeHTTP(rec, req)
	if d := time.Since(start); d > 5*time.Second {
		rec.Code = 599 // reported by checkAnswer: an answer must not hang
		rec.Body.WriteString(" (took " + d.String() + ")")
	}
	return rec
}

// checkAnswer is the property every fuzzed answer must have.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, input []byte) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("status %d for %q: %s", rec.Code, truncate(input), rec.Body.String())
	}
	if rec.Body.Len() > fuzzMaxBody*2 {
		t.Fatalf("answer of %d bytes for a body of %d", rec.Body.Len(), len(input))
	}
	if rec.Code >= 400 && rec.Body.Len() > 0 && strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") && !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("status %d with a body that is not JSON: %q", rec.Code, rec.Body.String())
	}
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// FuzzJSONRPCBody posts arbitrary bodies to /mcp: within a session, with
// and without a protocol-version header, and as a would-be initialize.
func FuzzJSONRPCBody(f *testing.F) {
	var seeds [][]any
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`,
		`{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":"` + strings.Repeat("x", 4000) + `","method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + strings.Repeat(`{"a":`, 2000) + `1` + strings.Repeat(`}`, 2000) + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":1,"arguments":[]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rich","arguments":{"text":"\xff\xfe","n":"1"}}}`,
		`{"jsonrpc":"2.0","id":null,"result":{}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"debug"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"../../etc/passwd"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"x"},"argument":{"name":"a","value":"b"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2026-07-28"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"protocolVersion":"2026-07-28"},"name":"echo","arguments":{"text":"x"}}}`,
		`[]`, `null`, `"`, `{`, "\xff\xfe\xfd", ``,
	} {
		seeds = append(seeds, []any{[]byte(s), uint8(0)})
	}
	fuzzseed.Add(f, seeds...)
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		fs := newFuzzServer(t)
		sid, version := fs.sid, true
		switch mode % 4 {
		case 1:
			version = false
		case 2:
			sid = "" // an initialize or a sessionless request
		case 3:
			sid = "forged-" + fs.sid
		}
		rec := fs.do("alice-token", sid, body, version)
		checkAnswer(t, rec, body)
		if strings.Contains(fs.logs.String(), "panic") {
			t.Fatalf("the server logged a panic for %q: %s", truncate(body), fs.logs.String())
		}
	})
}

// FuzzToolArguments calls each test capability with arbitrary arguments:
// the schema check refuses what does not fit, with a JSON-RPC answer.
func FuzzToolArguments(f *testing.F) {
	var seeds [][]any
	for _, s := range []struct {
		tool uint8
		args string
	}{
		{0, `{"text":"hello"}`},
		{0, `{"text":1}`},
		{0, `{"text":null,"extra":true}`},
		{1, `{"text":"x","n":9223372036854775807,"f":1e308,"flag":true,"kind":"a","items":[{"name":"a","count":1,"tags":["t"],"attrs":{"k":"v"}}],"nested":{"name":"n"}}`},
		{1, `{"text":"x","n":1e400}`},
		{1, `{"text":"x","n":-9223372036854775809}`},
		{1, `{"text":"x","kind":"c"}`},
		{1, `{"text":"x","items":"notalist"}`},
		{1, `{"text":"x","nested":` + strings.Repeat(`{"nested":`, 500) + `{}` + strings.Repeat(`}`, 500) + `}`},
		{1, `{"text":"\ud800"}`},
		{2, `{"text":"admin"}`},
		{3, `{"tag":"p"}`},
		{4, `{}`},
		{0, `[]`}, {0, `"str"`}, {0, `null`}, {0, `{"text":"` + strings.Repeat("é", 1000) + `"}`},
	} {
		seeds = append(seeds, []any{s.tool, []byte(s.args)})
	}
	fuzzseed.Add(f, seeds...)
	tools := []string{"echo", "rich", "adminOnly", "progress", "nonexistent"}
	f.Fuzz(func(t *testing.T, tool uint8, args []byte) {
		fs := newFuzzServer(t)
		name := tools[int(tool)%len(tools)]
		raw := json.RawMessage(args)
		if !json.Valid(args) {
			b, _ := json.Marshal(string(args)) // the arguments as a JSON string
			raw = b
		}
		body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": map[string]any{"name": name, "arguments": raw}})
		if err != nil {
			t.Skip()
		}
		rec := fs.do("alice-token", fs.sid, body, true)
		checkAnswer(t, rec, body)
		if rec.Code == http.StatusOK {
			text := rec.Body.String()
			if !strings.Contains(text, `"result"`) && !strings.Contains(text, `"error"`) {
				t.Fatalf("200 without a JSON-RPC result or error: %s", text)
			}
			if name == "adminOnly" && strings.Contains(text, `"echo"`) {
				t.Fatalf("a user ran an admin capability: %s", text)
			}
		}
		if strings.Contains(fs.logs.String(), "panic") {
			t.Fatalf("the server logged a panic: %s", fs.logs.String())
		}
	})
}

// FuzzBearerHeader sends arbitrary Authorization headers: the answer is a
// 401 with a challenge (or, for the one real token, a reply), never a 5xx.
func FuzzBearerHeader(f *testing.F) {
	var seeds [][]any
	for _, s := range []string{
		"Bearer alice-token", "bearer alice-token", "BEARER  alice-token ", "Bearer", "Bearer ", "Basic YTpi",
		"Bearer alice-token extra", "Bearer \x00", "Bearer \xff\xfe", "Bearer " + strings.Repeat("A", 8000), "",
		"Bearer alice-token\r\nX-Injected: 1",
	} {
		seeds = append(seeds, []any{s})
	}
	fuzzseed.Add(f, seeds...)
	f.Fuzz(func(t *testing.T, header string) {
		fs := newFuzzServer(t)
		req := httptest.NewRequest(http.MethodPost, "https://mcp.test"+Path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.RemoteAddr = "127.0.0.1:1234"
		req.Header["Authorization"] = []string{header}
		req.Header.Set(sessionHeader, fs.sid)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(versionHeader, testProtocol)
		rec := httptest.NewRecorder()
		fs.h.ServeHTTP(rec, req)
		checkAnswer(t, rec, []byte(header))
		tok, ok := bearer(req)
		if ok && tok == "alice-token" {
			return
		}
		if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("Authorization %q: %d %q", header, rec.Code, rec.Header().Get("WWW-Authenticate"))
		}
	})
}
