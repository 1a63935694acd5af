package mcp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// On a request's event stream, a notification written between the
// handler's refusal and mcp-go's error response (a log message of level
// "error", or one whose data has an "error" key, possibly from another
// request of the session) must pass as it is: only the request's own
// error response is replaced, once, with the request's id.
func TestDeliveryReplacesOnlyTheResponse(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "text/event-stream")
	d := newDeliveryWriter(rec)
	d.replaceErrorBody(errorAnswer(json.RawMessage(`7`), CodeQuotaExceeded, "quota exceeded", map[string]any{"code": "quota_exceeded"}), http.StatusOK)
	note := `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"error","data":{"error":"disk"}}}`
	for _, m := range []string{note, `{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"quota exceeded"}}`} {
		if _, err := d.Write([]byte("event: message\ndata: " + m + "\n\n")); err != nil {
			t.Fatal(err)
		}
	}
	out := rec.Body.String()
	if !strings.Contains(out, note) {
		t.Errorf("the notification was not delivered as it was:\n%s", out)
	}
	if strings.Count(out, `"id":7`) != 1 || !strings.Contains(out, `"code":-32029`) || strings.Contains(out, "-32603") {
		t.Errorf("want exactly one response for id 7, the replacement:\n%s", out)
	}
}
