package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
)

// queryRecorder is a bun query hook that records the statements run while
// it is on.
type queryRecorder struct {
	on   atomic.Bool
	mu   sync.Mutex
	seen []string
	// prepared counts statements run outside bun (oauth.Server.BearerChecks).
	prepared func() int64
}

func (q *queryRecorder) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	return ctx
}

func (q *queryRecorder) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	if !q.on.Load() {
		return
	}
	s := strings.Join(strings.Fields(e.Query), " ")
	q.mu.Lock()
	q.seen = append(q.seen, s)
	q.mu.Unlock()
}

func recordQueries(st *storage.Store) *queryRecorder {
	q := &queryRecorder{}
	st.DB.AddQueryHook(q)
	if st.Reader != st.DB {
		st.Reader.AddQueryHook(q)
	}
	return q
}

// during returns the statements f runs: those bun's hooks see, plus one
// line per prepared bearer check (which runs outside bun) when prepared is
// set.
func (q *queryRecorder) during(f func() error) ([]string, error) {
	q.mu.Lock()
	q.seen = nil
	q.mu.Unlock()
	var before int64
	if q.prepared != nil {
		before = q.prepared()
	}
	q.on.Store(true)
	err := f()
	q.on.Store(false)
	q.mu.Lock()
	defer q.mu.Unlock()
	out := append([]string(nil), q.seen...)
	if q.prepared != nil {
		for range q.prepared() - before {
			out = append([]string{"(prepared) the bearer check: token, grant, account state, roles and permissions"}, out...)
		}
	}
	return out, err
}

// QueryTrace lists the SQL statements of authenticated tools/call requests
// served in process through the same handler the network gets.
type QueryTrace struct {
	Initialize []string `json:"initialize"`  // the session's initialize request
	FirstCall  []string `json:"first_call"`  // the session's first tools/call
	SecondCall []string `json:"second_call"` // steady state
}

// traceCall initializes a session with token and records the statements
// of two tools/call echo requests.
func traceCall(h http.Handler, q *queryRecorder, token string) (QueryTrace, error) {
	var tr QueryTrace
	session := ""
	send := func(body string) error {
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", protocolVersion)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code/100 != 2 {
			return fmt.Errorf("status %d: %s", rec.Code, rec.Body.String())
		}
		if session == "" {
			session = rec.Header().Get("Mcp-Session-Id")
		}
		if strings.Contains(body, `"tools/call"`) {
			var m struct {
				Result *json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || m.Result == nil {
				return fmt.Errorf("tools/call: %s", rec.Body.String())
			}
		}
		return nil
	}
	var err error
	tr.Initialize, err = q.during(func() error {
		return send(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"trace","version":"1"}}}`, protocolVersion))
	})
	if err != nil {
		return tr, err
	}
	if err := send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		return tr, err
	}
	call := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"trace"}}}`
	if tr.FirstCall, err = q.during(func() error { return send(fmt.Sprintf(call, 2)) }); err != nil {
		return tr, err
	}
	tr.SecondCall, err = q.during(func() error { return send(fmt.Sprintf(call, 3)) })
	return tr, err
}
