package sqlsessions

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

type tagIn struct {
	Tag string `json:"tag"`
}

// TestCallStreamResumesOnAnotherReplica: on two replicas sharing this
// store and a bus, every event of a session's tools/call stream (its
// progress, its log message, its answer) carries an id recorded here, and
// the stream resumes on the other replica with Last-Event-ID, within the
// same session only.
func TestCallStreamResumesOnAnotherReplica(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		alice, bob := users(t, s)
		reg := capabilities.NewRegistry(capabilities.Options{})
		must(t, reg.Register(capabilities.Define(capabilities.Spec[tagIn, capabilities.Result]{
			Name: "progress", Domain: "test", Description: "Reports progress.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Handler: func(ctx context.Context, call *capabilities.Call, in tagIn) (capabilities.Result, error) {
				for i := 1; i <= 2; i++ {
					if err := call.Progress(ctx, float64(i), 2, in.Tag); err != nil {
						return capabilities.Result{}, err
					}
				}
				if err := call.Log(ctx, capabilities.LogInfo, "test", in.Tag); err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.TextResult("done " + in.Tag), nil
			},
		})))
		verifier := mcp.TokenVerifierFunc(func(_ context.Context, token string) (mcp.TokenInfo, error) {
			user := map[string]string{"alice-token": alice, "bob-token": bob}[token]
			if user == "" {
				return mcp.TokenInfo{}, mcp.ErrInvalidToken
			}
			return mcp.TokenInfo{UserID: user, Scopes: []string{"mcp"}, Audience: []string{"https://mcp.test/mcp"}, ExpiresAt: time.Now().Add(time.Hour)}, nil
		})
		loader := capabilitiestest.NewLoader(capabilitiestest.User(alice), capabilitiestest.User(bob))
		group := cluster.NewLoopback()
		var urls []string
		for range 2 {
			srv, err := mcp.New(mcp.Options{Registry: reg, Verifier: verifier, Loader: loader, BaseURL: "https://mcp.test",
				Bus: group.Join(), Sessions: New(s)})
			must(t, err)
			hs := httptest.NewServer(srv)
			t.Cleanup(func() {
				hs.CloseClientConnections()
				hs.Close()
				srv.Close()
			})
			urls = append(urls, hs.URL+mcp.Path)
		}
		do := func(method, url, token, sid, body string, header ...string) *http.Response {
			req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
			must(t, err)
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if sid != "" {
				req.Header.Set("Mcp-Session-Id", sid)
				req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
			}
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			must(t, err)
			t.Cleanup(func() { resp.Body.Close() })
			return resp
		}
		initialize := func(token string) string {
			resp := do(http.MethodPost, urls[0], token, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
			sid := resp.Header.Get("Mcp-Session-Id")
			if resp.StatusCode != http.StatusOK || sid == "" {
				t.Fatalf("initialize: %d", resp.StatusCode)
			}
			do(http.MethodPost, urls[0], token, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			return sid
		}
		sid, other, bobs := initialize("alice-token"), initialize("alice-token"), initialize("bob-token")

		type event struct{ id, data string }
		read := func(resp *http.Response) []event {
			var out []event
			var id string
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
					id = v
				}
				if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					out = append(out, event{id, v})
					id = ""
				}
			}
			return out
		}
		call := do(http.MethodPost, urls[0], "alice-token", sid,
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"progress","arguments":{"tag":"t"},"_meta":{"progressToken":"p"}}}`)
		events := read(call)
		if len(events) != 4 || !strings.Contains(events[3].data, `"done t"`) {
			t.Fatalf("stream = %v", events)
		}
		for _, e := range events {
			if e.id == "" {
				t.Fatalf("event without an id: %s", e.data)
			}
		}
		for _, o := range []struct{ token, sid string }{{"alice-token", other}, {"bob-token", bobs}} {
			if r := do(http.MethodGet, urls[1], o.token, o.sid, "", "Last-Event-ID", events[0].id); r.StatusCode != http.StatusBadRequest {
				t.Fatalf("%s resuming alice's stream in another session: %d", o.token, r.StatusCode)
			}
		}
		r := do(http.MethodGet, urls[1], "alice-token", sid, "", "Last-Event-ID", events[0].id)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("resume on the other replica: %d", r.StatusCode)
		}
		replayed := read(r)
		if len(replayed) != 3 {
			t.Fatalf("replayed %v, want %v", replayed, events[1:])
		}
		for i, e := range replayed {
			var got, want any
			_ = json.Unmarshal([]byte(e.data), &got)
			_ = json.Unmarshal([]byte(events[i+1].data), &want)
			if e.id != events[i+1].id || !jsonEqual(got, want) {
				t.Fatalf("replayed %v, want %v", replayed, events[1:])
			}
		}
	})
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
