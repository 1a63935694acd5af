package main

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

type model struct{}

func (model) CreateMessage(context.Context, mcpgo.CreateMessageRequest) (*mcpgo.CreateMessageResult, error) {
	return &mcpgo.CreateMessageResult{
		SamplingMessage: mcpgo.SamplingMessage{Role: mcpgo.RoleAssistant, Content: mcpgo.NewTextContent("hi there")},
		Model:           "test",
	}, nil
}

func TestServesTheSuiteTools(t *testing.T) {
	hs := httptest.NewUnstartedServer(nil)
	handler, closeMCP, err := newHandler(t.Context(), "http://"+hs.Listener.Addr().String(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = handler
	hs.Start()
	t.Cleanup(func() { hs.Close(); closeMCP() })

	tr, err := transport.NewStreamableHTTP(hs.URL + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, mcpclient.WithProtocolVersion("2025-11-25"), mcpclient.WithSamplingHandler(model{}))
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Initialize(t.Context(), mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{
		ProtocolVersion: "2025-11-25",
		ClientInfo:      mcpgo.Implementation{Name: "test", Version: "1"},
		Capabilities:    mcpgo.ClientCapabilities{Sampling: &mcpgo.SamplingCapability{}},
	}}); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args map[string]any
		want string
	}{
		"test_simple_text": {nil, "This is a simple text response for testing."},
		"test_sampling":    {map[string]any{"prompt": "hello"}, "LLM response: hi there"},
	} {
		want := tc.want
		res, err := c.CallTool(t.Context(), mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: name, Arguments: tc.args}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := res.Content[0].(mcpgo.TextContent).Text; !strings.Contains(got, want) {
			t.Fatalf("%s = %q, want %q", name, got, want)
		}
	}
	if _, err := c.ReadResource(t.Context(), mcpgo.ReadResourceRequest{Params: mcpgo.ReadResourceParams{URI: "test://template/7/data"}}); err != nil {
		t.Fatal(err)
	}
}

func TestRefusesNonLoopback(t *testing.T) {
	if ln, err := listenLoopback("0.0.0.0:0"); err == nil {
		ln.Close()
		t.Fatal("listened on a non-loopback address with authentication off")
	}
}

func TestRefusedInProductionAndOffLoopback(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := run(t.Context(), "127.0.0.1:0", true, quiet); err == nil || !strings.Contains(err.Error(), "production") {
		t.Fatalf("production: %v", err)
	}
	if err := run(t.Context(), "0.0.0.0:0", false, quiet); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("non-loopback address: %v", err)
	}
}
