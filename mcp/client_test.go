package mcp

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

// bearerTransport adds the token to every request, including the DELETE
// that mcp-go's client sends on Close without its configured headers.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

type recordedNotes struct {
	mu    sync.Mutex
	notes []mcpgo.JSONRPCNotification
}

func (r *recordedNotes) add(n mcpgo.JSONRPCNotification) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, n)
}

func (r *recordedNotes) all() []mcpgo.JSONRPCNotification {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.notes)
}

type answer struct{ name string }

func (a answer) Elicit(_ context.Context, req mcpgo.ElicitationRequest) (*mcpgo.ElicitationResult, error) {
	return &mcpgo.ElicitationResult{ElicitationResponse: mcpgo.ElicitationResponse{
		Action:  mcpgo.ElicitationResponseActionAccept,
		Content: map[string]any{"name": a.name + " answering " + req.Params.Message},
	}}, nil
}

// connect starts an mcp-go client for token, pinned to a session-based
// protocol version (its default would be the stateless 2026-07-28).
func (f *fixture) connect(token string) (*mcpclient.Client, *recordedNotes) {
	f.t.Helper()
	tr, err := transport.NewStreamableHTTP(f.url, transport.WithHTTPBasicClient(&http.Client{Transport: bearerTransport{token}}))
	must(f.t, err)
	c := mcpclient.NewClient(tr,
		mcpclient.WithProtocolVersion(testProtocol),
		mcpclient.WithElicitationHandler(answer{token}),
	)
	notes := &recordedNotes{}
	c.OnNotification(notes.add)
	must(f.t, c.Start(f.t.Context()))
	f.t.Cleanup(func() { c.Close() })
	_, err = c.Initialize(f.t.Context(), mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{
		ProtocolVersion: testProtocol,
		ClientInfo:      mcpgo.Implementation{Name: "test", Version: "1"},
		Capabilities:    mcpgo.ClientCapabilities{Elicitation: &mcpgo.ElicitationCapability{}},
	}})
	must(f.t, err)
	return c, notes
}

func text(res *mcpgo.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(mcpgo.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// TestTwoUsersProgressIsolation runs two users' calls at the same time
// (held together by a barrier) and checks each client receives only its
// own progress notifications.
func TestTwoUsersProgressIsolation(t *testing.T) {
	f := newFixture(t)
	f.gate = newBarrier(2)
	users := []string{"alice", "bob"}
	clients := make([]*mcpclient.Client, 2)
	notes := make([]*recordedNotes, 2)
	for i, u := range users {
		clients[i], notes[i] = f.connect(u + "-token")
	}
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Go(func() {
			res, err := clients[i].CallTool(t.Context(), mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{
				Name: "progress", Arguments: map[string]any{"tag": "t"},
				Meta: &mcpgo.Meta{ProgressToken: "tok-" + u},
			}})
			if err != nil {
				t.Errorf("%s: %v", u, err)
				return
			}
			if got := text(res); got != u+"/t" {
				t.Errorf("%s: result %q", u, got)
			}
		})
	}
	wg.Wait()
	for i, u := range users {
		progress := 0
		for _, n := range notes[i].all() {
			if n.Method != string(mcpgo.MethodNotificationProgress) {
				continue
			}
			progress++
			fields := n.Params.AdditionalFields
			if fields["progressToken"] != "tok-"+u || fields["message"] != u+"/t" {
				t.Errorf("%s received %v", u, fields)
			}
		}
		if progress != 3 {
			t.Errorf("%s received %d progress notifications, want 3", u, progress)
		}
	}
}

func TestClientIntegration(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect("alice-token")
	tools, err := c.ListTools(t.Context(), mcpgo.ListToolsRequest{})
	must(t, err)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Contains(names, "whoami") || slices.Contains(names, "adminOnly") {
		t.Fatalf("alice lists %v", names)
	}

	res, err := c.CallTool(t.Context(), mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: "whoami"}})
	must(t, err)
	if s := fmt.Sprint(res.StructuredContent); !strings.Contains(s, "userId:alice") {
		t.Fatalf("whoami structured content = %s", s)
	}

	// Elicitation goes out on the call's own stream and the answer comes
	// back to the handler that asked.
	res, err = c.CallTool(t.Context(), mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: "ask"}})
	must(t, err)
	if got := text(res); got != "accept:alice-token answering name?" {
		t.Fatalf("ask = %q (error %v)", got, res.IsError)
	}

	res, err = c.CallTool(t.Context(), mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: "echo", Arguments: map[string]any{"text": 5}}})
	must(t, err)
	if !res.IsError || !strings.Contains(text(res), "invalid arguments") {
		t.Fatalf("schema violation answered %q", text(res))
	}
}

// TestStatelessClientIntegration uses mcp-go's client with its default, the
// stateless 2026-07-28 protocol: calls stand alone, and asking the user
// goes through the retry round.
func TestStatelessClientIntegration(t *testing.T) {
	f := newFixture(t)
	tr, err := transport.NewStreamableHTTP(f.url, transport.WithHTTPBasicClient(&http.Client{Transport: bearerTransport{"alice-token"}}))
	must(t, err)
	c := mcpclient.NewClient(tr, mcpclient.WithElicitationHandler(answer{"alice"}))
	must(t, c.Start(t.Context()))
	t.Cleanup(func() { c.Close() })
	init, err := c.Initialize(t.Context(), mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{
		ClientInfo:   mcpgo.Implementation{Name: "test", Version: "1"},
		Capabilities: mcpgo.ClientCapabilities{Elicitation: &mcpgo.ElicitationCapability{}},
	}})
	must(t, err)
	if init.ProtocolVersion != "2026-07-28" {
		t.Fatalf("negotiated %s", init.ProtocolVersion)
	}
	res, err := c.CallTool(t.Context(), mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: "whoami"}})
	must(t, err)
	if s := fmt.Sprint(res.StructuredContent); !strings.Contains(s, "userId:alice") {
		t.Fatalf("whoami = %s", s)
	}
	res, err = c.CallTool(t.Context(), mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: "ask"}})
	must(t, err)
	if got := text(res); got != "accept:alice answering name?" {
		t.Fatalf("ask = %q", got)
	}
}
