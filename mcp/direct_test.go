package mcp

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/cluster"
)

// answer is what a client sees of one POST: status, media type and the
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

// TestDirectPathAnswersLikeMCPGo sends the same tools/call requests to a
// server with the direct path and to one that hands everything to
// mcp-go's transport, and compares what the client gets: status, media
// type and every message, including the notifications of a streamed call
// and the answers to bad requests that the direct path leaves to mcp-go.
func TestDirectPathAnswersLikeMCPGo(t *testing.T) {
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
		{name: "string id", body: call("a-1", `{"name":"echo","arguments":{"text":"hi"}}`)},
		{name: "charset", contentType: "application/json; charset=utf-8", body: call(7, `{"name":"echo","arguments":{"text":"hi"}}`)},
		{name: "no arguments", body: call(7, `{"name":"echo"}`)},
		{name: "null arguments", body: call(7, `{"name":"echo","arguments":null}`)},
		{name: "wrong argument type", body: call(7, `{"name":"echo","arguments":{"text":5}}`)},
		{name: "unknown argument", body: call(7, `{"name":"echo","arguments":{"text":"a","x":1}}`)},
		{name: "array arguments", body: call(7, `{"name":"echo","arguments":[1]}`)},
		{name: "string arguments", body: call(7, `{"name":"echo","arguments":"x"}`)},
		{name: "unknown tool", body: call(7, `{"name":"nope","arguments":{}}`)},
		{name: "hidden tool", body: call(7, `{"name":"adminOnly","arguments":{"text":"x"}}`)},
		{name: "another user", token: "bob-token", body: call(7, `{"name":"progress","arguments":{"tag":"b"},"_meta":{"progressToken":1}}`)},
		{name: "scope missing", body: call(7, `{"name":"scoped","arguments":{}}`)},
		{name: "internal failure", body: call(7, `{"name":"fail","arguments":{}}`)},
		{name: "panic", body: call(7, `{"name":"boom","arguments":{}}`)},
		{name: "progress and log", body: call(7, `{"name":"progress","arguments":{"tag":"t"},"_meta":{"progressToken":"p"}}`)},
		{name: "progress without token", body: call(7, `{"name":"progress","arguments":{"tag":"t"}}`)},
		{name: "task param", body: call(7, `{"name":"echo","arguments":{"text":"hi"},"task":{"ttl":1000}}`)},
		{name: "jsonrpc 1.0", body: `{"jsonrpc":"1.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`},
		{name: "no jsonrpc", body: `{"id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`},
		{name: "null id", body: `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`},
		{name: "object id", body: `{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`},
		{name: "not json", body: `{"jsonrpc":"2.0","id":7,"method":"tools/call",`},
		{name: "text/plain", contentType: "text/plain", body: call(7, `{"name":"echo","arguments":{"text":"hi"}}`)},
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

// TestDirectPathEchoesIDExactly: the id of a request is echoed byte for
// byte, also where a float64 would change it (mcp-go decodes ids into
// interface values).
func TestDirectPathEchoesIDExactly(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-token")
	for _, id := range []string{`12345678901234567891`, `-3`, `"x\"y"`, `"ü"`} {
		body := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`
		resp := f.request(http.MethodPost, "alice-token", sid, body)
		var got struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		must(t, json.NewDecoder(resp.Body).Decode(&got))
		if string(got.ID) != id || !strings.Contains(string(got.Result), `"echo":"hi"`) {
			t.Fatalf("id %s: answered id %s, result %s", id, got.ID, got.Result)
		}
	}
}

// TestDirectPathStreamResumesOnlyForItsSession: with resumable shared
// sessions, the events of a streamed tools/call carry ids and are
// recorded; the client that lost its connection replays the rest of the
// stream (the answer included) on another replica with Last-Event-ID,
// and another user's session cannot.
func TestDirectPathStreamResumesOnlyForItsSession(t *testing.T) {
	group := cluster.NewLoopback()
	store := &memEvents{memSessions: newMemSessions(), events: map[string][]memEvent{}}
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	b := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	alice := a.initialize("alice-token")
	bob := a.initialize("bob-token")

	resp := a.request(http.MethodPost, "alice-token", alice, rpc(9, "tools/call", map[string]any{
		"name": "progress", "arguments": map[string]any{"tag": "r"}, "_meta": map[string]any{"progressToken": "p"},
	}))
	next := sseEvents(resp)
	var ids []string
	var last map[string]any
	for id, m := next(); m != nil; id, m = next() {
		if id == "" {
			t.Fatalf("event without an id: %v", m)
		}
		ids = append(ids, id)
		last = m
	}
	if len(ids) != 5 || last["result"] == nil { // three progress notices, a log message, the answer
		t.Fatalf("%d events, last %v", len(ids), last)
	}

	resume := func(token, sid string) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, b.url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(sessionHeader, sid)
		req.Header.Set(versionHeader, testProtocol)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", ids[0])
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if r := resume("bob-token", bob); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("bob resuming alice's call stream: %d", r.StatusCode)
	}
	r := resume("alice-token", alice)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("resume on B: %d %s", r.StatusCode, readAll(r))
	}
	next = sseEvents(r)
	var replayed []string
	for id, m := next(); m != nil; id, m = next() {
		replayed = append(replayed, id)
		last = m
	}
	if !reflect.DeepEqual(replayed, ids[1:]) || last["result"] == nil {
		t.Fatalf("replayed %v (last %v), want %v ending with the answer", replayed, last, ids[1:])
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
