package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/internal/fuzzseed"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/storage"
)

// The fuzz targets of this file drive the assembled server in process:
// every built-in capability with arbitrary arguments over /mcp, and every
// form post of the web shell with arbitrary fields. The property, for
// both: no panic (the server turns one into a logged 500), no 5xx, an
// answer of bounded size within a bounded time. Seeds:
// testdata/fuzz/<Target>/.

// panicLog records whether the server logged a recovered panic.
type panicLog struct{ seen atomic.Bool }

func (p *panicLog) Enabled(context.Context, slog.Level) bool { return true }
func (p *panicLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(strings.ToLower(r.Message), "panic") {
		p.seen.Store(true)
	}
	return nil
}
func (p *panicLog) WithAttrs([]slog.Attr) slog.Handler { return p }
func (p *panicLog) WithGroup(string) slog.Handler      { return p }

type fuzzWorld struct {
	srv          *enclave.Server
	h            http.Handler
	panics       *panicLog
	tokens       map[string]string // name -> bearer token
	sessions     map[string]string // name -> MCP session id
	cookies      map[string]*http.Cookie
	ids          map[string]int64
	tools        []string
	nulArgs      map[string][]byte // tool -> every declared string argument a lone NUL
	base         string
	remote       atomic.Int64
	maxResponse  int
	callDeadline time.Duration
}

func newFuzzWorld(tb testing.TB) *fuzzWorld {
	ctx := context.Background()
	w := &fuzzWorld{panics: &panicLog{}, tokens: map[string]string{}, sessions: map[string]string{}, cookies: map[string]*http.Cookie{}, ids: map[string]int64{}, nulArgs: map[string][]byte{},
		base: "http://enclave.test", maxResponse: 4 << 20, callDeadline: 10 * time.Second}
	verifier := mcp.TokenVerifierFunc(func(_ context.Context, token string) (mcp.TokenInfo, error) {
		sid, ok := strings.CutPrefix(token, "test-token:")
		if !ok {
			return mcp.TokenInfo{}, mcp.ErrInvalidToken
		}
		return mcp.TokenInfo{UserID: sid, Audience: []string{w.base + "/mcp"}, Scopes: []string{"mcp"}}, nil
	})
	srv := newServer(tb, storage.SQLite, func(c *enclave.Config) {
		c.BaseURL, c.TokenVerifier, c.Logger = w.base, verifier, slog.New(w.panics)
	})
	w.srv, w.h = srv, srv.Handler()
	for _, name := range []string{"alice", "carol"} {
		u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "a long password for " + name})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := srv.Accounts().Identity.MarkEmailVerified(ctx, u.ID); err != nil {
			tb.Fatal(err)
		}
		if name == "carol" {
			if _, err := srv.Accounts().Roles.GrantAdminAsOperator(ctx, u.ID); err != nil {
				tb.Fatal(err)
			}
		}
		w.ids[name] = u.ID
		w.tokens[name] = "test-token:" + u.StableID
		rec := httptest.NewRecorder()
		if _, err := srv.Accounts().Credentials.StartSession(rec, httptest.NewRequest("POST", "/login", nil), u, false); err != nil {
			tb.Fatal(err)
		}
		w.cookies[name] = rec.Result().Cookies()[0]
		if _, _, err := srv.Secrets().Set(ctx, storage.Owner{ID: u.ID, StableID: u.StableID}, "api", "", []byte("value-of-"+name)); err != nil {
			tb.Fatal(err)
		}
		rec = w.mcp(tb, name, "", []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}`))
		w.sessions[name] = rec.Header().Get("Mcp-Session-Id")
		if rec.Code != 200 || w.sessions[name] == "" {
			tb.Fatalf("initialize %s: %d %s", name, rec.Code, rec.Body.String())
		}
		w.mcp(tb, name, w.sessions[name], []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	}
	rec := w.mcp(tb, "carol", w.sessions["carol"], []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))
	var list struct {
		Result struct {
			Tools []struct {
				Name   string `json:"name"`
				Schema struct {
					Properties map[string]struct {
						Type any `json:"type"`
					} `json:"properties"`
				} `json:"inputSchema"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(enclavetest.Message(rec.Header().Get("Content-Type"), rec.Body.Bytes()), &list); err != nil || len(list.Result.Tools) == 0 {
		tb.Fatalf("tools/list: %v %s", err, rec.Body.String())
	}
	for _, tl := range list.Result.Tools {
		// Deleting the fuzzing accounts would end the run early.
		if !strings.Contains(strings.ToLower(tl.Name), "delet") {
			w.tools = append(w.tools, tl.Name)
			nul := map[string]string{}
			for prop, p := range tl.Schema.Properties {
				if p.Type == "string" {
					nul[prop] = "\x00"
				}
			}
			w.nulArgs[tl.Name], _ = json.Marshal(nul)
		}
	}
	slices.Sort(w.tools)
	return w
}

func (w *fuzzWorld) serve(tb testing.TB, req *http.Request) *httptest.ResponseRecorder {
	tb.Helper()
	// Each request from its own address: the per-address credential limit
	// is not what is fuzzed here.
	n := w.remote.Add(1)
	req.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:1234", (n>>16)&255, (n>>8)&255, n&255)
	ctx, cancel := context.WithTimeout(req.Context(), w.callDeadline)
	defer cancel()
	req = req.WithContext(ctx)
	rec := httptest.NewRecorder()
	start := time.Now()
	w.h.ServeHTTP(rec, req)
	if d := time.Since(start); d >= w.callDeadline/2 {
		tb.Fatalf("%s %s took %s", req.Method, req.URL.Path, d)
	}
	if rec.Code >= 500 {
		tb.Fatalf("%s %s: status %d: %s", req.Method, req.URL.Path, rec.Code, rec.Body.String())
	}
	if rec.Body.Len() > w.maxResponse {
		tb.Fatalf("%s %s: answer of %d bytes", req.Method, req.URL.Path, rec.Body.Len())
	}
	if w.panics.seen.Load() {
		tb.Fatalf("%s %s: the server logged a panic", req.Method, req.URL.Path)
	}
	return rec
}

func (w *fuzzWorld) mcp(tb testing.TB, who, session string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, w.base+"/mcp", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+w.tokens[who])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	}
	return w.serve(tb, req)
}

// FuzzCapabilityArguments calls every built-in capability (but account
// deletion), as a user and as an admin, with arbitrary arguments: the
// input schema and the handlers refuse what does not fit with a JSON-RPC
// answer; another user's data never appears.
func FuzzCapabilityArguments(f *testing.F) {
	fuzzseed.Add(f,
		[]any{uint8(0), false, []byte(`{}`)},
		[]any{uint8(1), false, []byte(`{"name":"api"}`)},
		[]any{uint8(2), false, []byte(`{"name":"x","value":"v","description":"d"}`)},
		[]any{uint8(3), true, []byte(`{"limit":1000000,"cursor":"AAAA"}`)},
		[]any{uint8(4), true, []byte(`{"limit":-1}`)},
		[]any{uint8(5), false, []byte(`{"section":"sql:users","cursor":"eyJrIjoiIiwiYSI6MX0","limit":1}`)},
		[]any{uint8(6), false, []byte(`{"section":"blob:notes","cursor":"eyJkIjoibm90ZXMiLCJrIjoiLi4vIiwibyI6LTF9"}`)},
		[]any{uint8(7), true, []byte(`{"userId":"\u0000","email":"a@b","role":"admin"}`)},
		[]any{uint8(8), false, []byte(`{"name":` + strings.Repeat(`[`, 3000) + `}`)},
		[]any{uint8(9), true, []byte(`{"query":"\xff\xfe","since":"not-a-time","until":"9999-99-99"}`)},
		[]any{uint8(10), false, []byte(`{"name":"` + strings.Repeat("n", 70000) + `","value":"v"}`)},
		[]any{uint8(11), true, []byte(`{"id":9223372036854775807}`)},
		[]any{uint8(12), false, []byte(`[]`)},
		[]any{uint8(13), false, []byte(`null`)},
	)
	// NUL bytes in every string argument, to every tool.
	nul := []byte(`{"name":"n\u0000","value":"v\u0000","description":"d\u0000","section":"sql:users\u0000","cursor":"\u0000","query":"\u0000","grantId":"\u0000","clientId":"\u0000","userId":"\u0000"}`)
	w := newFuzzWorld(f)
	for i := range w.tools {
		f.Add(uint8(i), false, nul)
		f.Add(uint8(i), true, nul)
		// A lone NUL as every string argument the tool declares.
		f.Add(uint8(i), i%2 == 0, w.nulArgs[w.tools[i]])
	}
	f.Fuzz(func(t *testing.T, tool uint8, admin bool, args []byte) {
		who, other := "alice", "carol"
		if admin {
			who, other = "carol", "alice"
		}
		raw := json.RawMessage(args)
		if !json.Valid(args) {
			raw, _ = json.Marshal(string(args))
		}
		body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 9, "method": "tools/call",
			"params": map[string]any{"name": w.tools[int(tool)%len(w.tools)], "arguments": raw}})
		if err != nil {
			t.Skip()
		}
		rec := w.mcp(t, who, w.sessions[who], body)
		if rec.Code == http.StatusOK && bytes.Contains(rec.Body.Bytes(), []byte("value-of-"+other)) {
			t.Fatalf("%s's secret reached %s: %s", other, who, rec.Body.String())
		}
		// Bad arguments are the caller's mistake: a tool error that says
		// "internal error" means the input reached a failure it should
		// have been refused before.
		if bytes.Contains(rec.Body.Bytes(), []byte("internal error (request id")) {
			t.Fatalf("arguments %s to %s: internal error: %s", args, w.tools[int(tool)%len(w.tools)], rec.Body.String())
		}
	})
}

// webForms are the web shell's form posts ({id} is replaced by a fuzzed
// user id). Account deletion and sign-out are left out: they end the
// fuzzing session.
var webForms = []string{
	"/signup", "/login", "/verify-email", "/password-reset", "/password-reset/confirm", "/account/password",
	"/account/email", "/account/verify-email", "/account/secrets/reveal", "/account/apps/{id}/revoke",
	"/admin/users", "/admin/users/{id}/roles", "/admin/users/{id}/roles/remove", "/admin/users/{id}/suspend",
	"/admin/users/{id}/unsuspend", "/admin/users/{id}/verify", accounts.PasswordSetupPath,
	"/oauth/authorize", "/account/delete?dry-run",
}

// FuzzWebForms posts arbitrary form bodies to the web shell's form
// endpoints, signed in as a user or as an admin, same-origin.
func FuzzWebForms(f *testing.F) {
	fuzzseed.Add(f,
		[]any{uint8(0), false, "email=new@example.com&username=new&password=a+long+enough+password", "1"},
		[]any{uint8(1), false, "email=alice@example.com&password=wrong&next=//evil.test", "1"},
		[]any{uint8(2), false, "token=" + strings.Repeat("A", 5000), "1"},
		[]any{uint8(5), false, "current=x&password=y&confirm=z", "1"},
		[]any{uint8(6), false, "email=%ff%fe@example.com", "1"},
		[]any{uint8(8), false, "name=api&name=other", "1"},
		[]any{uint8(9), false, "", "not-a-number"},
		[]any{uint8(10), true, "email=x@example.com&username=x&role=admin&verified=on", "1"},
		[]any{uint8(11), true, "role=admin", "99999999999999999999"},
		[]any{uint8(12), true, "role=%00", "-1"},
		[]any{uint8(13), true, "", "2"},
		[]any{uint8(16), false, "token=abc&password=p", "1"},
		[]any{uint8(17), false, "decision=approve&client_id=x", "1"},
		[]any{uint8(3), false, "a=%zz&&==&" + strings.Repeat("k=v&", 2000), "1"},
	)
	w := newFuzzWorld(f)
	f.Fuzz(func(t *testing.T, form uint8, admin bool, body, id string) {
		who := "alice"
		if admin {
			who = "carol"
		}
		path := strings.ReplaceAll(webForms[int(form)%len(webForms)], "{id}", urlPathSegment(id))
		if path == "/account/delete?dry-run" {
			t.Skip()
		}
		req, err := http.NewRequest(http.MethodPost, w.base+path, strings.NewReader(body))
		if err != nil {
			t.Skip()
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", w.base)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.AddCookie(w.cookies[who])
		w.serve(t, req)
		// The fuzzing accounts must stay usable: if the input changed a
		// password or an email, sign in again.
		check := httptest.NewRequest(http.MethodGet, w.base+"/account", nil)
		check.AddCookie(w.cookies[who])
		if rec := w.serve(t, check); rec.Code != http.StatusOK {
			u, err := w.srv.Accounts().Identity.UserByID(context.Background(), w.ids[who])
			if err != nil {
				t.Fatal(err)
			}
			if u.State() != accounts.StateActive {
				t.Skip() // suspended by an admin form: the next input signs in again
			}
			rec := httptest.NewRecorder()
			if _, err := w.srv.Accounts().Credentials.StartSession(rec, httptest.NewRequest("POST", "/login", nil), u, false); err != nil {
				t.Fatal(err)
			}
			w.cookies[who] = rec.Result().Cookies()[0]
		}
	})
}

func urlPathSegment(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r == '-' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "0"
	}
	return b.String()
}
