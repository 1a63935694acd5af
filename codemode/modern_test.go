package codemode_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/enclavetest"
)

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// goClient connects mcp-go's client with its default protocol (the
// stateless 2026-07-28 one, or a session for version).
func goClient(t *testing.T, s *enclavetest.Server, token, version string) *mcpclient.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(s.URL+"/mcp", transport.WithHTTPBasicClient(&http.Client{Transport: bearer{token}}))
	if err != nil {
		t.Fatal(err)
	}
	var opts []mcpclient.ClientOption
	if version != "" {
		opts = append(opts, mcpclient.WithProtocolVersion(version))
	}
	c := mcpclient.NewClient(tr, opts...)
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{ProtocolVersion: version, ClientInfo: mcpgo.Implementation{Name: "test", Version: "1"}}}
	if version == "" {
		req.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	}
	if _, err := c.Initialize(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestExportsOverBothProtocolEras lists and calls a package export with
// mcp-go's client, on the stateless 2026-07-28 protocol and in a
// 2025-11-25 session: the owner sees and runs it, another user neither
// sees it nor tells it from an unknown name.
func TestExportsOverBothProtocolEras(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{})
	alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
	if res, err := alice.MCP(t).Call("packageSave", weather); err != nil || res.IsError {
		t.Fatalf("save: %v %s", err, res.Text)
	}
	tool := codemode.ExportCapabilityName("weather", "forecast")
	for _, version := range []string{"", "2025-11-25"} {
		t.Run("version "+version, func(t *testing.T) {
			a, b := goClient(t, s, alice.Token(t), version), goClient(t, s, bob.Token(t), version)
			names := func(c *mcpclient.Client) []string {
				res, err := c.ListTools(t.Context(), mcpgo.ListToolsRequest{})
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, tl := range res.Tools {
					out = append(out, tl.Name)
				}
				return out
			}
			if !slices.Contains(names(a), tool) || slices.Contains(names(b), tool) {
				t.Fatalf("alice lists %v; bob lists %v", names(a), names(b))
			}
			res, err := a.CallTool(t.Context(), mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: tool, Arguments: map[string]any{"city": "Oslo"}}})
			if err != nil || res.IsError {
				t.Fatalf("alice's call: %v %+v", err, res)
			}
			if !strings.Contains(mcpgo.GetTextFromContent(res.Content[0]), `"city":"Oslo"`) {
				t.Fatalf("alice's call answered %+v", res.Content)
			}
			answer := func(name string) string {
				res, err := b.CallTool(t.Context(), mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: name, Arguments: map[string]any{"city": "Oslo"}}})
				if err != nil {
					return strings.ReplaceAll(err.Error(), name, "NAME")
				}
				return strings.ReplaceAll(mcpgo.GetTextFromContent(res.Content[0]), name, "NAME")
			}
			if got, unknown := answer(tool), answer(codemode.ExportCapabilityName("weather", "nothing")); got != unknown {
				t.Fatalf("bob calling alice's export got %q, an unknown name %q", got, unknown)
			}
		})
	}
}
