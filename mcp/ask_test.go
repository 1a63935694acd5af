package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// modernCall sends one protocol 2026-07-28 request and returns the HTTP
// status and the decoded response message.
func (f *fixture) modernCall(token, method, name string, params map[string]any, caps map[string]any) (int, map[string]any) {
	f.t.Helper()
	status, _, m := f.modernCallHeader(token, method, name, params, caps)
	return status, m
}

// modernCallHeader is modernCall that also returns the answer's header.
func (f *fixture) modernCallHeader(token, method, name string, params map[string]any, caps map[string]any) (int, http.Header, map[string]any) {
	f.t.Helper()
	p := map[string]any{"_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "t", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}}
	for k, v := range params {
		p[k] = v
	}
	req, _ := http.NewRequestWithContext(f.t.Context(), http.MethodPost, f.url, strings.NewReader(rpc(7, method, p)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(versionHeader, "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	must(f.t, err)
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header, result(f.t, resp)
}

// askTwice is a capability asking two questions in two rounds, then
// reporting both answers.
func askTwice(f *fixture) {
	must(f.t, f.reg.Register(capabilities.Define(capabilities.Spec[echoIn, capabilities.Result]{
		Name: "askTwice", Domain: "test", Description: "Asks two questions.", Annotations: readOnly,
		Handler: func(ctx context.Context, call *capabilities.Call, in echoIn) (capabilities.Result, error) {
			q := func(key string) capabilities.Question {
				return capabilities.Question{Key: key, Elicit: &capabilities.ElicitRequest{Message: key + "?",
					Schema: json.RawMessage(`{"type":"object","properties":{"v":{"type":"string"}}}`)}}
			}
			a, err := call.Ask(ctx, q("first"))
			if err != nil {
				return capabilities.Result{}, err
			}
			b, err := call.Ask(ctx, q("second"))
			if err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult(fmt.Sprintf("%s:%v/%v", in.Text, a[0].Elicit.Content["v"], b[0].Elicit.Content["v"])), nil
		},
	})))
}

func accept(v string) map[string]any {
	return map[string]any{"action": "accept", "content": map[string]any{"v": v}}
}

var elicitCaps = map[string]any{"elicitation": map[string]any{}}

// TestRequestStateCarriesEarlierAnswers: the answers of earlier rounds ride
// in the signed requestState, so the last round needs only its own.
func TestRequestStateCarriesEarlierAnswers(t *testing.T) {
	f := newFixture(t)
	askTwice(f)
	args := map[string]any{"text": "x"}
	_, m := f.modernCall("alice-token", "tools/call", "askTwice", map[string]any{"name": "askTwice", "arguments": args}, elicitCaps)
	r1, _ := m["result"].(map[string]any)
	if r1["resultType"] != "input_required" || r1["requestState"] == "" || r1["inputRequests"].(map[string]any)["first"] == nil {
		t.Fatalf("round 1 = %v", m)
	}
	_, m = f.modernCall("alice-token", "tools/call", "askTwice", map[string]any{"name": "askTwice", "arguments": args,
		"inputResponses": map[string]any{"first": accept("one")}, "requestState": r1["requestState"]}, elicitCaps)
	r2, _ := m["result"].(map[string]any)
	if r2["resultType"] != "input_required" || r2["inputRequests"].(map[string]any)["second"] == nil {
		t.Fatalf("round 2 = %v", m)
	}
	// The client tries to change its first answer: the signed one wins.
	_, m = f.modernCall("alice-token", "tools/call", "askTwice", map[string]any{"name": "askTwice", "arguments": args,
		"inputResponses": map[string]any{"first": accept("forged"), "second": accept("two")}, "requestState": r2["requestState"]}, elicitCaps)
	if got := fmt.Sprint(m["result"]); !strings.Contains(got, "x:one/two") {
		t.Fatalf("round 3 = %v", m)
	}
}

// TestRequestStateRefused: a tampered state, another user's state, a state
// for another call and an expired state are all refused with -32602.
func TestRequestStateRefused(t *testing.T) {
	f := newFixture(t)
	askTwice(f)
	args := map[string]any{"text": "x"}
	_, m := f.modernCall("alice-token", "tools/call", "askTwice", map[string]any{"name": "askTwice", "arguments": args}, elicitCaps)
	state, _ := m["result"].(map[string]any)["requestState"].(string)
	_, m = f.modernCall("alice-token", "tools/call", "askTwice", map[string]any{"name": "askTwice", "arguments": args,
		"inputResponses": map[string]any{"first": accept("one")}, "requestState": state}, elicitCaps)
	state2, _ := m["result"].(map[string]any)["requestState"].(string)
	if state2 == "" {
		t.Fatalf("round 2 = %v", m)
	}
	payload, sig, _ := strings.Cut(state2, ".")
	raw, _ := base64Decode(payload)
	forged := base64Encode([]byte(strings.Replace(string(raw), `"one"`, `"evil"`, 1))) + "." + sig

	cases := []struct {
		name, token, state string
		args               map[string]any
		advance            time.Duration
	}{
		{"tampered", "alice-token", state2 + "x", args, 0},
		{"re-signed payload", "alice-token", forged, args, 0},
		{"another user's", "bob-token", state2, args, 0},
		{"another grant's", "alice-grant2-token", state2, args, 0},
		{"other arguments", "alice-token", state2, map[string]any{"text": "y"}, 0},
		{"expired", "alice-token", state2, args, requestStateTTL + time.Minute},
	}
	for _, c := range cases {
		f.clock.Advance(c.advance)
		status, m := f.modernCall(c.token, "tools/call", "askTwice", map[string]any{"name": "askTwice", "arguments": c.args,
			"inputResponses": map[string]any{"second": accept("two")}, "requestState": c.state}, elicitCaps)
		e, _ := m["error"].(map[string]any)
		if status != http.StatusBadRequest || e == nil || e["code"] != float64(-32602) || m["id"] != float64(7) {
			t.Errorf("%s state: %d %v, want 400 and error -32602 with the request's id", c.name, status, m)
		}
		if strings.Contains(fmt.Sprint(m), "x:one") {
			t.Errorf("%s state completed the call", c.name)
		}
	}
}

// TestRequestStateSpentOnce: a requestState is good for one retry; sent
// again (a replay by whoever saw it), it is refused and the call does not
// run again with its answers.
func TestRequestStateSpentOnce(t *testing.T) {
	f := newFixture(t)
	askTwice(f)
	args := map[string]any{"text": "x"}
	_, m := f.modernCall("alice-token", "tools/call", "askTwice", map[string]any{"name": "askTwice", "arguments": args}, elicitCaps)
	state, _ := m["result"].(map[string]any)["requestState"].(string)
	retry := map[string]any{"name": "askTwice", "arguments": args, "inputResponses": map[string]any{"first": accept("one")}, "requestState": state}
	_, m = f.modernCall("alice-token", "tools/call", "askTwice", retry, elicitCaps)
	if r, _ := m["result"].(map[string]any); r["resultType"] != "input_required" {
		t.Fatalf("first use: %v", m)
	}
	status, m := f.modernCall("alice-token", "tools/call", "askTwice", retry, elicitCaps)
	if e, _ := m["error"].(map[string]any); status != http.StatusBadRequest || e == nil || e["code"] != float64(-32602) {
		t.Fatalf("second use of one state: %d %v, want 400 and -32602", status, m)
	}
}

// TestMissingClientCapability: asking what a 2026-07-28 client did not
// declare is error -32021 naming the capability, with HTTP 400; a handler
// can check first with CanAsk.
func TestMissingClientCapability(t *testing.T) {
	f := newFixture(t)
	status, m := f.modernCall("alice-token", "tools/call", "ask", map[string]any{"name": "ask", "arguments": map[string]any{}}, map[string]any{})
	e, _ := m["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	req, _ := data["requiredCapabilities"].(map[string]any)
	if status != http.StatusBadRequest || e["code"] != float64(-32021) || req["elicitation"] == nil || m["id"] != float64(7) {
		t.Fatalf("ask without elicitation: %d %v", status, m)
	}
}

// TestUnsupportedVersionError names the versions served, echoes the one
// asked for, and keeps the request's id.
func TestUnsupportedVersionError(t *testing.T) {
	f := newFixture(t)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(rpc(301, "tools/list", map[string]any{})))
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(versionHeader, "v999")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	m := result(t, resp)
	e, _ := m["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if resp.StatusCode != http.StatusBadRequest || m["id"] != float64(301) || data["requested"] != "v999" ||
		fmt.Sprint(data["supported"]) != fmt.Sprint(ProtocolVersions) {
		t.Fatalf("unsupported version: %d %v", resp.StatusCode, m)
	}
}

func base64Decode(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }
func base64Encode(b []byte) string          { return base64.RawURLEncoding.EncodeToString(b) }

type confirmIn struct {
	ID int64 `json:"id"`
}

// TestRequestStateBoundToExactArguments: a state is bound to the exact
// arguments: numbers that differ only beyond float64 precision, and
// arguments that are not JSON, are other arguments.
func TestRequestStateBoundToExactArguments(t *testing.T) {
	f := newFixture(t)
	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[confirmIn, capabilities.Result]{
		Name: "confirmDelete", Domain: "test", Description: "Deletes after a confirmation.", Annotations: writes,
		Handler: func(ctx context.Context, call *capabilities.Call, in confirmIn) (capabilities.Result, error) {
			if _, err := call.Ask(ctx, capabilities.Question{Key: "sure", Elicit: &capabilities.ElicitRequest{Message: fmt.Sprintf("delete %d?", in.ID)}}); err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult(fmt.Sprintf("deleted %d", in.ID)), nil
		},
	})))
	call := func(id int64, extra map[string]any) (int, map[string]any) {
		p := map[string]any{"name": "confirmDelete", "arguments": map[string]any{"id": id}}
		for k, v := range extra {
			p[k] = v
		}
		return f.modernCall("alice-token", "tools/call", "confirmDelete", p, elicitCaps)
	}
	const confirmed, other = int64(9007199254740992), int64(9007199254740993)
	_, m := call(confirmed, nil)
	state, _ := m["result"].(map[string]any)["requestState"].(string)
	if state == "" {
		t.Fatalf("round 1 = %v", m)
	}
	status, m := call(other, map[string]any{"requestState": state, "inputResponses": map[string]any{"sure": accept("y")}})
	if e, _ := m["error"].(map[string]any); status != http.StatusBadRequest || e["code"] != float64(-32602) {
		t.Fatalf("a state for id %d used for id %d: %d %v, want -32602", confirmed, other, status, m)
	}
	if b1, b2 := binding("tools/call", "x", []byte(`{"a":`)), binding("tools/call", "x", nil); b1 == b2 {
		t.Fatal("malformed arguments share the binding of no arguments")
	}
}

// TestEveryRoundPassesTheChokePoint: each round of an input-required call
// is a call: after the caller lost the role between rounds, the next round
// is refused (answered like an unknown tool) and the denial is audited,
// whatever the signed state carries.
func TestEveryRoundPassesTheChokePoint(t *testing.T) {
	f := newFixture(t)
	var ran int
	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "adminAsk", Domain: "test", Description: "Admins only; asks.", Annotations: writes,
		Requires: capabilities.Requirement{Role: capabilities.RoleAdmin},
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			ran++
			if _, err := call.Ask(ctx, capabilities.Question{Key: "sure", Elicit: &capabilities.ElicitRequest{Message: "sure?"}}); err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult("done"), nil
		},
	})))
	p := map[string]any{"name": "adminAsk", "arguments": map[string]any{}}
	_, m := f.modernCall("admin-token", "tools/call", "adminAsk", p, elicitCaps)
	state, _ := m["result"].(map[string]any)["requestState"].(string)
	if state == "" {
		t.Fatalf("round 1 = %v", m)
	}
	f.loader.Set(capabilitiestest.User("admin"))
	p["requestState"], p["inputResponses"] = state, map[string]any{"sure": accept("y")}
	_, m = f.modernCall("admin-token", "tools/call", "adminAsk", p, elicitCaps)
	if strings.Contains(fmt.Sprint(m), "done") || ran != 1 {
		t.Fatalf("round 2 after the role was removed ran the handler: %v", m)
	}
	var denied bool
	for _, d := range f.audit.Denials() {
		denied = denied || d.Name == "adminAsk" && d.Reason == capabilities.ReasonRole
	}
	if !denied {
		t.Fatalf("round 2's refusal was not audited: %v", f.audit.Denials())
	}
}

// TestAnswersOnlyToQuestionsAsked: a client cannot skip a question by
// answering it before it is asked (on the first call, or alongside the
// answer to an earlier question); answers to questions not asked are
// ignored and the question is put.
func TestAnswersOnlyToQuestionsAsked(t *testing.T) {
	f := newFixture(t)
	askTwice(f)
	args := map[string]any{"text": "x"}
	both := map[string]any{"first": accept("one"), "second": accept("two")}
	_, m := f.modernCall("alice-token", "tools/call", "askTwice", map[string]any{"name": "askTwice", "arguments": args, "inputResponses": both}, elicitCaps)
	r1, _ := m["result"].(map[string]any)
	if r1["resultType"] != "input_required" || r1["inputRequests"].(map[string]any)["first"] == nil {
		t.Fatalf("first call answering ahead = %v, want the first question put", m)
	}
	_, m = f.modernCall("alice-token", "tools/call", "askTwice", map[string]any{"name": "askTwice", "arguments": args,
		"inputResponses": both, "requestState": r1["requestState"]}, elicitCaps)
	r2, _ := m["result"].(map[string]any)
	if r2["resultType"] != "input_required" || r2["inputRequests"].(map[string]any)["second"] == nil {
		t.Fatalf("round 2 answering the second question ahead = %v, want the second question put", m)
	}
	_, m = f.modernCall("alice-token", "tools/call", "askTwice", map[string]any{"name": "askTwice", "arguments": args,
		"inputResponses": map[string]any{"second": accept("two")}, "requestState": r2["requestState"]}, elicitCaps)
	if got := fmt.Sprint(m["result"]); !strings.Contains(got, "x:one/two") {
		t.Fatalf("round 3 = %v", m)
	}
}

// TestSignedAnswerBoundToTheQuestion: an answer carried in the state
// answers only the question it was given to: when the retry finds that
// the handler now asks something else under the same key ("delete B?"
// where "delete A?" was confirmed), the question is put again.
func TestSignedAnswerBoundToTheQuestion(t *testing.T) {
	f := newFixture(t)
	var target atomic.Value
	target.Store("A")
	var deleted []string
	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "deleteOldest", Domain: "test", Description: "Deletes the oldest file after a confirmation and a reason.", Annotations: writes,
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			name := target.Load().(string)
			if _, err := call.Ask(ctx, capabilities.Question{Key: "sure", Elicit: &capabilities.ElicitRequest{Message: "delete " + name + "?"}}); err != nil {
				return capabilities.Result{}, err
			}
			if _, err := call.Ask(ctx, capabilities.Question{Key: "reason", Elicit: &capabilities.ElicitRequest{Message: "why?"}}); err != nil {
				return capabilities.Result{}, err
			}
			deleted = append(deleted, name)
			return capabilities.TextResult("deleted " + name), nil
		},
	})))
	p := func(extra map[string]any) map[string]any {
		out := map[string]any{"name": "deleteOldest", "arguments": map[string]any{}}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	_, m := f.modernCall("alice-token", "tools/call", "deleteOldest", p(nil), elicitCaps)
	s1, _ := m["result"].(map[string]any)["requestState"].(string)
	_, m = f.modernCall("alice-token", "tools/call", "deleteOldest", p(map[string]any{"requestState": s1, "inputResponses": map[string]any{"sure": accept("y")}}), elicitCaps)
	r2, _ := m["result"].(map[string]any)
	if r2["inputRequests"].(map[string]any)["reason"] == nil {
		t.Fatalf("round 2 = %v", m)
	}
	target.Store("B") // the oldest file is another one now
	_, m = f.modernCall("alice-token", "tools/call", "deleteOldest", p(map[string]any{"requestState": r2["requestState"], "inputResponses": map[string]any{"reason": accept("old")}}), elicitCaps)
	r3, _ := m["result"].(map[string]any)
	irs, _ := r3["inputRequests"].(map[string]any)
	q, _ := irs["sure"].(map[string]any)
	if len(deleted) != 0 || r3["resultType"] != "input_required" || !strings.Contains(fmt.Sprint(q), "delete B?") {
		t.Fatalf("round 3 after the target changed = %v (deleted %v), want \"delete B?\" put", m, deleted)
	}
}
