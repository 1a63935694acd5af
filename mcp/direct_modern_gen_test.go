package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"

	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

// modernCaps are capabilities for the 2026-07-28 differential tests: a
// tool that runs only as a task, and tools whose input schema mirrors a
// parameter in a header (x-mcp-header), spelled as mcp-go reads it.
func modernCaps(t *testing.T, reg *capabilities.Registry) {
	t.Helper()
	text := func(context.Context, *capabilities.Call, json.RawMessage) (capabilities.Result, error) {
		return capabilities.TextResult("ran"), nil
	}
	must(t, reg.Register(
		capabilities.Capability{Name: "onlyTask", Domain: "test", Description: "Runs only as a task.", Annotations: readOnly,
			Task: capabilities.TaskRequired, Handler: text},
		capabilities.Capability{Name: "region", Domain: "test", Description: "Mirrors region in a header.", Annotations: readOnly,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`), Handler: text},
		capabilities.Capability{Name: "regionUpper", Domain: "test", Description: "Mirrors region in a header.", Annotations: readOnly,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","X-MCP-Header":"Region"}}}`), Handler: text},
		capabilities.Capability{Name: "regionEscaped", Domain: "test", Description: "Mirrors region in a header.", Annotations: readOnly,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x\u002dmcp-header":"Region"}}}`), Handler: text},
		capabilities.Capability{Name: "regionNested", Domain: "test", Description: "Mirrors a nested region in a header.", Annotations: readOnly,
			InputSchema: json.RawMessage(`{"type":"object","Properties":{"where":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}}}`), Handler: text},
	))
}

// Generated 2026-07-28 tools/call requests (_meta members of every shape,
// standard headers right, wrong, encoded, missing; tools that mirror
// parameters in headers, run only as tasks, ask, stream) are answered
// alike by the direct path and by mcp-go's transport.
func TestDirectPath2026AnswersLikeMCPGoOnGeneratedRequests(t *testing.T) {
	t.Run("tasks", func(t *testing.T) {
		generated2026(t, taskFixture(t), taskFixture(t, func(o *Options) { o.noDirect = true }), 5)
	})
	t.Run("no task store", func(t *testing.T) {
		generated2026(t, newFixture(t), newFixture(t, func(o *Options) { o.noDirect = true }), 6)
	})
}

func generated2026(t *testing.T, direct, viaMCPGo *fixture, seed uint64) {
	for _, f := range []*fixture{direct, viaMCPGo} {
		directCaps(t, f.reg)
		modernCaps(t, f.reg)
	}
	r := rand.New(rand.NewPCG(3, seed))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	tools := []string{"echo", "progress", "ask", "fail", "adminOnly", "nope", "rawArgs", "saysError", "streamThenLimit",
		"onlyTask", "longJob", "region", "regionUpper", "regionEscaped", "regionNested", "scoped", "boom"}
	type request struct {
		token   string
		body    string
		headers map[string]string
	}
	gen := func() request {
		tool := tools[r.IntN(len(tools))]
		// Half the requests pass every check of the transport, so that
		// the handlers' side (results, streams, rounds, tasks) is compared.
		valid := r.IntN(2) == 0
		var meta []string
		if valid {
			meta = append(meta, `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`,
				`"io.modelcontextprotocol/clientCapabilities":`+pick(`{}`, `{"elicitation":{}}`, `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`,
					`{"elicitation":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}`, `{"sampling":{},"roots":{}}`))
		} else if r.IntN(16) > 0 {
			meta = append(meta, `"io.modelcontextprotocol/protocolVersion":`+pick(`"2026-07-28"`, `"2026-07-28"`, `"2026-07-28"`, `"2026-07-28"`, `"2026-07-28"`, `"2026-07-28"`, `"2025-11-25"`, `"2099-01-01"`, `5`))
		}
		if !valid && r.IntN(6) > 0 {
			meta = append(meta, `"io.modelcontextprotocol/clientCapabilities":`+pick(`{}`, `{}`, `null`, `[]`, `5`, `{"elicitation":{}}`,
				`{"elicitation":5}`, `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`, `{"extensions":5}`, `{"sampling":{},"roots":{}}`))
		}
		if r.IntN(3) > 0 {
			meta = append(meta, `"io.modelcontextprotocol/clientInfo":`+pick(`{"name":"t","version":"1"}`, `5`, `null`, `{}`, `{"name":5}`))
		}
		if r.IntN(3) == 0 {
			meta = append(meta, `"io.modelcontextprotocol/logLevel":`+pick(`"info"`, `"debug"`, `"bogus"`, `5`, `null`))
		}
		if r.IntN(3) == 0 {
			meta = append(meta, `"progressToken":`+pick(`"p"`, `3`, `null`))
		}
		var ps []string
		name := tool
		if !valid && r.IntN(10) == 0 {
			name = pick("", "x")
		}
		ps = append(ps, `"name":`+strconvQuote(name))
		if r.IntN(5) > 0 {
			ps = append(ps, `"arguments":`+pick(`{}`, `{"text":"a"}`, `{"tag":"t"}`, `{"region":"eu"}`, `{"region":""}`, `{"region":null}`,
				`{"region":5}`, `{"where":{"region":"eu"}}`, `null`, `{"Region":"eu"}`))
		}
		if r.IntN(4) == 0 {
			// _meta twice: the same, or another that lacks or changes a member
			other := slices.Clone(meta)
			if len(other) > 0 && r.IntN(2) == 0 {
				k := r.IntN(len(other))
				other = slices.Delete(other, k, k+1)
				if r.IntN(2) == 0 {
					other = append(other, pick(`"io.modelcontextprotocol/protocolVersion":"2025-11-25"`, `"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`, `"progressToken":"q"`))
				}
			}
			ps = append(ps, pick(`"_meta"`, `"_META"`, `"_Meta"`)+`:{`+strings.Join(other, ",")+`}`)
		}
		ps = append(ps, pick(`"_meta"`, `"_meta"`, `"_meta"`, `"_META"`, `"\u005fmeta"`)+`:{`+strings.Join(meta, ",")+`}`)
		if r.IntN(8) == 0 {
			ps = append(ps, pick(`"requestState":"forged"`, `"inputResponses":{}`, `"inputResponses":{"k":{}}`))
		}
		r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
		h := map[string]string{}
		if r.IntN(8) > 0 {
			h[versionHeader] = pick("2026-07-28", "2026-07-28", "2026-07-28", "2026-07-28", "2026-07-28", "2026-07-28", "2025-11-25", "2099-01-01")
		}
		if r.IntN(8) > 0 {
			h["Mcp-Method"] = pick("tools/call", "tools/call", "tools/call", "tools/call", "tools/call", "tools/call", "tools/list", "TOOLS/CALL")
		}
		if r.IntN(8) > 0 {
			switch r.IntN(12) {
			case 0:
				h["Mcp-Name"] = "=?base64?" + base64.StdEncoding.EncodeToString([]byte(name)) + "?="
			case 1:
				h["Mcp-Name"] = pick("=?base64?!!?=", "other", "=?base64?"+base64.StdEncoding.EncodeToString([]byte("echo"))+"?=")
			default:
				h["Mcp-Name"] = name
			}
		}
		if r.IntN(3) == 0 {
			h["Mcp-Param-Region"] = pick("eu", "us", "", "=?base64?ZXU=?=", "=?base64?!?=")
		}
		if r.IntN(20) == 0 {
			h["Last-Event-ID"] = "1"
		}
		if valid {
			h[versionHeader], h["Mcp-Method"], h["Mcp-Name"] = "2026-07-28", "tools/call", name
			delete(h, "Last-Event-ID")
		}
		params := `"params":{` + strings.Join(ps, ",") + `}`
		switch r.IntN(10) {
		case 0: // params twice: an earlier one with other members
			params = pick(`"params":{"name":"fail"},`, `"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}},`,
				`"params":{"arguments":{"text":"x"},"task":{}},`, `"PARAMS":{"name":"adminOnly"},`) + params
		case 1: // and a later one
			params += pick(`,"params":{"name":"echo"}`, `,"Params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"name":"echo"}`)
		case 2:
			params = strings.Replace(params, `"params"`, pick(`"Params"`, `"PARAMS"`, `"\u0070arams"`), 1)
		}
		id := pick(`7`, `7`, `"7"`, `-1`, `1e2`, `"x"`)
		if r.IntN(8) == 0 { // a request that also carries a result or an error
			params += pick(`,"result":{}`, `,"result":null`, `,"result":5`, `,"error":{"code":1,"message":"x"}`, `,"Result":[]`)
		}
		return request{token: pick("alice-token", "alice-token", "alice-notes-token", "bob-token", "admin-token"), body: `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call",` + params + `}`, headers: h}
	}
	send := func(f *fixture, c request) seen {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(c.body))
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+c.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range c.headers {
			req.Header[http.CanonicalHeaderKey(k)] = []string{v}
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		defer resp.Body.Close()
		a := answerOf(t, resp)
		for _, m := range a.Messages {
			if res, ok := m["result"].(map[string]any); ok {
				delete(res, "taskId") // a task's id and times differ by nature
				delete(res, "createdAt")
				delete(res, "lastUpdatedAt")
				if task, ok := res["task"].(map[string]any); ok {
					delete(task, "taskId")
					delete(task, "createdAt")
					delete(task, "lastUpdatedAt")
				}
			}
		}
		return a
	}
	diffs := 0
	for i := range 2500 {
		c := gen()
		before := [2]int{len(direct.audit.Denials()), len(viaMCPGo.audit.Denials())}
		want := send(viaMCPGo, c)
		got := send(direct, c)
		d, m := len(direct.audit.Denials())-before[0], len(viaMCPGo.audit.Denials())-before[1]
		if d != m { // the same refusals audited
			diffs++
			t.Errorf("%d: %s %v: %d denials audited on the direct path, %d on mcp-go's", i, c.body, c.headers, d, m)
		}
		if !reflect.DeepEqual(got, want) {
			diffs++
			if diffs < 15 {
				t.Errorf("%d: %s %v\n direct %+v\n mcp-go %+v", i, c.body, c.headers, got, want)
			}
		}
	}
	if diffs > 0 {
		t.Errorf("%d requests answered differently", diffs)
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A tool whose schema mirrors a parameter in a header, however the
// keyword is spelled (case, escapes, a nested "Properties") as long as
// mcp-go reads it so, has its 2026-07-28 calls checked against the
// headers: the direct path used to find such tools by searching the
// schema's text for "x-mcp-header" and ran them unchecked.
func TestDirectPath2026ChecksHeaderParamsAsMCPGoReadsThem(t *testing.T) {
	f := newFixture(t)
	modernCaps(t, f.reg)
	for _, tool := range []string{"region", "regionUpper", "regionEscaped", "regionNested"} {
		args := map[string]any{"region": "eu"}
		if tool == "regionNested" {
			args = map[string]any{"where": map[string]any{"region": "eu"}}
		}
		body := rpc(7, "tools/call", map[string]any{"name": tool, "arguments": args, "_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		}})
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(body))
		must(t, err)
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(versionHeader, "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", tool)
		req.Header.Set("Mcp-Param-Region", "us") // the body says eu
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		got := readAll(resp)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(got, `"code":-32020`) || strings.Contains(got, "ran") {
			t.Errorf("%s: %d %s", tool, resp.StatusCode, got)
		}
	}
}

// A tool registered after the last sync of mcp-go's mirror (between the
// sync at the top of ServeHTTP and the direct path's decision) is not
// known to have no header parameters: its call goes to mcp-go, as it
// would without the direct path, rather than run with its headers
// unchecked.
func TestDirectPath2026LeavesUnsyncedToolsToMCPGo(t *testing.T) {
	f := newFixture(t)
	req := func(tool string) (*http.Request, *envelope) {
		body := rpc(7, "tools/call", map[string]any{"name": tool, "arguments": map[string]any{"region": "eu"}, "_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		}})
		r, err := http.NewRequest(http.MethodPost, f.url, strings.NewReader(body))
		must(t, err)
		r.Header.Set(versionHeader, "2026-07-28")
		r.Header.Set("Mcp-Method", "tools/call")
		r.Header.Set("Mcp-Name", tool)
		var msg envelope
		must(t, json.Unmarshal([]byte(body), &msg))
		return r, &msg
	}
	if !f.srv.modernDirect(req("echo")) {
		t.Fatal("a synced tool without header parameters should take the direct path")
	}
	modernCaps(t, f.reg) // registered; not synced until the next request
	if f.srv.modernDirect(req("region")) {
		t.Fatal("a tool registered since the last sync took the direct path")
	}
	f.srv.syncRegistry()
	if f.srv.modernDirect(req("region")) {
		t.Fatal("a tool with header parameters took the direct path")
	}
}

// The rounds of a 2026-07-28 input-required call, the state of one round
// replayed by another user, for another tool or other arguments, and
// answers to questions never asked, are answered alike by both paths.
func TestDirectPath2026RoundsLikeMCPGo(t *testing.T) {
	direct := newFixture(t)
	viaMCPGo := newFixture(t, func(o *Options) { o.noDirect = true })
	for _, f := range []*fixture{direct, viaMCPGo} {
		askTwice(f)
	}
	elicit := map[string]any{"elicitation": map[string]any{}}
	accept := func(v string) map[string]any {
		return map[string]any{"action": "accept", "content": map[string]any{"name": v, "v": v}}
	}
	// state is the requestState each server gave for the named step.
	states := map[*fixture]map[string]string{direct: {}, viaMCPGo: {}}
	type step struct {
		label, token, tool string
		args               map[string]any
		state              string // the step whose state is sent back
		answers            map[string]any
	}
	steps := []step{
		{label: "ask", token: "alice-token", tool: "ask"},
		{label: "ask answered", token: "alice-token", tool: "ask", state: "ask", answers: map[string]any{"elicitation/create-1": accept("x")}},
		{label: "ask answered by bob", token: "bob-token", tool: "ask", state: "ask", answers: map[string]any{"elicitation/create-1": accept("x")}},
		{label: "ask answered, other key", token: "alice-token", tool: "ask", state: "ask", answers: map[string]any{"other": accept("x")}},
		{label: "ask's state for askTwice", token: "alice-token", tool: "askTwice", args: map[string]any{"text": "a"}, state: "ask",
			answers: map[string]any{"first": accept("x")}},
		{label: "answers without state", token: "alice-token", tool: "askTwice", args: map[string]any{"text": "a"}, answers: map[string]any{"first": accept("x")}},
		{label: "askTwice", token: "alice-token", tool: "askTwice", args: map[string]any{"text": "a"}},
		{label: "askTwice first", token: "alice-token", tool: "askTwice", args: map[string]any{"text": "a"}, state: "askTwice",
			answers: map[string]any{"first": accept("1"), "second": accept("early")}},
		{label: "askTwice other arguments", token: "alice-token", tool: "askTwice", args: map[string]any{"text": "b"}, state: "askTwice first",
			answers: map[string]any{"second": accept("2")}},
		{label: "askTwice second", token: "alice-token", tool: "askTwice", args: map[string]any{"text": "a"}, state: "askTwice first",
			answers: map[string]any{"second": accept("2"), "first": accept("changed")}},
		{label: "askTwice second, no answers", token: "alice-token", tool: "askTwice", args: map[string]any{"text": "a"}, state: "askTwice first"},
		{label: "askTwice second, bad answer", token: "alice-token", tool: "askTwice", args: map[string]any{"text": "a"}, state: "askTwice first",
			answers: map[string]any{"second": map[string]any{"action": 5}}},
	}
	for _, s := range steps {
		t.Run(s.label, func(t *testing.T) {
			var got [2]seen
			for i, f := range []*fixture{direct, viaMCPGo} {
				p := map[string]any{"name": s.tool, "arguments": s.args}
				if s.args == nil {
					delete(p, "arguments")
				}
				if s.state != "" {
					p["requestState"] = states[f][s.state]
				}
				if s.answers != nil {
					p["inputResponses"] = s.answers
				}
				body := rpc(7, "tools/call", map[string]any{})
				var msg map[string]any
				must(t, json.Unmarshal([]byte(body), &msg))
				p["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": elicit}
				msg["params"] = p
				b, _ := json.Marshal(msg)
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(string(b)))
				must(t, err)
				req.Header.Set("Authorization", "Bearer "+s.token)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set(versionHeader, "2026-07-28")
				req.Header.Set("Mcp-Method", "tools/call")
				req.Header.Set("Mcp-Name", s.tool)
				resp, err := http.DefaultClient.Do(req)
				must(t, err)
				raw := readAll(resp)
				resp.Body.Close()
				var m map[string]any
				if json.Unmarshal([]byte(raw), &m) == nil {
					if res, ok := m["result"].(map[string]any); ok {
						if st, ok := res["requestState"].(string); ok {
							states[f][s.label] = st
						}
					}
				}
				resp.Body = io.NopCloser(strings.NewReader(raw))
				got[i] = answerOf(t, resp)
			}
			if !reflect.DeepEqual(got[0], got[1]) {
				t.Fatalf("direct path answered\n  %+v\nmcp-go answered\n  %+v", got[0], got[1])
			}

		})
	}
}

// Concurrent 2026-07-28 calls on the direct path, of several users, each
// get their own progress, log messages and answer, nothing of another's.
func TestDirectPath2026ConcurrentCallsStayApart(t *testing.T) {
	f := newFixture(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := []string{"alice", "bob", "admin"}[i%3]
			tag := fmt.Sprintf("t%d", i)
			body := rpc(i, "tools/call", map[string]any{"name": "progress", "arguments": map[string]any{"tag": tag}, "_meta": map[string]any{
				"progressToken": tag,
				"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
				"io.modelcontextprotocol/clientCapabilities": map[string]any{},
				"io.modelcontextprotocol/logLevel":           "info",
			}})
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			req.Header.Set("Authorization", "Bearer "+user+"-token")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set(versionHeader, "2026-07-28")
			req.Header.Set("Mcp-Method", "tools/call")
			req.Header.Set("Mcp-Name", "progress")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			got := readAll(resp)
			resp.Body.Close()
			mark := user + "/" + tag
			events := strings.Count(got, "data: ")
			if resp.StatusCode != http.StatusOK || events != 5 || strings.Count(got, mark+`"`) != 5 ||
				!strings.Contains(got, fmt.Sprintf(`"id":%d,`, i)) || !strings.Contains(got, `"progressToken":"`+tag+`"`) {
				errs <- fmt.Errorf("%s: %d %s", mark, resp.StatusCode, got)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A tools/call that also carries a result is, to mcp-go, a response to
// one of its own requests: it runs nothing and answers 202. The direct
// path ran the tool and answered it, for sessions and 2026-07-28 alike.
func TestDirectPathLeavesRequestsWithAResultToMCPGo(t *testing.T) {
	f := newFixture(t)
	var runs atomic.Int64
	must(t, f.reg.Register(capabilities.Capability{Name: "count", Domain: "test", Description: "Counts its runs.", Annotations: readOnly,
		Handler: func(context.Context, *capabilities.Call, json.RawMessage) (capabilities.Result, error) {
			runs.Add(1)
			return capabilities.TextResult("ran"), nil
		}}))
	sid := f.initialize("alice-token")
	for _, extra := range []string{`"result":{}`, `"Result":5`, `"result":[]`} {
		resp := f.rawRequest("alice-token", sid, "application/json", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"count"},`+extra+`}`)
		if body := readAll(resp); resp.StatusCode != http.StatusAccepted || strings.TrimSpace(body) != "" {
			t.Errorf("session, %s: %d %s", extra, resp.StatusCode, body)
		}
		body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"count","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
			`"io.modelcontextprotocol/clientCapabilities":{}}},` + extra + `}`
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(body))
		must(t, err)
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(versionHeader, "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "count")
		resp, err = http.DefaultClient.Do(req)
		must(t, err)
		if got := readAll(resp); resp.StatusCode != http.StatusAccepted || strings.TrimSpace(got) != "" {
			t.Errorf("2026-07-28, %s: %d %s", extra, resp.StatusCode, got)
		}
		resp.Body.Close()
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times", n)
	}
	// A null result is no result: the call runs.
	resp := f.rawRequest("alice-token", sid, "application/json", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"count"},"result":null}`)
	if body := readAll(resp); resp.StatusCode != http.StatusOK || !strings.Contains(body, "ran") || runs.Load() != 1 {
		t.Errorf("null result: %d %s", resp.StatusCode, body)
	}
}

// A capability whose x-mcp-header annotations mcp-go refuses (here on an
// object) made mcp-go's SetTools panic at every sync: every request of
// every user failed with 500 from then on. It is now not served (logged),
// answered like an unknown tool on both paths, and the rest works.
func TestRefusedHeaderAnnotationsDoNotFailTheServer(t *testing.T) {
	var answers [2]string
	for i, noDirect := range []bool{false, true} {
		f := newFixture(t, func(o *Options) { o.noDirect = noDirect })
		must(t, f.reg.Register(capabilities.Capability{Name: "badHeader", Domain: "test", Description: "Mirrors an object in a header.", Annotations: readOnly,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"object","x-mcp-header":"A"}}}`),
			Handler: func(context.Context, *capabilities.Call, json.RawMessage) (capabilities.Result, error) {
				return capabilities.TextResult("ran"), nil
			}}))
		sid := f.initialize("alice-token")
		if got := seenAnswer(t, f.rawRequest("alice-token", sid, "application/json", rpc(7, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "hi"}}))); !strings.Contains(got, "hi") {
			t.Fatalf("noDirect=%v: echo: %s", noDirect, got)
		}
		if got := seenAnswer(t, f.rawRequest("alice-token", sid, "application/json", rpc(8, "tools/list", map[string]any{}))); !strings.HasPrefix(got, "200") || strings.Contains(got, "badHeader") {
			t.Fatalf("noDirect=%v: tools/list: %s", noDirect, got)
		}
		answers[i] = seenAnswer(t, f.rawRequest("alice-token", sid, "application/json", rpc(9, "tools/call", map[string]any{"name": "badHeader", "arguments": map[string]any{}})))
		if !strings.Contains(f.logs.String(), "invalid x-mcp-header annotations") {
			t.Errorf("noDirect=%v: the refused capability was not logged", noDirect)
		}
	}
	if answers[0] != answers[1] || strings.Contains(answers[0], "ran") || !strings.Contains(answers[0], "not found") {
		t.Fatalf("direct path: %s\nmcp-go:      %s", answers[0], answers[1])
	}
}

// mcp-go judges a request's protocol era by the last _meta of any params
// (it decodes every params of the body into one struct): a body whose
// earlier params says 2026-07-28 and whose later params has no _meta is
// a 2026-07-28 request to it, refused here for its 2025-11-25 header. The
// transport read the era from the later params alone, bound the request
// to the session, and the direct path ran the tool.
func TestEraJudgedAsMCPGoJudgesIt(t *testing.T) {
	const modernMeta = `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`
	cases := []struct {
		label, body, want string
	}{
		{"later params without _meta",
			`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":` + modernMeta + `,"params":{"name":"echo","arguments":{"text":"hi"}}}`, `400 json {"error":{"code":-32020`},
		{"later params with a null _meta",
			`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":` + modernMeta + `,"params":{"name":"echo","arguments":{"text":"hi"},"_meta":null}}`, `200 json {"id":7,"jsonrpc":"2.0","result"`},
		{"later params with a 2025-11-25 _meta",
			`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":` + modernMeta + `,"params":{"name":"echo","arguments":{"text":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}`, `200 json {"id":7,"jsonrpc":"2.0","result"`},
	}
	direct := newFixture(t)
	viaMCPGo := newFixture(t, func(o *Options) { o.noDirect = true })
	sids := map[*fixture]string{direct: direct.initialize("alice-token"), viaMCPGo: viaMCPGo.initialize("alice-token")}
	for _, c := range cases {
		var got [2]string
		for i, f := range []*fixture{direct, viaMCPGo} {
			got[i] = seenAnswer(t, f.rawRequest("alice-token", sids[f], "application/json", c.body))
		}
		if got[0] != got[1] || !strings.HasPrefix(got[0], c.want) {
			t.Errorf("%s:\n direct %s\n mcp-go %s", c.label, got[0], got[1])
		}
	}
}

// On the 2026-07-28 direct path too, nothing is written once the call was
// answered (a handler's goroutine sending late gets an error, the process
// does not crash), and a client that closes its connection ends the
// handler's context.
func TestDirectPath2026LateWritesAndHangUps(t *testing.T) {
	f := newFixture(t)
	release := make(chan struct{})
	late := make(chan error, 3)
	stopped := make(chan error, 1)
	must(t, f.reg.Register(
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "lingering", Domain: "test", Description: "Leaves a goroutine behind.", Annotations: readOnly,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				if err := call.Progress(ctx, 1, 2, "first"); err != nil {
					return capabilities.Result{}, err
				}
				go func() {
					<-release
					late <- call.Progress(ctx, 2, 2, "late")
					late <- call.Log(ctx, capabilities.LogInfo, "test", "late")
					_, err := call.Elicit(ctx, capabilities.ElicitRequest{Message: "late?", Schema: json.RawMessage(`{"type":"object"}`)})
					late <- err
				}()
				return capabilities.TextResult("done"), nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "waits", Domain: "test", Description: "Waits for its client to go.", Annotations: readOnly,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				if err := call.Progress(ctx, 1, 2, "waiting"); err != nil {
					return capabilities.Result{}, err
				}
				select {
				case <-ctx.Done():
					stopped <- ctx.Err()
				case <-time.After(10 * time.Second):
					stopped <- nil
				}
				return capabilities.Result{}, ctx.Err()
			},
		}),
	))
	call := func(ctx context.Context, tool string) *http.Response {
		body := rpc(3, "tools/call", map[string]any{"name": tool, "_meta": map[string]any{
			"progressToken": "p",
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{}},
			"io.modelcontextprotocol/logLevel":           "debug",
		}})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, strings.NewReader(body))
		must(t, err)
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(versionHeader, "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", tool)
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		return resp
	}
	resp := call(t.Context(), "lingering")
	msgs := messages(t, resp)
	if len(msgs) != 2 || msgs[0]["method"] != "notifications/progress" || msgs[1]["result"] == nil {
		t.Fatalf("stream = %v", msgs)
	}
	close(release)
	for range 3 {
		if err := <-late; err == nil {
			t.Error("a write after the answer was accepted")
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	resp = call(ctx, "waits")
	line := make([]byte, 64)
	if _, err := resp.Body.Read(line); err != nil { // the first event: the handler runs
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case err := <-stopped:
		if err == nil {
			t.Fatal("the handler's context did not end with the connection")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler still runs after its client hung up")
	}
}

// A 2026-07-28 notifications/cancelled cancels only its caller's requests
// with that id. mcp-go keys sessionless requests by id alone: handed the
// notification as it came, bob's cancelled alice's request with the same
// id (here one mcp-go serves: the tool mirrors a header). Another
// credential of the same user does not either.
func TestCancelled2026OnlyCancelsTheCallersOwn(t *testing.T) {
	f := newFixture(t)
	started := make(chan struct{}, 1)
	ended := make(chan error, 1)
	slow := func(ctx context.Context, _ *capabilities.Call, _ json.RawMessage) (capabilities.Result, error) {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			ended <- ctx.Err()
		case <-time.After(10 * time.Second):
			ended <- nil
		}
		return capabilities.TextResult("x"), nil
	}
	must(t, f.reg.Register(
		capabilities.Capability{Name: "slowRegion", Domain: "test", Description: "Waits; mirrors region in a header.", Annotations: readOnly,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`), Handler: slow},
		capabilities.Capability{Name: "slow", Domain: "test", Description: "Waits.", Annotations: readOnly, Handler: slow},
	))
	post := func(ctx context.Context, token, method, name string, params map[string]any) (*http.Response, error) {
		params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": map[string]any{}}
		msg := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
		if method != "notifications/cancelled" {
			msg["id"] = 7
		}
		b, _ := json.Marshal(msg)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, strings.NewReader(string(b)))
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(versionHeader, "2026-07-28")
		req.Header.Set("Mcp-Method", method)
		if name != "" {
			req.Header.Set("Mcp-Name", name)
		}
		return http.DefaultClient.Do(req)
	}
	for _, tool := range []string{"slowRegion", "slow"} {
		go func() {
			if resp, err := post(t.Context(), "alice-token", "tools/call", tool, map[string]any{"name": tool, "arguments": map[string]any{}}); err == nil {
				resp.Body.Close()
			}
		}()
		<-started
		// Neither another user nor another credential of alice's (another
		// client's grant) ends the call.
		for _, other := range []string{"bob-token", "alice-grant2-token"} {
			resp, err := post(t.Context(), other, "notifications/cancelled", "", map[string]any{"requestId": 7})
			must(t, err)
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("%s: %s's notification: %d %s", tool, other, resp.StatusCode, readAll(resp))
			}
			resp.Body.Close()
			select {
			case err := <-ended:
				t.Fatalf("%s: %s's notifications/cancelled ended alice's call: %v", tool, other, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
		resp, err := post(t.Context(), "alice-token", "notifications/cancelled", "", map[string]any{"requestId": 7})
		must(t, err)
		resp.Body.Close()
		select {
		case err := <-ended:
			if err == nil {
				t.Fatalf("%s: alice's call was not cancelled", tool)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: alice's notifications/cancelled did not end her call", tool)
		}
	}
}
