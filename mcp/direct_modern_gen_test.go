package mcp

import (
	"context"
	"encoding/json"
	"fmt"

	"net/http"
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
func modernCaps(t testing.TB, reg *capabilities.Registry) {
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
		status, got := regionCall(t, f, tool, args, "us") // the body says eu
		if status != http.StatusBadRequest || !strings.Contains(got, `"code":-32020`) || strings.Contains(got, "ran") {
			t.Errorf("%s: %d %s", tool, status, got)
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
	f := newFixture(t)
	must(t, f.reg.Register(capabilities.Capability{Name: "badHeader", Domain: "test", Description: "Mirrors an object in a header.", Annotations: readOnly,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"object","x-mcp-header":"A"}}}`),
		Handler: func(context.Context, *capabilities.Call, json.RawMessage) (capabilities.Result, error) {
			return capabilities.TextResult("ran"), nil
		}}))
	sid := f.initialize("alice-token")
	if got := seenAnswer(t, f.rawRequest("alice-token", sid, "application/json", rpc(7, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "hi"}}))); !strings.Contains(got, "hi") {
		t.Fatalf("echo: %s", got)
	}
	if got := seenAnswer(t, f.rawRequest("alice-token", sid, "application/json", rpc(8, "tools/list", map[string]any{}))); !strings.HasPrefix(got, "200") || strings.Contains(got, "badHeader") {
		t.Fatalf("tools/list: %s", got)
	}
	bad := seenAnswer(t, f.rawRequest("alice-token", sid, "application/json", rpc(9, "tools/call", map[string]any{"name": "badHeader", "arguments": map[string]any{}})))
	unknown := seenAnswer(t, f.rawRequest("alice-token", sid, "application/json", rpc(9, "tools/call", map[string]any{"name": "noSuchTool", "arguments": map[string]any{}})))
	if !strings.Contains(f.logs.String(), "invalid x-mcp-header annotations") {
		t.Errorf("the refused capability was not logged")
	}
	if strings.Contains(bad, "ran") || strings.ReplaceAll(bad, "badHeader", "noSuchTool") != unknown {
		t.Fatalf("not answered like an unknown tool:\n%s\n%s", bad, unknown)
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

// A tool hidden from the caller answers a 2026-07-28 call like an unknown
// one even when its header parameters do not match the body: the check
// of its x-mcp-header parameters would otherwise tell it exists (a
// header mismatch, where an unknown name is "not found"). One denial is
// audited either way.
func TestHiddenHeaderToolAnswersLikeUnknown(t *testing.T) {
	f := newFixture(t)
	must(t, f.reg.Register(capabilities.Capability{Name: "adminRegion", Domain: "test", Description: "Admins only; mirrors region.",
		Annotations: readOnly, Requires: capabilities.Requirement{Role: capabilities.RoleAdmin},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`),
		Handler: func(context.Context, *capabilities.Call, json.RawMessage) (capabilities.Result, error) {
			return capabilities.TextResult("ran"), nil
		}}))
	call := func(tool string) (string, int) {
		before := len(f.audit.Denials())
		status, got := regionCall(t, f, tool, map[string]any{"region": "eu"}, "us") // the body says eu
		return fmt.Sprint(status, " ", got), len(f.audit.Denials()) - before
	}
	hidden, hiddenDenials := call("adminRegion")
	unknown, unknownDenials := call("noSuchRegion")
	if strings.ReplaceAll(hidden, "adminRegion", "noSuchRegion") != unknown {
		t.Fatalf("a hidden tool with header parameters is told apart from an unknown one:\nhidden  %s\nunknown %s", hidden, unknown)
	}
	if hiddenDenials != 1 || unknownDenials != 1 {
		t.Fatalf("denials audited: hidden %d, unknown %d; want 1 each", hiddenDenials, unknownDenials)
	}
}

// regionCall sends alice's 2026-07-28 tools/call of tool with args, its
// standard headers right and Mcp-Param-Region set to region, and returns
// the status and body of the answer.
func regionCall(t *testing.T, f *fixture, tool string, args map[string]any, region string) (int, string) {
	t.Helper()
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
	req.Header.Set("Mcp-Param-Region", region)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	return resp.StatusCode, readAll(resp)
}
