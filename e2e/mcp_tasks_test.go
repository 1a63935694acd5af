package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// modern posts one protocol 2026-07-28 request to /mcp.
func modern(t *testing.T, base, token, method, name string, params map[string]any) (int, map[string]any) {
	t.Helper()
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{},
			"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}},
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Mcp-Name", name)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw := readMessage(t, resp)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %d %q", method, resp.StatusCode, raw)
	}
	return resp.StatusCode, m
}

// The assembled server keeps tasks in SQL and input-required state signed
// with its key ring, both per user: another user's task id answers like an
// unknown one, and another user's request state is refused.
func TestMCPTasksAndRequestStateArePerUser(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			var base string
			srv, base := serveHTTP(t, d, func(c *enclave.Config) {
				c.TokenVerifier = testVerifier(&base)
			})
			err := srv.Registry().Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
				Name: "confirmThenWork", Domain: "test", Description: "Asks, then works as a task.",
				Annotations: &capabilities.Annotations{ReadOnly: true}, Task: capabilities.TaskOptional,
				Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
					ans, err := call.Ask(ctx, capabilities.Question{Key: "go", Elicit: &capabilities.ElicitRequest{Message: "go?",
						Schema: json.RawMessage(`{"type":"object","properties":{"v":{"type":"string"}}}`)}})
					if err != nil {
						return capabilities.Result{}, err
					}
					if _, err := call.Detach(ctx); err != nil {
						return capabilities.Result{}, err
					}
					return capabilities.TextResult(fmt.Sprintf("%v for %s", ans[0].Elicit.Content["v"], call.Caller.Username)), nil
				},
			}))
			if err != nil {
				t.Fatal(err)
			}
			tokens := map[string]string{}
			for _, name := range []string{"alice", "bob"} {
				u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "a long password for " + name})
				if err != nil {
					t.Fatal(err)
				}
				tokens[name] = "test-token:" + u.StableID
			}
			call := map[string]any{"name": "confirmThenWork", "arguments": map[string]any{}}
			_, m := modern(t, base, tokens["alice"], "tools/call", "confirmThenWork", call)
			state, _ := m["result"].(map[string]any)["requestState"].(string)
			if state == "" {
				t.Fatalf("round 1: %v", m)
			}
			answer := map[string]any{"go": map[string]any{"action": "accept", "content": map[string]any{"v": "done"}}}
			// Bob replays alice's state: refused.
			status, m := modern(t, base, tokens["bob"], "tools/call", "confirmThenWork",
				map[string]any{"name": "confirmThenWork", "arguments": map[string]any{}, "inputResponses": answer, "requestState": state})
			if e, _ := m["error"].(map[string]any); status != http.StatusBadRequest || e["code"] != float64(-32602) {
				t.Fatalf("bob replaying alice's state: %d %v", status, m)
			}
			_, m = modern(t, base, tokens["alice"], "tools/call", "confirmThenWork",
				map[string]any{"name": "confirmThenWork", "arguments": map[string]any{}, "inputResponses": answer, "requestState": state})
			id, _ := m["result"].(map[string]any)["taskId"].(string)
			if id == "" {
				t.Fatalf("round 2: %v", m)
			}
			_, unknown := modern(t, base, tokens["bob"], "tasks/get", "nope", map[string]any{"taskId": "nope"})
			if _, m := modern(t, base, tokens["bob"], "tasks/get", id, map[string]any{"taskId": id}); fmt.Sprint(m["error"]) != fmt.Sprint(unknown["error"]) || m["error"] == nil {
				t.Fatalf("bob's tasks/get of alice's task: %v, want %v", m, unknown)
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				_, m := modern(t, base, tokens["alice"], "tasks/get", id, map[string]any{"taskId": id})
				r, _ := m["result"].(map[string]any)
				if r["status"] == "completed" {
					if !strings.Contains(fmt.Sprint(r["result"]), "done for alice") {
						t.Fatalf("completed task: %v", r)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("task never completed: %v", m)
				}
			}
		})
	}
}

// A running task of the assembled server stops once its owner is
// suspended: the access recheck loads the account from SQL.
func TestMCPTaskStopsWhenOwnerSuspended(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			var base string
			srv, base := serveHTTP(t, d, func(c *enclave.Config) {
				c.TokenVerifier = testVerifier(&base)
				c.MCP = mcp.Options{Recheck: 50 * time.Millisecond}
			})
			ended := make(chan bool, 1)
			err := srv.Registry().Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
				Name: "longWrite", Domain: "test", Description: "Writes for a long time as a task.",
				Annotations: &capabilities.Annotations{}, Task: capabilities.TaskOptional,
				Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
					ctx, err := call.Detach(ctx)
					if err != nil {
						return capabilities.Result{}, err
					}
					select {
					case <-ctx.Done():
						ended <- true
						return capabilities.Result{}, ctx.Err()
					case <-time.After(15 * time.Second):
						ended <- false
						return capabilities.TextResult("wrote"), nil
					}
				},
			}))
			if err != nil {
				t.Fatal(err)
			}
			u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: "alice@example.com", Username: "alice", Password: "a long password for alice"})
			if err != nil {
				t.Fatal(err)
			}
			_, m := modern(t, base, "test-token:"+u.StableID, "tools/call", "longWrite", map[string]any{"name": "longWrite", "arguments": map[string]any{}})
			if id, _ := m["result"].(map[string]any)["taskId"].(string); id == "" {
				t.Fatalf("tools/call: %v", m)
			}
			if _, err := srv.Accounts().Lifecycle.Suspend(ctx, u.ID); err != nil {
				t.Fatal(err)
			}
			select {
			case ok := <-ended:
				if !ok {
					t.Fatal("the task went on after its owner was suspended")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the task still runs 10 s after its owner was suspended")
			}
		})
	}
}
