package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/cluster"
)

// seen is what a client sees of one POST: status, media type and the
// messages of the body.
type seen struct {
	Status   int
	Media    string
	Messages []map[string]any
}

var (
	requestIDText = regexp.MustCompile(`request id [0-9A-Za-z_-]+`)
	// a requestState is signed with each server's own key
	requestStateText = regexp.MustCompile(`"requestState":"[^"]*"`)
)

func masked(s string) string {
	return requestStateText.ReplaceAllString(requestIDText.ReplaceAllString(s, "request id R"), `"requestState":"S"`)
}

// answerOf reads resp; request ids (different on every request) are
// masked so that two answers can be compared.
func answerOf(t *testing.T, resp *http.Response) seen {
	t.Helper()
	media, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	a := seen{Status: resp.StatusCode, Media: media}
	body := readAll(resp)
	if media == "text/event-stream" {
		for line := range strings.Lines(body) {
			if data, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok {
				var m map[string]any
				must(t, json.Unmarshal([]byte(masked(data)), &m))
				a.Messages = append(a.Messages, m)
			}
		}
		return a
	}
	if strings.TrimSpace(body) != "" {
		var m map[string]any
		if err := json.Unmarshal([]byte(masked(body)), &m); err != nil {
			m = map[string]any{"text": body} // mcp-go answers some errors in plain text
		}
		if e, ok := m["error"].(map[string]any); ok {
			delete(e, "data") // transport errors carry the request id here
		}
		a.Messages = append(a.Messages, m)
	}
	return a
}

// TestCallersRequestHeaderUntouched: the transport no longer clones each
// request; what it changes for mcp-go (the session header of a session's
// request, a 2026-07-28 request's stray session header) it changes on a
// copy of its own, so middleware around it sees the request as it came.
func TestCallersRequestHeaderUntouched(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-token")
	for _, body := range []string{
		rpc(2, "tools/list", nil), // mcp-go's path
		rpc(3, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}}), // the direct path
	} {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+Path, strings.NewReader(body))
		req.RemoteAddr = "127.0.0.1:1234"
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(sessionHeader, sid)
		req.Header.Set(versionHeader, testProtocol)
		rec := httptest.NewRecorder()
		f.srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
		}
		if got := req.Header.Get(sessionHeader); got != sid {
			t.Fatalf("%s: the caller's request now names session %q, sent %q", body, got, sid)
		}
	}
}

// stallingEvents is an event log whose appends hang until their context
// ends (a database that stopped answering), or the test does.
type stallingEvents struct {
	*memEvents
	release chan struct{}
}

func (s stallingEvents) AppendEvent(ctx context.Context, _, _, _ string, _ json.RawMessage) (string, error) {
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-s.release:
		return "", errors.New("test over")
	}
}

// TestStalledEventLogDoesNotHoldTheCall: recording an event of a
// resumable stream is bounded, so a stalled event log delays a streamed
// call but does not hold it (or the handler) forever; the events are
// delivered without ids.
func TestStalledEventLogDoesNotHoldTheCall(t *testing.T) {
	defer func(d time.Duration) { storeEventTimeout = d }(storeEventTimeout)
	storeEventTimeout = 20 * time.Millisecond
	store := stallingEvents{&memEvents{memSessions: newMemSessions(), events: map[string][]memEvent{}}, make(chan struct{})}
	f := newFixture(t, func(o *Options) { o.Bus, o.Sessions = cluster.NewLoopback().Join(), store })
	t.Cleanup(func() { close(store.release) }) // before the server's own cleanup: nothing hangs past the test
	sid := f.initialize("alice-token")
	body := rpc(9, "tools/call", map[string]any{
		"name": "progress", "arguments": map[string]any{"tag": "s"}, "_meta": map[string]any{"progressToken": "p"},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(sessionHeader, sid)
	req.Header.Set(versionHeader, testProtocol)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	next := sseEvents(resp)
	var last map[string]any
	n := 0
	for id, m := next(); m != nil; id, m = next() {
		if id != "" {
			t.Fatalf("event %v has id %q though it could not be recorded", m, id)
		}
		last, n = m, n+1
	}
	if n != 5 || last["result"] == nil {
		t.Fatalf("%d events, last %v (ctx %v)", n, last, ctx.Err())
	}
}

func TestOneParams(t *testing.T) {
	for body, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`: true,
		`{"method":"tools/call"}`: true,
		`{"params":{"params":{"params":1}},"arguments":"params","x":["params",{"params":2}]}`: true,
		`{"id":"a\"params\"","params":{}}`:                                             true,
		`{"params":{},"params":{}}`:                                                    false,
		`{"params":{} , "PARAMS":{}}`:                                                  false,
		`{"Params":{},"x":{"y":[{},{}]},"pArAmS":null}`:                                false,
		`{"params":{},"par\u0061ms":{}}`:                                               false,
		"{\"params\":{},\"param\u017f\":{}}":                                           false,
		`{"id":1,"params":{"name":"a\\"},"method":"tools/call","params":{"name":"b"}}`: false,
		`{"x":"\\\\","params":{}}`:                                                     true,
	} {
		if got := oneParams([]byte(body)); got != want {
			t.Errorf("oneParams(%s) = %v, want %v", body, got, want)
		}
	}
}
