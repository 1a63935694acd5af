package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

func TestAuthentication(t *testing.T) {
	f := newFixture(t)
	const metadata = `resource_metadata="https://mcp.test/.well-known/oauth-protected-resource/mcp"`
	tests := []struct {
		token     string
		challenge string
	}{
		{"", `Bearer ` + metadata},
		{"garbage", `Bearer error="invalid_token", ` + metadata},
		{"expired-token", `Bearer error="invalid_token", ` + metadata},
		{"foreign-token", `Bearer error="invalid_token", ` + metadata},
		{"ghost-token", `Bearer error="invalid_token", ` + metadata},
	}
	for _, tt := range tests {
		t.Run(cmpOr(tt.token, "none"), func(t *testing.T) {
			for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
				resp := f.request(method, tt.token, "", rpc(1, "tools/list", nil))
				if resp.StatusCode != http.StatusUnauthorized {
					t.Fatalf("%s: status %d, want 401", method, resp.StatusCode)
				}
				if got := resp.Header.Get("WWW-Authenticate"); got != tt.challenge {
					t.Fatalf("%s: WWW-Authenticate = %s, want %s", method, got, tt.challenge)
				}
			}
		})
	}
	t.Run("suspended by the verifier", func(t *testing.T) {
		if resp := f.request(http.MethodPost, "suspended-token", "", rpc(1, "tools/list", nil)); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d, want 403", resp.StatusCode)
		}
	})
	t.Run("suspended", func(t *testing.T) {
		c, _ := f.loader.LoadCaller(t.Context(), "bob")
		c.State = capabilities.AccountSuspended
		f.loader.Set(c)
		if resp := f.request(http.MethodPost, "bob-token", "", rpc(1, "tools/list", nil)); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("suspended account: status %d, want 403", resp.StatusCode)
		}
	})
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func TestInsufficientScope(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-token")
	resp := f.request(http.MethodPost, "alice-token", sid, rpc(2, "tools/call", map[string]any{"name": "scoped"}))
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want 403: %s", resp.StatusCode, readAll(resp))
	}
	want := `Bearer error="insufficient_scope", scope="mcp notes:write", resource_metadata="https://mcp.test/.well-known/oauth-protected-resource/mcp"`
	if got := resp.Header.Get("WWW-Authenticate"); got != want {
		t.Fatalf("WWW-Authenticate = %s, want %s", got, want)
	}
	// The status and the JSON-RPC code are capabilities' table's.
	var refusal struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&refusal); err != nil || refusal.Error.Code != capabilities.RPCCode(capabilities.CodeInsufficientScope) ||
		resp.StatusCode != capabilities.HTTPStatus(capabilities.CodeInsufficientScope) || refusal.Error.Message == "" {
		t.Fatalf("refusal %d %+v %v", resp.StatusCode, refusal, err)
	}

	// A hidden capability never answers with a scope challenge: that would
	// tell a user it exists.
	resp = f.request(http.MethodPost, "alice-token", sid, rpc(3, "tools/call", map[string]any{"name": "adminOnly", "arguments": map[string]any{"text": "x"}}))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("hidden scoped capability: status %d", resp.StatusCode)
	}

	// With the scope, the call runs.
	sid2 := f.initialize("alice-notes-token")
	resp = f.request(http.MethodPost, "alice-notes-token", sid2, rpc(4, "tools/call", map[string]any{"name": "scoped"}))
	if res := result(t, resp); !strings.Contains(fmt.Sprint(res["result"]), "scoped ok") {
		t.Fatalf("scoped call = %v", res)
	}
}

func TestSessionBoundToUser(t *testing.T) {
	f := newFixture(t)
	alice := f.initialize("alice-token")
	forged := "mcp-session-" + strings.Repeat("0", 36)
	list := rpc(2, "tools/list", nil)

	tests := []struct {
		name, method, token, sid string
		want                     int
	}{
		{"owner lists", http.MethodPost, "alice-token", alice, http.StatusOK},
		{"other user posts", http.MethodPost, "bob-token", alice, http.StatusNotFound},
		{"forged id posts", http.MethodPost, "alice-token", forged, http.StatusNotFound},
		{"no id posts", http.MethodPost, "alice-token", "", http.StatusBadRequest},
		{"other user streams", http.MethodGet, "bob-token", alice, http.StatusNotFound},
		{"forged id streams", http.MethodGet, "alice-token", forged, http.StatusNotFound},
		{"no id streams", http.MethodGet, "alice-token", "", http.StatusBadRequest},
		{"other user deletes", http.MethodDelete, "bob-token", alice, http.StatusNotFound},
		{"owner still lists", http.MethodPost, "alice-token", alice, http.StatusOK},
		{"owner deletes", http.MethodDelete, "alice-token", alice, http.StatusOK},
		{"deleted session", http.MethodPost, "alice-token", alice, http.StatusNotFound},
	}
	for _, tt := range tests {
		resp := f.request(tt.method, tt.token, tt.sid, list)
		if resp.StatusCode != tt.want {
			t.Fatalf("%s: status %d, want %d: %s", tt.name, resp.StatusCode, tt.want, readAll(resp))
		}
	}
}

func TestOtherUsersSessionAnswersLikeForged(t *testing.T) {
	f := newFixture(t)
	alice := f.initialize("alice-token")
	foreign := f.request(http.MethodPost, "bob-token", alice, rpc(2, "tools/list", nil))
	forged := f.request(http.MethodPost, "bob-token", "nonsense", rpc(2, "tools/list", nil))
	a, b := readAll(foreign), readAll(forged)
	strip := func(s, id string) string { return strings.ReplaceAll(s, id, "ID") }
	if strip(a, foreign.Header.Get("X-Request-Id")) != strip(b, forged.Header.Get("X-Request-Id")) {
		t.Fatalf("foreign session answers %q, forged %q", a, b)
	}
}

func TestBodyLimit(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxBodyBytes = 1024 })
	sid := f.initialize("alice-token")
	big := rpc(2, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": strings.Repeat("x", 2048)}})
	if resp := f.request(http.MethodPost, "alice-token", sid, big); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
	// Without a Content-Length the limit still holds while reading.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, struct{ *strings.Reader }{strings.NewReader(big)})
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set(sessionHeader, sid)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	if resp.ContentLength == -1 && resp.StatusCode != http.StatusRequestEntityTooLarge || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: status %d, want 413", resp.StatusCode)
	}
	small := rpc(3, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "hi"}})
	if resp := f.request(http.MethodPost, "alice-token", sid, small); resp.StatusCode != http.StatusOK {
		t.Fatalf("small body: status %d", resp.StatusCode)
	}
}

func TestInternalErrorsAreGeneric(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-token")
	for _, name := range []string{"fail", "boom"} {
		resp := f.request(http.MethodPost, "alice-token", sid, rpc(2, "tools/call", map[string]any{"name": name}))
		requestID := resp.Header.Get("X-Request-Id")
		res := result(t, resp)
		body, _ := json.Marshal(res)
		if strings.Contains(string(body), "hunter2") {
			t.Fatalf("%s leaks its detail: %s", name, body)
		}
		want := "internal error (request id " + requestID + ")"
		if !strings.Contains(string(body), want) || !strings.Contains(string(body), `"isError":true`) {
			t.Fatalf("%s answered %s, want a tool error %q", name, body, want)
		}
		if logs := f.logs.String(); !strings.Contains(logs, "hunter2") || !strings.Contains(logs, requestID) {
			t.Fatalf("%s: detail or request id missing from the log:\n%s", name, logs)
		}
	}
}

func TestHiddenAnswersLikeUnknownOverHTTP(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-token")
	call := func(name string) string {
		resp := f.request(http.MethodPost, "alice-token", sid, rpc(7, "tools/call", map[string]any{"name": name, "arguments": map[string]any{"text": "x"}}))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", name, resp.StatusCode)
		}
		return strings.ReplaceAll(readAll(resp), name, "NAME")
	}
	hidden, unknown := call("adminOnly"), call("adminOnlx")
	if hidden != unknown {
		t.Fatalf("hidden answers %s\nunknown answers %s", hidden, unknown)
	}
	var got []string
	for _, d := range f.audit.Denials() {
		got = append(got, d.Name+":"+string(d.Reason))
	}
	if want := []string{"adminOnly:role", "adminOnlx:unknown"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("denials = %v, want %v", got, want)
	}

	names := func(token, sid string) []string {
		res := result(t, f.request(http.MethodPost, token, sid, rpc(8, "tools/list", nil)))
		var out []string
		for _, tool := range res["result"].(map[string]any)["tools"].([]any) {
			out = append(out, tool.(map[string]any)["name"].(string))
		}
		return out
	}
	if got := strings.Join(names("alice-token", sid), ","); strings.Contains(got, "adminOnly") || !strings.Contains(got, "whoami") {
		t.Fatalf("alice lists %s", got)
	}
	if got := strings.Join(names("admin-token", f.initialize("admin-token")), ","); !strings.Contains(got, "adminOnly") {
		t.Fatalf("admin lists %s", got)
	}
}

// An admin's token without the admin scope lists the tools of a user, and
// calling an admin tool is the step-up answer: 403 with a challenge naming
// the scopes to ask for (the token's own plus admin). With the scope the
// tool is listed and runs.
func TestAdminScopeStepUp(t *testing.T) {
	f := newFixture(t)
	names := func(token string) []string {
		res := result(t, f.request(http.MethodPost, token, f.initialize(token), rpc(8, "tools/list", nil)))
		var out []string
		for _, tool := range res["result"].(map[string]any)["tools"].([]any) {
			out = append(out, tool.(map[string]any)["name"].(string))
		}
		return out
	}
	user, admin := names("alice-token"), names("admin-mcp-token")
	if !slices.Equal(user, admin) || slices.Contains(admin, "adminOnly") {
		t.Fatalf("an admin without the admin scope lists %v, a user %v", admin, user)
	}
	if got := names("admin-token"); !slices.Contains(got, "adminOnly") {
		t.Fatalf("an admin with the admin scope lists %v", got)
	}

	sid := f.initialize("admin-mcp-token")
	resp := f.request(http.MethodPost, "admin-mcp-token", sid, rpc(2, "tools/call", map[string]any{"name": "adminOnly", "arguments": map[string]any{"text": "x"}}))
	body := readAll(resp)
	if resp.StatusCode != http.StatusForbidden || strings.Contains(body, `"echo":"x"`) {
		t.Fatalf("admin tool without the admin scope: status %d %s, want 403", resp.StatusCode, body)
	}
	want := `Bearer error="insufficient_scope", scope="mcp admin", resource_metadata="https://mcp.test/.well-known/oauth-protected-resource/mcp"`
	if got := resp.Header.Get("WWW-Authenticate"); got != want {
		t.Fatalf("WWW-Authenticate = %s, want %s", got, want)
	}
	if !strings.Contains(body, "lacks a required scope") {
		t.Errorf("body %s does not say a scope is missing", body)
	}

	sid = f.initialize("admin-token")
	res := result(t, f.request(http.MethodPost, "admin-token", sid, rpc(3, "tools/call", map[string]any{"name": "adminOnly", "arguments": map[string]any{"text": "x"}})))
	if !strings.Contains(fmt.Sprint(res["result"]), "x") || res["error"] != nil {
		t.Fatalf("admin tool with the admin scope = %v", res)
	}
}

func TestToolAnnotationsExplicit(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-token")
	res := result(t, f.request(http.MethodPost, "alice-token", sid, rpc(2, "tools/list", nil)))
	for _, raw := range res["result"].(map[string]any)["tools"].([]any) {
		tool := raw.(map[string]any)
		ann, _ := tool["annotations"].(map[string]any)
		for _, hint := range []string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"} {
			if _, ok := ann[hint]; !ok {
				t.Errorf("%s: %s not set", tool["name"], hint)
			}
		}
		if tool["name"] == "echo" && (ann["destructiveHint"] != false || ann["openWorldHint"] != false) {
			t.Errorf("echo annotations = %v", ann)
		}
	}
}

// TestConcurrentCallsOnOneSession holds two calls of one session in flight
// together and checks each response stream carries only its own progress.
func TestConcurrentCallsOnOneSession(t *testing.T) {
	f := newFixture(t)
	f.gate = newBarrier(2)
	sid := f.initialize("alice-token")
	var wg sync.WaitGroup
	streams := make([][]map[string]any, 2)
	for i := range 2 {
		wg.Go(func() {
			tag := fmt.Sprint("call", i)
			resp := f.request(http.MethodPost, "alice-token", sid, rpc(10+i, "tools/call", map[string]any{
				"name": "progress", "arguments": map[string]any{"tag": tag},
				"_meta": map[string]any{"progressToken": tag},
			}))
			streams[i] = messages(t, resp)
		})
	}
	wg.Wait()
	for i, msgs := range streams {
		tag := fmt.Sprint("call", i)
		progress := 0
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
			}
		}
		if progress != 3 {
			t.Errorf("stream %d: %d progress notifications, want 3: %v", i, progress, msgs)
		}
	}
}

func TestSessionExpiryAndBounds(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.SessionTTL = time.Minute; o.MaxSessionsPerUser = 2 })
	list := rpc(2, "tools/list", nil)

	first := f.initialize("alice-token")
	second := f.initialize("alice-token")
	f.clock.Advance(time.Second)
	f.request(http.MethodPost, "alice-token", first, list) // first is now the most recent
	third := f.initialize("alice-token")                   // evicts second
	for sid, want := range map[string]int{first: 200, second: 404, third: 200} {
		if resp := f.request(http.MethodPost, "alice-token", sid, list); resp.StatusCode != want {
			t.Fatalf("session status %d, want %d", resp.StatusCode, want)
		}
	}
	if n := f.srv.sessions.len(); n != 2 {
		t.Fatalf("%d live sessions, want 2", n)
	}

	f.clock.Advance(59 * time.Second)
	f.srv.sweep()
	if n := f.srv.sessions.len(); n != 2 {
		t.Fatalf("sessions expired early: %d live", n)
	}
	f.clock.Advance(2 * time.Second)
	f.srv.sweep()
	if n := f.srv.sessions.len(); n != 0 {
		t.Fatalf("%d sessions after the TTL, want 0", n)
	}
	if resp := f.request(http.MethodPost, "alice-token", first, list); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("expired session: status %d", resp.StatusCode)
	}
}

func TestSessionLimit(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxSessions = 1 })
	f.initialize("alice-token")
	resp := f.request(http.MethodPost, "bob-token", "", rpc(1, "initialize", map[string]any{
		"protocolVersion": testProtocol, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"},
	}))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", resp.StatusCode)
	}
}

// TestListChangedOnlyWhenVisibleSetChanges reads a session's GET stream:
// a capability the user cannot see changes nothing; gaining a role does
// (the token carries the admin scope, so the admin role opens tools).
// Sentinels sent by the test mark the points between the two.
func TestListChangedOnlyWhenVisibleSetChanges(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-admin-token")
	stream := f.request(http.MethodGet, "alice-admin-token", sid, "")
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %d", stream.StatusCode)
	}
	ping := func() {
		if resp := f.request(http.MethodPost, "alice-admin-token", sid, rpc(3, "ping", nil)); resp.StatusCode != http.StatusOK {
			t.Fatalf("ping: %d", resp.StatusCode)
		}
	}
	sentinel := func(n int) {
		must(t, f.srv.notifySession(sid, "test/sentinel", map[string]any{"n": n}))
	}
	f.request(http.MethodPost, "alice-admin-token", sid, rpc(2, "tools/list", nil))

	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "adminExtra", Domain: "test", Description: "Another admin tool.", Annotations: readOnly,
		Requires: capabilities.Requirement{Role: capabilities.RoleAdmin},
		Handler: func(_ context.Context, _ *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			return capabilities.TextResult("x"), nil
		},
	})))
	ping()
	sentinel(1)
	c, _ := f.loader.LoadCaller(t.Context(), "alice")
	c.Roles = append(c.Roles, capabilities.RoleAdmin)
	f.loader.Set(c)
	ping()
	sentinel(2)

	var got []string
	dec := sseReader(stream)
	for len(got) < 3 {
		m := dec()
		if m == nil {
			t.Fatalf("stream ended after %v", got)
		}
		got = append(got, fmt.Sprint(m["method"]))
	}
	want := []string{"test/sentinel", "notifications/tools/list_changed", "test/sentinel"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stream carried %v, want %v", got, want)
	}
}

// A broadcast list change works out each streaming session's tools with
// the scopes of its token: a session holding the admin scope whose tools
// did not change hears nothing (loaded without scopes, it would lose the
// admin tools and be told its list changed).
func TestListChangedBroadcastKeepsScopes(t *testing.T) {
	f := newFixture(t)
	c, _ := f.loader.LoadCaller(t.Context(), "admin")
	c.AllScopes = false // as accounts loads a caller: the scopes are the token's
	f.loader.Set(c)
	sid := f.initialize("admin-token")
	if res := result(t, f.request(http.MethodPost, "admin-token", sid, rpc(2, "tools/list", nil))); !strings.Contains(fmt.Sprint(res), "adminOnly") {
		t.Fatalf("tools/list = %v", res)
	}
	stream := f.request(http.MethodGet, "admin-token", sid, "")
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %d", stream.StatusCode)
	}
	if resp := f.request(http.MethodPost, "admin-token", sid, rpc(3, "ping", nil)); resp.StatusCode != http.StatusOK {
		t.Fatalf("ping: %d", resp.StatusCode)
	}
	f.srv.NotifyListChanged(t.Context())
	must(t, f.srv.notifySession(sid, "test/sentinel", nil))
	if m := sseReader(stream)(); m == nil || m["method"] != "test/sentinel" {
		t.Fatalf("the stream carried %v before the sentinel", m)
	}
}

func TestProtocolVersions(t *testing.T) {
	f := newFixture(t)
	resp := f.request(http.MethodPost, "alice-token", "", rpc(1, "initialize", map[string]any{
		"protocolVersion": "2024-11-05", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"},
	}))
	res := result(t, resp)
	if v := res["result"].(map[string]any)["protocolVersion"]; v != "2025-11-25" {
		t.Fatalf("negotiated %v for a 2024-11-05 client", v)
	}
	sid := resp.Header.Get(sessionHeader)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(rpc(2, "tools/list", nil)))
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set(sessionHeader, sid)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(versionHeader, "2024-11-05")
	r2, err := http.DefaultClient.Do(req)
	must(t, err)
	defer r2.Body.Close()
	if r2.StatusCode != http.StatusBadRequest {
		t.Fatalf("2024-11-05 header: status %d, want 400", r2.StatusCode)
	}
}

// TestStatelessProtocol calls a tool with protocol 2026-07-28, which has no
// sessions: the request stands alone and is still authenticated.
func TestStatelessProtocol(t *testing.T) {
	f := newFixture(t)
	body := rpc(1, "tools/call", map[string]any{
		"name": "whoami", "arguments": map[string]any{},
		"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "t", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		},
	})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer bob-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(versionHeader, "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "whoami")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	res := result(t, resp)
	if !strings.Contains(fmt.Sprint(res), "userId:bob") {
		t.Fatalf("stateless whoami = %v", res)
	}
	if resp.Header.Get(sessionHeader) != "" {
		t.Fatal("stateless request got a session id")
	}

	// 2026-07-28 has no GET stream: nothing to register under an empty id.
	get, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.url, nil)
	get.Header.Set("Authorization", "Bearer bob-token")
	get.Header.Set(versionHeader, "2026-07-28")
	gresp, err := http.DefaultClient.Do(get)
	must(t, err)
	defer gresp.Body.Close()
	if gresp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("stateless GET: %d, want 405", gresp.StatusCode)
	}
}

func TestAnonymousOnlyOnLoopback(t *testing.T) {
	anon := capabilities.Caller{UserID: "anon", State: capabilities.AccountActive, AllScopes: true}
	f := newFixture(t, func(o *Options) { o.Anonymous = &anon })
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(rpc(1, "tools/list", nil)))
	req.RemoteAddr = "192.0.2.1:4000"
	f.srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("non-loopback anonymous request: %d, want 403", rec.Code)
	}
	if sid := f.initialize(""); sid == "" {
		t.Fatal("loopback anonymous request refused")
	}
}

func TestNewValidatesOptions(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{})
	for name, o := range map[string]Options{
		"no registry": {BaseURL: "https://x", Anonymous: &capabilities.Caller{}},
		"no verifier": {Registry: reg, BaseURL: "https://x"},
		"bad base":    {Registry: reg, BaseURL: "/relative", Anonymous: &capabilities.Caller{}},
	} {
		if s, err := New(o); err == nil {
			s.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDeleteEndsGETStream(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-token")
	stream := f.request(http.MethodGet, "alice-token", sid, "")
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d", stream.StatusCode)
	}
	if resp := f.request(http.MethodDelete, "alice-token", sid, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	// The stream ends: reading reaches EOF instead of blocking.
	next := sseReader(stream)
	for m := next(); m != nil; m = next() {
	}
}

func TestLoadFailureFailsClosed(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("admin-token")
	f.loader.Err = fmt.Errorf("database down")
	call := func(name string, args map[string]any) string {
		resp := f.request(http.MethodPost, "admin-token", sid, rpc(2, "tools/call", map[string]any{"name": name, "arguments": args}))
		return readAll(resp)
	}
	if got := call("whoami", nil); !strings.Contains(got, `"roles":[]`) {
		t.Fatalf("whoami while loading fails = %s", got)
	}
	if got := call("adminOnly", map[string]any{"text": "x"}); !strings.Contains(got, "not found") {
		t.Fatalf("admin capability while loading fails = %s", got)
	}
	if !strings.Contains(f.logs.String(), "database down") {
		t.Fatal("load failure not logged")
	}
}

// TestAnswersBoundToSession: an elicitation sent to alice's call can only
// be answered from alice's session.
func TestAnswersBoundToSession(t *testing.T) {
	f := newFixture(t)
	alice := f.initialize("alice-token")
	bob := f.initialize("bob-token")
	call := f.request(http.MethodPost, "alice-token", alice, rpc(5, "tools/call", map[string]any{"name": "ask"}))
	next := sseReader(call)
	ask := next()
	if ask == nil || ask["method"] != "elicitation/create" {
		t.Fatalf("first event = %v", ask)
	}
	id, _ := json.Marshal(ask["id"])
	answer := func(name string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"name":%q}}}`, id, name)
	}
	if resp := f.request(http.MethodPost, "bob-token", bob, answer("bob")); resp.StatusCode == http.StatusAccepted {
		t.Fatal("bob's session answered alice's elicitation")
	}
	if resp := f.request(http.MethodPost, "bob-token", alice, answer("bob")); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob answering on alice's session: %d", resp.StatusCode)
	}
	if resp := f.request(http.MethodPost, "alice-token", alice, answer("alice")); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("alice's answer: %d", resp.StatusCode)
	}
	final := next()
	if got := fmt.Sprint(final["result"]); !strings.Contains(got, "accept:alice") {
		t.Fatalf("result = %v", final)
	}
}

func TestHiddenResourcesAndPromptsAnswerLikeUnknown(t *testing.T) {
	f := newFixture(t)
	admin := capabilities.Requirement{Role: capabilities.RoleAdmin}
	read := func(_ context.Context, _ *capabilities.Call, uri string, _ map[string]string) ([]capabilities.ResourceContents, error) {
		return []capabilities.ResourceContents{{URI: uri, Text: "secret"}}, nil
	}
	get := func(context.Context, *capabilities.Call, map[string]string) (capabilities.PromptResult, error) {
		return capabilities.PromptResult{Messages: []capabilities.PromptMessage{{Role: "user", Content: capabilities.Text{Text: "secret"}}}}, nil
	}
	must(t, f.reg.RegisterResource(capabilities.Resource{URI: "test://admin", Name: "admin", Requires: admin, Read: read}))
	must(t, f.reg.RegisterPrompt(capabilities.Prompt{Name: "adminPrompt", Requires: admin, Get: get}))
	sid := f.initialize("alice-token")
	ask := func(method string, params map[string]any, name, placeholder string) string {
		resp := f.request(http.MethodPost, "alice-token", sid, rpc(9, method, params))
		return strings.ReplaceAll(readAll(resp), name, placeholder)
	}
	for _, tc := range []struct{ method, key, hidden, unknown string }{
		{"resources/read", "uri", "test://admin", "test://admix"},
		{"prompts/get", "name", "adminPrompt", "adminPromx"},
	} {
		hidden := ask(tc.method, map[string]any{tc.key: tc.hidden}, tc.hidden, "NAME")
		unknown := ask(tc.method, map[string]any{tc.key: tc.unknown}, tc.unknown, "NAME")
		if hidden != unknown || strings.Contains(hidden, "secret") {
			t.Errorf("%s: hidden answers %s, unknown answers %s", tc.method, hidden, unknown)
		}
	}
	for method, hidden := range map[string]string{"resources/list": "test://admin", "prompts/list": "adminPrompt"} {
		if body := readAll(f.request(http.MethodPost, "alice-token", sid, rpc(10, method, nil))); strings.Contains(body, hidden) {
			t.Errorf("%s lists %s to alice: %s", method, hidden, body)
		}
		adminSID := f.initialize("admin-token")
		if body := readAll(f.request(http.MethodPost, "admin-token", adminSID, rpc(10, method, nil))); !strings.Contains(body, hidden) {
			t.Errorf("%s hides %s from admin: %s", method, hidden, body)
		}
	}
}

func TestLogLevelRespected(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-token")
	logs := func() int {
		resp := f.request(http.MethodPost, "alice-token", sid, rpc(3, "tools/call", map[string]any{"name": "progress", "arguments": map[string]any{"tag": "x"}}))
		n := 0
		for _, m := range messages(t, resp) {
			if m["method"] == "notifications/message" {
				n++
			}
		}
		return n
	}
	if n := logs(); n != 1 {
		t.Fatalf("%d info messages before any level was set, want 1", n)
	}
	for level, want := range map[string]int{"error": 0, "info": 1, "debug": 1} {
		if resp := f.request(http.MethodPost, "alice-token", sid, rpc(2, "logging/setLevel", map[string]any{"level": level})); resp.StatusCode != http.StatusOK {
			t.Fatalf("setLevel: %d", resp.StatusCode)
		}
		if n := logs(); n != want {
			t.Fatalf("level %s: %d info messages, want %d", level, n, want)
		}
	}
}

func TestCancelledNotificationStopsTheCall(t *testing.T) {
	f := newFixture(t)
	sid := f.initialize("alice-token")
	bob := f.initialize("bob-token")
	start := func(id int) (next func() map[string]any) {
		call := f.request(http.MethodPost, "alice-token", sid, rpc(id, "tools/call", map[string]any{
			"name": "progress", "arguments": map[string]any{"tag": "x"}, "_meta": map[string]any{"progressToken": "p"},
		}))
		next = sseReader(call)
		if m := next(); m == nil || m["method"] != "notifications/progress" {
			t.Fatalf("call %d: first event = %v", id, m)
		}
		return next
	}
	cancel := func(token, sid string, id int) {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, id)
		if resp := f.request(http.MethodPost, token, sid, body); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("cancel: %d", resp.StatusCode)
		}
	}
	rest := func(next func() map[string]any) (result any) {
		for m := next(); m != nil; m = next() {
			if r, ok := m["result"]; ok {
				result = r
			}
		}
		return result
	}

	// Bob cancelling id 41 from his session does not touch alice's call 41:
	// it completes once a second call joins it at the gate.
	f.gate = newBarrier(2)
	first := start(41)
	cancel("bob-token", bob, 41)
	second := start(42)
	for _, next := range []func() map[string]any{first, second} {
		if got := fmt.Sprint(rest(next)); !strings.Contains(got, "alice/x") {
			t.Fatalf("call result = %s", got)
		}
	}

	// Alice cancelling her call stops it; no response follows.
	f.gate = newBarrier(2)
	third := start(43)
	cancel("alice-token", sid, 43)
	if got := rest(third); got != nil {
		t.Fatalf("cancelled call answered %v", got)
	}
}

func TestResourceUpdatedReachesSubscribersWhoCanRead(t *testing.T) {
	f := newFixture(t)
	read := func(_ context.Context, _ *capabilities.Call, uri string, _ map[string]string) ([]capabilities.ResourceContents, error) {
		return []capabilities.ResourceContents{{URI: uri, Text: "x"}}, nil
	}
	must(t, f.reg.RegisterResource(
		capabilities.Resource{URI: "test://public", Name: "public", Read: read},
		capabilities.Resource{URI: "test://admin", Name: "admin", Requires: capabilities.Requirement{Role: capabilities.RoleAdmin}, Read: read},
	))
	alice, bob := f.initialize("alice-token"), f.initialize("bob-token")
	subscribe := func(token, sid, uri string) {
		if resp := f.request(http.MethodPost, token, sid, rpc(4, "resources/subscribe", map[string]any{"uri": uri})); resp.StatusCode != http.StatusOK {
			t.Fatalf("subscribe %s: %d", uri, resp.StatusCode)
		}
	}
	subscribe("alice-token", alice, "test://public")
	subscribe("alice-token", alice, "test://admin") // acknowledged, never notified
	subscribe("bob-token", bob, "test://other")
	aliceStream := sseReader(f.request(http.MethodGet, "alice-token", alice, ""))
	bobStream := f.request(http.MethodGet, "bob-token", bob, "")

	f.srv.NotifyResourceUpdated(t.Context(), "test://admin")
	f.srv.NotifyResourceUpdated(t.Context(), "test://public")
	must(t, f.srv.notifySession(alice, "test/sentinel", nil))
	var got []string
	for range 2 {
		m := aliceStream()
		params, _ := m["params"].(map[string]any)
		switch m["method"] {
		case "notifications/resources/updated":
			got = append(got, fmt.Sprint("updated ", params["uri"]))
		case "test/sentinel":
			got = append(got, "sentinel")
		default:
			got = append(got, fmt.Sprint(m))
		}
	}
	if want := []string{"updated test://public", "sentinel"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("alice's stream carried %v, want %v", got, want)
	}

	// Bob is subscribed to nothing that changed: his stream carries only
	// the sentinel sent after the updates.
	must(t, f.srv.notifySession(bob, "test/sentinel", nil))
	if m := sseReader(bobStream)(); m["method"] != "test/sentinel" {
		t.Fatalf("bob's stream carried %v first", m)
	}
}

// TestStatelessElicitationRetries: a 2026-07-28 client gets the question
// as an input_required result and calls again with the answer.
func TestStatelessElicitationRetries(t *testing.T) {
	f := newFixture(t)
	call := func(extra map[string]any) map[string]any {
		params := map[string]any{
			"name": "ask", "arguments": map[string]any{},
			"_meta": map[string]any{
				"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
				"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "t", "version": "1"},
				"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{}},
			},
		}
		for k, v := range extra {
			params[k] = v
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, strings.NewReader(rpc(1, "tools/call", params)))
		req.Header.Set("Authorization", "Bearer bob-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(versionHeader, "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "ask")
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		defer resp.Body.Close()
		res, _ := result(t, resp)["result"].(map[string]any)
		return res
	}
	first := call(nil)
	questions, _ := first["inputRequests"].(map[string]any)
	q, _ := questions["elicitation/create-1"].(map[string]any)
	if first["resultType"] != "input_required" || fmt.Sprint(q["params"]) == "" || !strings.Contains(fmt.Sprint(q), "name?") {
		t.Fatalf("first round = %v", first)
	}
	second := call(map[string]any{"inputResponses": map[string]any{
		"elicitation/create-1": map[string]any{"action": "accept", "content": map[string]any{"name": "zed"}},
	}, "requestState": first["requestState"]})
	if got := fmt.Sprint(second["content"]); !strings.Contains(got, "accept:zed") {
		t.Fatalf("second round = %v", second)
	}
}

// A resource-update notice reaches only the sessions whose token may read
// the resource, scopes included, as resources/read decides: an admin whose
// agent was not granted the admin scope is not told that an admin resource
// changed (reading it would answer insufficient_scope), nor that a resource
// needing another scope changed.
func TestResourceUpdatedHonoursTokenScopes(t *testing.T) {
	f := newFixture(t)
	read := func(_ context.Context, _ *capabilities.Call, uri string, _ map[string]string) ([]capabilities.ResourceContents, error) {
		return []capabilities.ResourceContents{{URI: uri, Text: "x"}}, nil
	}
	must(t, f.reg.RegisterResource(
		capabilities.Resource{URI: "test://admin", Name: "admin", Requires: capabilities.Requirement{Role: capabilities.RoleAdmin}, Read: read},
		capabilities.Resource{URI: "test://notes", Name: "notes", Requires: capabilities.Requirement{Scopes: []string{"notes:write"}}, Read: read},
		capabilities.Resource{URI: "test://public", Name: "public", Read: read},
	))
	scoped, unscoped := f.initialize("admin-token"), f.initialize("admin-mcp-token")
	for _, s := range []struct{ token, sid string }{{"admin-token", scoped}, {"admin-mcp-token", unscoped}} {
		for _, uri := range []string{"test://admin", "test://notes", "test://public"} {
			if resp := f.request(http.MethodPost, s.token, s.sid, rpc(4, "resources/subscribe", map[string]any{"uri": uri})); resp.StatusCode != http.StatusOK {
				t.Fatalf("%s subscribe %s: %d", s.token, uri, resp.StatusCode)
			}
		}
	}
	// What resources/read answers each session is what its notices follow.
	readable := func(token, sid, uri string) bool {
		m := result(t, f.request(http.MethodPost, token, sid, rpc(5, "resources/read", map[string]any{"uri": uri})))
		return m["error"] == nil
	}
	if !readable("admin-token", scoped, "test://admin") || readable("admin-mcp-token", unscoped, "test://admin") || readable("admin-token", scoped, "test://notes") {
		t.Fatal("resources/read does not decide as this test assumes")
	}
	streams := map[string]func() map[string]any{
		"admin-token":     sseReader(f.request(http.MethodGet, "admin-token", scoped, "")),
		"admin-mcp-token": sseReader(f.request(http.MethodGet, "admin-mcp-token", unscoped, "")),
	}
	f.srv.NotifyResourceUpdated(t.Context(), "test://admin")
	f.srv.NotifyResourceUpdated(t.Context(), "test://notes")
	f.srv.NotifyResourceUpdated(t.Context(), "test://public")
	must(t, f.srv.notifySession(scoped, "test/sentinel", nil))
	must(t, f.srv.notifySession(unscoped, "test/sentinel", nil))
	for token, want := range map[string][]string{
		"admin-token":     {"updated test://admin", "updated test://public", "sentinel"},
		"admin-mcp-token": {"updated test://public", "sentinel"},
	} {
		var got []string
		for range want {
			m := streams[token]()
			params, _ := m["params"].(map[string]any)
			switch m["method"] {
			case "notifications/resources/updated":
				got = append(got, fmt.Sprint("updated ", params["uri"]))
			case "test/sentinel":
				got = append(got, "sentinel")
			default:
				got = append(got, fmt.Sprint(m))
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s's stream carried %v, want %v", token, got, want)
		}
	}
	if f.reg.CanRead(t.Context(), capabilities.Caller{UserID: "admin", Roles: []string{capabilities.RoleAdmin}, State: capabilities.AccountActive, Scopes: []string{"mcp"}}, "test://admin") {
		t.Error("CanRead lets a token without the admin scope read an admin resource")
	}
}
