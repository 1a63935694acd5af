package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
)

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpClient connects an mcp-go client with token to s.
func mcpClient(t *testing.T, s *enclavetest.Server, token string) *mcpclient.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(s.URL+"/mcp", transport.WithHTTPBasicClient(&http.Client{Transport: bearerRT{token}}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, mcpclient.WithProtocolVersion("2025-11-25"))
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Initialize(t.Context(), mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{
		ProtocolVersion: "2025-11-25", ClientInfo: mcpgo.Implementation{Name: "test", Version: "1"},
	}}); err != nil {
		t.Fatal(err)
	}
	return c
}

// counted is a non-idempotent capability that counts its runs per user and
// can be held (gate) to make a call slow.
type counted struct {
	mu   sync.Mutex
	runs map[string]int
	gate chan struct{} // when non-nil, each run waits for a receive
	done chan struct{} // told when a run finishes
}

func (c *counted) capability() capabilities.Capability {
	return capabilities.Define(capabilities.Spec[struct {
		Amount int `json:"amount"`
	}, capabilities.Result]{
		Name: "chargeTest", Domain: "test", Title: "Charge", Description: "Counts its runs (test).",
		Annotations: &capabilities.Annotations{},
		Handler: func(ctx context.Context, call *capabilities.Call, in struct {
			Amount int `json:"amount"`
		}) (capabilities.Result, error) {
			c.mu.Lock()
			gate := c.gate
			c.mu.Unlock()
			if gate != nil {
				<-gate
			}
			c.mu.Lock()
			c.runs[call.Caller.UserID]++
			n := c.runs[call.Caller.UserID]
			c.mu.Unlock()
			defer func() {
				select {
				case c.done <- struct{}{}:
				default:
				}
			}()
			return capabilities.TextResult(fmt.Sprintf("run %d charged %d for %s", n, in.Amount, call.Caller.Username)), nil
		},
	})
}

func (c *counted) count(user string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[user]
}

func keyed(key any, amount int) mcpgo.CallToolRequest {
	req := mcpgo.CallToolRequest{}
	req.Params.Name = "chargeTest"
	req.Params.Arguments = map[string]any{"amount": amount}
	if key != nil {
		req.Params.Meta = &mcpgo.Meta{AdditionalFields: map[string]any{capabilities.MetaIdempotencyKey: key}}
	}
	return req
}

func resultText(t *testing.T, res *mcpgo.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcpgo.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// A call with an idempotency key runs once: a retry after the client gave
// up (timeout) gets the first result, a concurrent duplicate waits for it,
// other arguments are refused, another user's same key is theirs alone, a
// malformed key is invalid params, and the rows are removed with the
// account and by retention. Through real MCP, on both dialects.
func TestIdempotentCallsThroughMCP(t *testing.T) {
	var cap *counted // one per server (Setup runs before each dialect's test)
	enclavetest.Each(t, enclavetest.Options{Setup: func(srv *enclave.Server) error {
		cap = &counted{runs: map[string]int{}, done: make(chan struct{}, 16)}
		return srv.Registry().Register(cap.capability())
	}}, func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		ca, cb := mcpClient(t, s, alice.Token(t)), mcpClient(t, s, bob.Token(t))

		// 1. The client times out while the handler is held; the handler
		// finishes anyway; the retry gets its result without a second run.
		gate := make(chan struct{})
		cap.mu.Lock()
		cap.gate = gate
		cap.mu.Unlock()
		tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := ca.CallTool(tctx, keyed("order-1", 5))
		cancel()
		if err == nil {
			t.Fatal("the held call did not time out")
		}
		cap.mu.Lock()
		cap.gate = nil
		cap.mu.Unlock()
		close(gate)
		select {
		case <-cap.done:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler never finished after the client left")
		}
		var res *mcpgo.CallToolResult
		for deadline := time.Now().Add(10 * time.Second); ; {
			res, err = ca.CallTool(ctx, keyed("order-1", 5))
			if err != nil {
				t.Fatal(err)
			}
			// The result may still be being stored: "still running" then.
			if !res.IsError || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if got := resultText(t, res); res.IsError || got != "run 1 charged 5 for alice" {
			t.Fatalf("retry answered %q (isError %v), want the first run's result", got, res.IsError)
		}
		if n := cap.count(alice.StableID); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}

		// 2. Same key, other arguments: refused, handler not run.
		res, err = ca.CallTool(ctx, keyed("order-1", 6))
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.Contains(resultText(t, res), "different arguments") {
			t.Fatalf("other arguments: %q (isError %v)", resultText(t, res), res.IsError)
		}

		// 3. Concurrent duplicates run once and both get the result.
		gate = make(chan struct{})
		cap.mu.Lock()
		cap.gate = gate
		cap.mu.Unlock()
		var wg sync.WaitGroup
		out := make([]string, 2)
		for i := range 2 {
			wg.Go(func() {
				r, err := ca.CallTool(ctx, keyed("order-2", 7))
				if err != nil {
					out[i] = "error: " + err.Error()
					return
				}
				out[i] = resultText(t, r)
			})
		}
		time.Sleep(300 * time.Millisecond)
		close(gate)
		wg.Wait()
		cap.mu.Lock()
		cap.gate = nil
		cap.mu.Unlock()
		if out[0] != "run 2 charged 7 for alice" || out[1] != out[0] {
			t.Fatalf("concurrent duplicates answered %q", out)
		}
		if n := cap.count(alice.StableID); n != 2 {
			t.Fatalf("handler ran %d times for alice, want 2", n)
		}

		// 4. Bob's same key is his own: it runs for him.
		res, err = cb.CallTool(ctx, keyed("order-1", 5))
		if err != nil {
			t.Fatal(err)
		}
		if got := resultText(t, res); got != "run 1 charged 5 for bob" {
			t.Fatalf("bob's call with alice's key answered %q", got)
		}

		// 5. Without a key every call runs.
		for range 2 {
			if _, err := ca.CallTool(ctx, keyed(nil, 1)); err != nil {
				t.Fatal(err)
			}
		}
		if n := cap.count(alice.StableID); n != 4 {
			t.Fatalf("unkeyed calls: handler ran %d times in all, want 4", n)
		}

		// 6. Malformed keys are invalid params, and nothing runs.
		for _, bad := range []any{"", strings.Repeat("k", 129), 42, "tab\tkey"} {
			_, err := ca.CallTool(ctx, keyed(bad, 1))
			if err == nil || !strings.Contains(err.Error(), capabilities.MetaIdempotencyKey) {
				t.Errorf("key %#v: error %v, want invalid params naming the field", bad, err)
			}
		}
		if _, err := ca.CallTool(ctx, keyed(strings.Repeat("k", 128), 1)); err != nil {
			t.Errorf("a 128-character key was refused: %v", err)
		}
		if n := cap.count(alice.StableID); n != 5 {
			t.Fatalf("after bad keys: handler ran %d times in all, want 5", n)
		}

		// 7. Rows are per user, purged after 24 hours (and then the key
		// runs again), and removed with the account.
		db := s.Store().DB
		rows := func(u *enclavetest.User) int {
			n, err := db.NewSelect().Table("idempotency_keys").Where("user_id = ?", u.ID).Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
		if rows(alice) != 3 || rows(bob) != 1 {
			t.Fatalf("rows: alice %d (want 3), bob %d (want 1)", rows(alice), rows(bob))
		}
		if _, err := db.NewUpdate().Table("idempotency_keys").Set("created_at = ?", time.Now().UTC().Add(-25*time.Hour)).
			Where("user_id = ?", bob.ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		res, err = cb.CallTool(ctx, keyed("order-1", 5))
		if err != nil {
			t.Fatal(err)
		}
		if got := resultText(t, res); got != "run 2 charged 5 for bob" {
			t.Fatalf("an expired key replayed %q; want a new run", got)
		}
		if _, err := db.NewUpdate().Table("idempotency_keys").Set("created_at = ?", time.Now().UTC().Add(-25*time.Hour)).
			Where("user_id = ?", bob.ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		rep, err := s.PurgeExpired(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Rows["idempotency_keys"] != 1 || rows(bob) != 0 || rows(alice) != 3 {
			t.Fatalf("retention removed %d rows; bob has %d, alice %d", rep.Rows["idempotency_keys"], rows(bob), rows(alice))
		}
		if _, err := s.Lifecycle().Delete(ctx, storage.Owner{ID: alice.ID, StableID: alice.StableID}); err != nil {
			t.Fatal(err)
		}
		if n, _ := db.NewSelect().Table("idempotency_keys").Count(ctx); n != 0 {
			t.Fatalf("%d rows left after the account was deleted", n)
		}
	})
}

// Idempotency rows are never exported.
func TestIdempotencyKeysLeftOutOfExport(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{})
	tbl, ok := s.Inventory().Table("idempotency_keys")
	if !ok || !tbl.SkipExport {
		t.Fatalf("idempotency_keys inventory entry: %+v %v, want registered with SkipExport", tbl, ok)
	}
}
