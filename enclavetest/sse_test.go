package enclavetest_test

import (
	"fmt"
	"testing"

	"github.com/enclave-mcp/enclave/enclavetest"
)

func TestMessage(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body, want string
	}{
		{"json", "application/json", `{"jsonrpc":"2.0","id":1,"result":{}}`, `{"jsonrpc":"2.0","id":1,"result":{}}`},
		{"json with charset", "application/json; charset=utf-8", `{"id":2}`, `{"id":2}`},
		{"one event", "text/event-stream", "event: message\ndata: {\"id\":1}\n\n", `{"id":1}`},
		{"notification then response", "text/event-stream", "event: message\ndata: {\"method\":\"notifications/progress\"}\n\nevent: message\nid: 7\ndata: {\"id\":1}\n\n", `{"id":1}`},
		{"CRLF and no space", "text/event-stream; charset=utf-8", "data:{\"id\":3}\r\n\r\n", `{"id":3}`},
		{"multi-line data", "text/event-stream", "data: {\"id\":\ndata: 4}\n\n", "{\"id\":\n4}"},
		{"comment and trailing event without blank line", "text/event-stream", ": keep-alive\n\ndata: {\"id\":5}", `{"id":5}`},
		{"no data", "text/event-stream", ": keep-alive\n\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(enclavetest.Message(tc.contentType, []byte(tc.body))); got != tc.want {
				t.Fatalf("Message = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEventsKeepsFields(t *testing.T) {
	ev := enclavetest.Events([]byte("id: 1\nevent: message\ndata: a\n\nid: 2\ndata: b\n\n"))
	if len(ev) != 2 || ev[0].ID != "1" || ev[0].Event != "message" || string(ev[0].Data) != "a" || ev[1].ID != "2" || ev[1].Event != "" || string(ev[1].Data) != "b" {
		t.Fatalf("Events = %+v", ev)
	}
}

// An answer to a POST to /mcp may be a JSON body or an event stream whose
// last event is the response; Message reads either.
func ExampleMessage() {
	stream := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n" +
		"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
	fmt.Println(string(enclavetest.Message("text/event-stream", []byte(stream))))
	fmt.Println(string(enclavetest.Message("application/json", []byte(`{"jsonrpc":"2.0","id":2,"result":{}}`))))
	// Output:
	// {"jsonrpc":"2.0","id":1,"result":{}}
	// {"jsonrpc":"2.0","id":2,"result":{}}
}
