package mcp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

// The transport's answers are written as mcp-go writes the same response,
// byte for byte, so that a client cannot tell which code answered.
func TestWritersAnswerAsMcpGo(t *testing.T) {
	data := mcpgo.UnsupportedProtocolVersionData{Supported: ProtocolVersions, Requested: "1999-01-01"}
	for _, id := range []string{`7`, `"a<b"`, `-0`} {
		want, _ := json.Marshal(mcpgo.JSONRPCError{JSONRPC: "2.0", ID: mcpgoRequestID(id),
			Error: mcpgo.JSONRPCErrorDetails{Code: mcpgo.INVALID_PARAMS, Message: "bad & <worse>", Data: data}})
		if got := errorAnswer(mcpgoID(json.RawMessage(id)), mcpgo.INVALID_PARAMS, "bad & <worse>", data); string(got) != string(want) {
			t.Errorf("id %s: error answer\n got %s\nwant %s", id, got, want)
		}
		res := map[string]any{"resultType": "complete"}
		want, _ = json.Marshal(mcpgo.JSONRPCResponse{JSONRPC: "2.0", ID: mcpgoRequestID(id), Result: res})
		if got, _ := resultAnswer(mcpgoID(json.RawMessage(id)), res); string(got) != string(want) {
			t.Errorf("id %s: result answer\n got %s\nwant %s", id, got, want)
		}
	}
	if got := errorAnswer(nil, 1, "m", nil); string(got) != `{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}` {
		t.Errorf("an answer without id: %s", got)
	}
}

func mcpgoRequestID(raw string) mcpgo.RequestId {
	var v any
	_ = json.Unmarshal([]byte(raw), &v)
	return mcpgo.NewRequestId(v)
}

func TestWriteHTTPError(t *testing.T) {
	for status, code := range map[int]int{http.StatusBadRequest: mcpgo.INVALID_REQUEST, http.StatusServiceUnavailable: mcpgo.INTERNAL_ERROR} {
		rec := httptest.NewRecorder()
		writeHTTPError(rec, status, "no", "req-1")
		want := `{"jsonrpc":"2.0","id":null,"error":{"code":` + itoa(code) + `,"message":"no","data":{"requestId":"req-1"}}}` + "\n"
		if rec.Code != status || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("X-Request-Id") != "req-1" || rec.Body.String() != want {
			t.Errorf("status %d: got %d %v %q, want %q", status, rec.Code, rec.Header(), rec.Body.String(), want)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
