package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/cluster"
)

// Attacker review of the transport's own GET stream, DELETE and cold path
// (#27): what another credential can do to a session's stream, and what
// concurrent GETs and DELETEs leave behind.

// openStream opens a session's GET stream and fails unless it is 200.
func openStream(t *testing.T, f *fixture, token, sid string) func() map[string]any {
	t.Helper()
	resp := f.request(http.MethodGet, token, sid, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET as %s: %d %s", token, resp.StatusCode, readAll(resp))
	}
	return sseReader(resp)
}

// nextWithin reads the next message of a stream, or fails after d.
func nextWithin(t *testing.T, next func() map[string]any, d time.Duration) map[string]any {
	t.Helper()
	ch := make(chan map[string]any, 1)
	go func() { ch <- next() }()
	select {
	case m := <-ch:
		return m
	case <-time.After(d):
		t.Fatalf("no message within %s", d)
		return nil
	}
}

// TestReview2OtherCredentialsCannotTakeTheStream: no credential but the
// session's own user's opens, resumes, ends or takes over its listening
// stream; the owner's stream keeps carrying the session's notifications.
func TestReview2OtherCredentialsCannotTakeTheStream(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-token")
	next := openStream(t, f, "alice-token", sid)
	for _, tok := range []string{"bob-token", "expired-token", "suspended-token", "foreign-token", "ghost-token", "nonsense"} {
		for _, m := range []string{http.MethodGet, http.MethodDelete} {
			resp := f.request(m, tok, sid, "")
			body := readAll(resp)
			if resp.StatusCode == http.StatusOK || strings.Contains(body, "event:") {
				t.Fatalf("%s %s on alice's session: %d %s", m, tok, resp.StatusCode, body)
			}
		}
		// Resumption names the session too.
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.url, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set(sessionHeader, sid)
		req.Header.Set(versionHeader, testProtocol)
		req.Header.Set("Last-Event-ID", "e1")
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("resume as %s: 200", tok)
		}
		resp.Body.Close()
	}
	must(t, f.srv.notifySession(sid, "test/still-mine", nil))
	if m := nextWithin(t, next, 5*time.Second); m["method"] != "test/still-mine" {
		t.Fatalf("alice's stream carried %v, want her notification", m)
	}
	// A notification of bob's own session never reaches alice's stream,
	// nor the other way round.
	bob := f.initialize("bob-token")
	nextBob := openStream(t, f, "bob-token", bob)
	must(t, f.srv.notifySession(bob, "test/bob", nil))
	must(t, f.srv.notifySession(sid, "test/alice", nil))
	if m := nextWithin(t, nextBob, 5*time.Second); m["method"] != "test/bob" {
		t.Fatalf("bob's stream carried %v", m)
	}
	if m := nextWithin(t, next, 5*time.Second); m["method"] != "test/alice" {
		t.Fatalf("alice's stream carried %v", m)
	}
}

// TestReview2ConcurrentGETsAndDelete: GETs racing each other and a DELETE
// leave no stream open, no listening stream behind and nothing that
// accepts the session's notifications.
func TestReview2ConcurrentGETsAndDelete(t *testing.T) {
	f := newFixture(t)
	for round := range 10 {
		sid := f.initialize("alice-token")
		var wg sync.WaitGroup
		bodies := make(chan *http.Response, 4)
		for range 3 {
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.url, nil)
				req.Header.Set("Authorization", "Bearer alice-token")
				req.Header.Set(sessionHeader, sid)
				req.Header.Set(versionHeader, testProtocol)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					bodies <- resp
				}
			})
		}
		wg.Go(func() {
			if resp := f.request(http.MethodDelete, "alice-token", sid, ""); resp.StatusCode != http.StatusOK {
				t.Errorf("round %d: DELETE %d", round, resp.StatusCode)
			}
		})
		wg.Wait()
		close(bodies)
		for resp := range bodies {
			done := make(chan struct{})
			go func() { readAll(resp); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: a GET stream outlived its session's DELETE", round)
			}
			resp.Body.Close()
		}
		if err := f.srv.notifySession(sid, "test/after", nil); err == nil {
			t.Fatalf("round %d: an ended session still takes notifications", round)
		}
		if sessions, streams := f.srv.sessions.counts(); sessions != 0 || streams != 0 {
			t.Fatalf("round %d: %d sessions, %d streams left", round, sessions, streams)
		}
	}
}

// TestReview2ColdRequestOutlivingItsSession: a cold request whose session
// is deleted while its handler runs answers on its own stream, and nothing
// of it reaches the session's (ended) listening stream or another session.
func TestReview2ColdRequestOutlivingItsSession(t *testing.T) {
	f := newFixture(t)
	f.gate = newBarrier(2)
	sid := f.initialize("alice-token")
	next := openStream(t, f, "alice-token", sid)
	other := f.initialize("alice-token")
	nextOther := openStream(t, f, "alice-token", other)
	type answer struct {
		status int
		msgs   []map[string]any
	}
	out := make(chan answer, 1)
	go func() {
		// A task member keeps a legacy session's call off the direct
		// path: mcp-go's engine serves it under the cold session.
		resp := f.request(http.MethodPost, "alice-token", sid,
			`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"progress","arguments":{"tag":"cold"},"task":{}}}`)
		out <- answer{resp.StatusCode, messages(t, resp)}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	// Once the request is under way in its session, end the session.
	eventually(t, "the call to begin", func() bool {
		f.srv.sessions.mu.Lock()
		defer f.srv.sessions.mu.Unlock()
		se := f.srv.sessions.byID[sid]
		return se != nil && se.busy > 1 // its GET stream and the call
	})
	if resp := f.request(http.MethodDelete, "alice-token", sid, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	if err := f.gate.wait(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-out
	if a.status != http.StatusOK || len(a.msgs) == 0 || !strings.Contains(fmt.Sprint(a.msgs[len(a.msgs)-1]["result"]), "alice/cold") {
		t.Fatalf("cold call: %d %v", a.status, a.msgs)
	}
	if m := nextWithin(t, next, 5*time.Second); m != nil {
		t.Fatalf("the ended session's stream carried %v", m)
	}
	must(t, f.srv.notifySession(other, "test/sentinel", nil))
	if m := nextWithin(t, nextOther, 5*time.Second); m["method"] != "test/sentinel" {
		t.Fatalf("the other session's stream carried %v before the sentinel", m)
	}
}

// TestReview2ColdListsFollowTheCaller: the cold path's lists are the
// caller's: an operator capability is listed to no one (an admin with the
// admin scope included) and answers like an unknown tool; the admin tool
// only to an admin whose token carries the admin scope.
func TestReview2ColdListsFollowTheCaller(t *testing.T) {
	f := newFixture(t)
	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "operatorOnly", Domain: "test", Description: "The operator's.", Annotations: readOnly,
		Requires: capabilities.Requirement{Operator: true},
		Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) {
			return capabilities.TextResult("operator ran"), nil
		},
	})))
	for _, tc := range []struct {
		token     string
		wantAdmin bool
	}{{"alice-token", false}, {"alice-admin-token", false}, {"admin-mcp-token", false}, {"admin-token", true}} {
		sid := f.initialize(tc.token)
		res := result(t, f.request(http.MethodPost, tc.token, sid, rpc(2, "tools/list", nil)))
		var names []string
		for _, tool := range res["result"].(map[string]any)["tools"].([]any) {
			names = append(names, tool.(map[string]any)["name"].(string))
		}
		if slices.Contains(names, "operatorOnly") || slices.Contains(names, "adminOnly") != tc.wantAdmin {
			t.Fatalf("%s lists %v", tc.token, names)
		}
		for _, body := range []string{
			rpc(3, "tools/call", map[string]any{"name": "operatorOnly"}),
			// off the direct path: mcp-go's engine under the cold session
			`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"operatorOnly","task":{}}}`,
		} {
			resp := f.request(http.MethodPost, tc.token, sid, body)
			if b := readAll(resp); strings.Contains(b, "operator ran") {
				t.Fatalf("%s ran the operator's capability: %s", tc.token, b)
			}
		}
	}
}

// TestReview2SetLevelIsPerSession: logging/setLevel on one session does
// not change what another session of the same user is sent.
func TestReview2SetLevelIsPerSession(t *testing.T) {
	f := newFixture(t)
	quiet, loud := f.initialize("alice-token"), f.initialize("alice-token")
	if resp := f.request(http.MethodPost, "alice-token", quiet, rpc(2, "logging/setLevel", map[string]any{"level": "error"})); resp.StatusCode != http.StatusOK {
		t.Fatalf("setLevel: %d", resp.StatusCode)
	}
	logs := func(sid, body string) int {
		n := 0
		for _, m := range messages(t, f.request(http.MethodPost, "alice-token", sid, body)) {
			if m["method"] == "notifications/message" {
				n++
			}
		}
		return n
	}
	for _, body := range []string{
		rpc(3, "tools/call", map[string]any{"name": "progress", "arguments": map[string]any{"tag": "x"}}),
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"progress","arguments":{"tag":"x"},"task":{}}}`,
	} {
		if n := logs(quiet, body); n != 0 {
			t.Fatalf("the quiet session got %d info messages", n)
		}
		if n := logs(loud, body); n != 1 {
			t.Fatalf("the other session got %d info messages, want 1", n)
		}
	}
}

// TestReview2ColdErrorsAreGeneric: what a handler's failure tells the
// client on the cold path (a tool off the direct path, a resource, a
// prompt) names the request, never the failure's detail.
func TestReview2ColdErrorsAreGeneric(t *testing.T) {
	f := newFixture(t)
	must(t, f.reg.RegisterResource(capabilities.Resource{URI: "test://broken", Name: "broken",
		Read: func(context.Context, *capabilities.Call, string, map[string]string) ([]capabilities.ResourceContents, error) {
			return nil, errors.New("db: password hunter2 rejected")
		}}))
	must(t, f.reg.RegisterPrompt(capabilities.Prompt{Name: "brokenPrompt",
		Get: func(context.Context, *capabilities.Call, map[string]string) (capabilities.PromptResult, error) {
			panic("hunter2")
		}}))
	sid := f.initialize("alice-token")
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fail","task":{}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"boom","task":{}}}`,
		rpc(2, "resources/read", map[string]any{"uri": "test://broken"}),
		rpc(2, "prompts/get", map[string]any{"name": "brokenPrompt"}),
	} {
		resp := f.request(http.MethodPost, "alice-token", sid, body)
		got := readAll(resp)
		if strings.Contains(got, "hunter2") || strings.Contains(got, "db:") || resp.StatusCode >= 500 {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, got)
		}
		if !strings.Contains(got, resp.Header.Get("X-Request-Id")) {
			t.Errorf("%s: the answer %s does not name the request %s", body, got, resp.Header.Get("X-Request-Id"))
		}
	}
}

// TestReview2ResumeDuringLiveDelivery: a stream resumed with Last-Event-ID
// while notifications keep coming gets each of them once, in order, with
// no gap: the replay and the live delivery meet without overlap.
func TestReview2ResumeDuringLiveDelivery(t *testing.T) {
	group := cluster.NewLoopback()
	store := &memEvents{memSessions: newMemSessions(), events: map[string][]memEvent{}}
	a := newFixture(t, func(o *Options) { o.Bus, o.Sessions = group.Join(), store })
	sid := a.initialize("alice-token")
	get := func(last string) func() (string, map[string]any) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, a.url, nil)
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set(sessionHeader, sid)
		req.Header.Set(versionHeader, testProtocol)
		if last != "" {
			req.Header.Set("Last-Event-ID", last)
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %d %s", resp.StatusCode, readAll(resp))
		}
		return sseEvents(resp)
	}
	first := get("")
	must(t, a.srv.notifySession(sid, "test/0", nil))
	firstID, m := first()
	if m["method"] != "test/0" || firstID == "" {
		t.Fatalf("first event %q %v", firstID, m)
	}
	const n = 60
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := 1; i <= n; i++ {
			for a.srv.notifySession(sid, fmt.Sprintf("test/%d", i), nil) != nil {
				time.Sleep(time.Millisecond) // full: let the pump catch up
			}
			if i%7 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	time.Sleep(2 * time.Millisecond)
	next := get(firstID)
	<-sent
	seen := map[string]bool{}
	for want := 1; want <= n; want++ {
		ch := make(chan map[string]any, 1)
		go func() { _, m := next(); ch <- m }()
		select {
		case m := <-ch:
			if got := fmt.Sprint(m["method"]); got != fmt.Sprintf("test/%d", want) || seen[got] {
				t.Fatalf("event %d of the resumed stream is %v", want, m)
			}
			seen[fmt.Sprint(m["method"])] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d missing from the resumed stream", want)
		}
	}
}

// TestReview2ResourceUpdatesFollowTheStreamsToken: a subscription made
// under a token with the admin scope does not keep telling the session
// about an admin resource once the session is used with a token of the
// same user without that scope (another client of hers, which may take
// the GET stream over): a notice follows what resources/read would answer
// the session now, as list changes do.
func TestReview2ResourceUpdatesFollowTheStreamsToken(t *testing.T) {
	f := newFixture(t)
	read := func(_ context.Context, _ *capabilities.Call, uri string, _ map[string]string) ([]capabilities.ResourceContents, error) {
		return []capabilities.ResourceContents{{URI: uri, Text: "x"}}, nil
	}
	must(t, f.reg.RegisterResource(
		capabilities.Resource{URI: "test://admin", Name: "admin", Requires: capabilities.Requirement{Role: capabilities.RoleAdmin}, Read: read},
		capabilities.Resource{URI: "test://public", Name: "public", Read: read},
	))
	sid := f.initialize("admin-token")
	for _, uri := range []string{"test://admin", "test://public"} {
		if resp := f.request(http.MethodPost, "admin-token", sid, rpc(4, "resources/subscribe", map[string]any{"uri": uri})); resp.StatusCode != http.StatusOK {
			t.Fatalf("subscribe %s: %d", uri, resp.StatusCode)
		}
	}
	// Another client of the same admin, without the admin scope, takes
	// the session's stream.
	next := openStream(t, f, "admin-mcp-token", sid)
	if m := result(t, f.request(http.MethodPost, "admin-mcp-token", sid, rpc(5, "resources/read", map[string]any{"uri": "test://admin"}))); m["error"] == nil {
		t.Fatal("the token without the admin scope reads the admin resource")
	}
	f.srv.NotifyResourceUpdated(t.Context(), "test://admin")
	f.srv.NotifyResourceUpdated(t.Context(), "test://public")
	must(t, f.srv.notifySession(sid, "test/sentinel", nil))
	var got []string
	for {
		m := nextWithin(t, next, 5*time.Second)
		if m["method"] == "test/sentinel" {
			break
		}
		params, _ := m["params"].(map[string]any)
		got = append(got, fmt.Sprint(params["uri"]))
	}
	if fmt.Sprint(got) != "[test://public]" {
		t.Fatalf("the stream under the token without the admin scope was told of %v, want [test://public]", got)
	}
}

// TestReview2InitializeWhenFullNeverAnswersWithoutSession: initializes
// racing for the last free session slot each get a session or a refusal,
// never a success without a session id (a client could not go on).
func TestReview2InitializeWhenFullNeverAnswersWithoutSession(t *testing.T) {
	tokens := []string{"alice-token", "bob-token", "admin-token", "alice-grant2-token"}
	for round := range 20 {
		f := newFixture(t, func(o *Options) { o.MaxSessions = 1 })
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				resp := f.request(http.MethodPost, tokens[i%len(tokens)], "", rpc(1, "initialize", map[string]any{
					"protocolVersion": testProtocol, "capabilities": map[string]any{},
					"clientInfo": map[string]any{"name": "test", "version": "1"},
				}))
				body := readAll(resp)
				if resp.StatusCode == http.StatusOK && resp.Header.Get(sessionHeader) == "" {
					t.Errorf("round %d: initialize answered 200 without a session: %s", round, body)
				}
			})
		}
		wg.Wait()
	}
}

// TestReview2ConcurrentColdCallsKeepTheirNotifications: two calls of one
// session served at once by mcp-go's engine (off the direct path) each
// carry their own progress and log messages only.
func TestReview2ConcurrentColdCallsKeepTheirNotifications(t *testing.T) {
	f := newFixture(t)
	f.gate = newBarrier(2)
	sid := f.initialize("alice-token")
	var wg sync.WaitGroup
	streams := make([][]map[string]any, 2)
	for i := range 2 {
		wg.Go(func() {
			tag := fmt.Sprint("call", i)
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"progress","arguments":{"tag":%q},"_meta":{"progressToken":%q},"task":{}}}`, 10+i, tag, tag)
			streams[i] = messages(t, f.request(http.MethodPost, "alice-token", sid, body))
		})
	}
	wg.Wait()
	for i, msgs := range streams {
		tag := fmt.Sprint("call", i)
		progress, answered := 0, false
		for _, m := range msgs {
			params, _ := m["params"].(map[string]any)
			switch m["method"] {
			case "notifications/progress":
				progress++
				if params["progressToken"] != tag || params["message"] != "alice/"+tag {
					t.Errorf("stream %d got progress %v", i, params)
				}
			case "notifications/message":
				if params["data"] != "alice/"+tag {
					t.Errorf("stream %d got log %v", i, params)
				}
			case nil:
				answered = strings.Contains(fmt.Sprint(m["result"]), "alice/"+tag)
			}
		}
		if progress != 3 || !answered {
			t.Errorf("stream %d: %d progress notifications (want 3), answered %v: %v", i, progress, answered, msgs)
		}
	}
}
