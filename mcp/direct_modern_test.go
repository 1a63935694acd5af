package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
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

// TestDirectPath2026AnswersLikeMCPGo sends the same protocol 2026-07-28
// tools/call requests (and a few of an older session, as a control) to a
// server with the direct path and to one that hands everything to mcp-go's
// transport, and compares what the client gets: status, media type and
// every message, including the notifications of a streamed call, the
// input-required round trip, and the answers to requests that the direct
// path leaves to mcp-go. TestDirectPathAnswersLikeMCPGo covers the older
// protocols in depth.
func TestDirectPath2026AnswersLikeMCPGo(t *testing.T) {
	direct := newFixture(t)
	viaMCPGo := newFixture(t, func(o *Options) { o.noDirect = true })
	type req struct {
		name, token, contentType, body string
		modern                         bool              // protocol 2026-07-28: no session
		headers                        map[string]string // on top of the usual ones
	}
	// modern is a 2026-07-28 tools/call of tool with params, its _meta
	// carrying the protocol version, client info and caps (nil: no caps).
	modern := func(label, tool string, params map[string]any, caps any, headers map[string]string) req {
		meta := map[string]any{
			"io.modelcontextprotocol/protocolVersion": "2026-07-28",
			"io.modelcontextprotocol/clientInfo":      map[string]any{"name": "t", "version": "1"},
		}
		if caps != nil {
			meta["io.modelcontextprotocol/clientCapabilities"] = caps
		}
		p := map[string]any{"name": tool, "_meta": meta}
		for k, v := range params {
			if k == "_meta" {
				for mk, mv := range v.(map[string]any) {
					meta[mk] = mv
				}
				continue
			}
			p[k] = v
		}
		h := map[string]string{versionHeader: "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool}
		for k, v := range headers {
			if v == "" {
				delete(h, k)
			} else {
				h[k] = v
			}
		}
		return req{name: "2026-07-28 " + label, modern: true, headers: h, body: rpc(7, "tools/call", p)}
	}
	noCaps := map[string]any{}
	elicit := map[string]any{"elicitation": map[string]any{}}
	text := map[string]any{"arguments": map[string]any{"text": "hi"}}
	call := func(id any, params string) string {
		b, _ := json.Marshal(id)
		return `{"jsonrpc":"2.0","id":` + string(b) + `,"method":"tools/call","params":` + params + `}`
	}
	cases := []req{
		{name: "echo", body: call(7, `{"name":"echo","arguments":{"text":"hi"}}`)},
		{name: "progress and log", body: call(7, `{"name":"progress","arguments":{"tag":"t"},"_meta":{"progressToken":"p"}}`)},
		modern("echo", "echo", text, noCaps, nil),
		modern("unknown tool", "nope", text, noCaps, nil),
		modern("hidden tool", "adminOnly", text, noCaps, nil),
		modern("internal failure", "fail", nil, noCaps, nil),
		modern("bad arguments", "echo", map[string]any{"arguments": map[string]any{"text": 1}}, noCaps, nil),
		modern("progress, no log level", "progress", map[string]any{"arguments": map[string]any{"tag": "m"},
			"_meta": map[string]any{"progressToken": "p"}}, noCaps, nil),
		modern("progress and log", "progress", map[string]any{"arguments": map[string]any{"tag": "m"},
			"_meta": map[string]any{"progressToken": "p", "io.modelcontextprotocol/logLevel": "info"}}, noCaps, nil),
		modern("ask, elicitation declared", "ask", nil, elicit, nil),
		modern("ask, elicitation not declared", "ask", nil, noCaps, nil),
		modern("ask, bad request state", "ask", map[string]any{"requestState": "forged"}, elicit, nil),
		modern("no client capabilities", "echo", text, nil, nil),
		modern("no Mcp-Name", "echo", text, noCaps, map[string]string{"Mcp-Name": ""}),
		modern("wrong Mcp-Name", "echo", text, noCaps, map[string]string{"Mcp-Name": "fail"}),
		modern("wrong Mcp-Method", "echo", text, noCaps, map[string]string{"Mcp-Method": "tools/list"}),
		modern("header version differs", "echo", text, noCaps, map[string]string{versionHeader: "2025-11-25"}),
		modern("no version header", "echo", text, noCaps, map[string]string{versionHeader: ""}),
		modern("Last-Event-ID", "echo", text, noCaps, map[string]string{"Last-Event-ID": "1"}),
	}
	send := func(f *fixture, sid string, c req) seen {
		t.Helper()
		r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(c.body))
		must(t, err)
		r.Header.Set("Authorization", "Bearer "+c.token)
		r.Header.Set("Content-Type", c.contentType)
		r.Header.Set("Accept", "application/json, text/event-stream")
		if !c.modern {
			r.Header.Set(sessionHeader, sid)
			r.Header.Set(versionHeader, testProtocol)
		}
		for k, v := range c.headers {
			r.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(r)
		must(t, err)
		defer resp.Body.Close()
		return answerOf(t, resp)
	}
	sessions := map[*fixture]map[string]string{direct: {}, viaMCPGo: {}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.token == "" {
				c.token = "alice-token"
			}
			if c.contentType == "" {
				c.contentType = "application/json"
			}
			var got [2]seen
			for i, f := range []*fixture{direct, viaMCPGo} {
				sid, ok := sessions[f][c.token]
				if !ok && !c.modern {
					sid = f.initialize(c.token)
					sessions[f][c.token] = sid
				}
				got[i] = send(f, sid, c)
			}
			if !reflect.DeepEqual(got[0], got[1]) {
				t.Fatalf("direct path answered\n  %+v\nmcp-go answered\n  %+v", got[0], got[1])
			}
			if len(got[0].Messages) == 0 && got[0].Status == http.StatusOK {
				t.Fatalf("empty answer: %+v", got[0])
			}
		})
	}
}

// TestDirectPathTaskCreatedLikeMCPGo: a 2026-07-28 call that continues as
// a task answers with the same CreateTaskResult shape on both paths (the
// task id and times differ by nature), and the task runs to its question.
func TestDirectPathTaskCreatedLikeMCPGo(t *testing.T) {
	var shapes [2]string
	for i, noDirect := range []bool{false, true} {
		f := taskFixture(t, func(o *Options) { o.noDirect = noDirect })
		status, m := f.modernCall("alice-token", "tools/call", "longJob", map[string]any{"name": "longJob", "arguments": map[string]any{}}, taskCaps)
		res, _ := m["result"].(map[string]any)
		id, _ := res["taskId"].(string)
		if status != http.StatusOK || id == "" {
			t.Fatalf("noDirect=%v: %d %v", noDirect, status, m)
		}
		keys := slices.Sorted(maps.Keys(res))
		shapes[i] = fmt.Sprint(status, keys, res["resultType"], res["status"], m["id"])
		f.waitStatus("alice-token", id, "input_required")
	}
	if shapes[0] != shapes[1] {
		t.Fatalf("direct path: %s\nmcp-go:      %s", shapes[0], shapes[1])
	}
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
