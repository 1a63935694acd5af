package enclavetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// ProtocolVersion is the MCP protocol version the kit's client speaks.
const ProtocolVersion = "2025-06-18"

// Client is an MCP session over streamable HTTP, authenticated with a
// bearer token.
type Client struct {
	url     string // the server's base URL
	http    *http.Client
	version string // the MCP protocol version spoken
	token   string
	session string
	init    json.RawMessage // initialize's result
	id      atomic.Int64
}

// DialOption changes how Dial opens a session.
type DialOption func(*Client)

// WithProtocolVersion makes the session speak MCP protocol version v (in
// initialize and in every request's MCP-Protocol-Version header) instead
// of ProtocolVersion.
func WithProtocolVersion(v string) DialOption { return func(c *Client) { c.version = v } }

// RPCError is a JSON-RPC error answer.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
	// Status is the HTTP status the error came with.
	Status int `json:"-"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

// ToolResult is the answer of tools/call.
type ToolResult struct {
	// IsError is set when the capability refused or failed; Text says why.
	IsError bool
	// Text joins the result's text blocks.
	Text string
	// Structured is the structured content, if any.
	Structured json.RawMessage
	// Meta is the result's _meta.
	Meta map[string]any
}

// Decode unmarshals the structured content into v.
func (r ToolResult) Decode(v any) error { return json.Unmarshal(r.Structured, v) }

// MCP opens an MCP session for the user, with a token from the real OAuth
// flow (User.Token).
func (u *User) MCP(t testing.TB) *Client {
	t.Helper()
	return u.s.MCP(t, u.Token(t))
}

// MCP opens an MCP session with token (initialize, then
// notifications/initialized). The session is deleted when t ends.
func (s *Server) MCP(t testing.TB, token string) *Client {
	t.Helper()
	return dial(t, s.URL, s.http, token)
}

// Dial opens an MCP session with token at url, the base URL of a server
// the kit did not start (its endpoint is url+"/mcp"), the way a client
// does: initialize, then notifications/initialized. It fails t unless
// both are accepted and the server names the session. A test that sends
// requests of its own sends SessionID as the Mcp-Session-Id header. The
// session is deleted when t ends (a server already stopped by then is
// not an error).
func Dial(t testing.TB, url, token string, opts ...DialOption) *Client {
	t.Helper()
	return dial(t, url, &http.Client{}, token, opts...)
}

func dial(t testing.TB, url string, hc *http.Client, token string, opts ...DialOption) *Client {
	t.Helper()
	c := &Client{url: strings.TrimSuffix(url, "/"), http: hc, version: ProtocolVersion, token: token}
	for _, o := range opts {
		o(c)
	}
	init := map[string]any{"protocolVersion": c.version, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "enclavetest", "version": "1"}}
	res, err := c.Request("initialize", init)
	if err != nil {
		t.Fatalf("enclavetest: MCP initialize: %v", err)
	}
	if c.session == "" {
		t.Fatal("enclavetest: MCP initialize: the answer names no session (no Mcp-Session-Id)")
	}
	c.init = res
	t.Cleanup(c.close)
	if err := c.notify("notifications/initialized"); err != nil {
		t.Fatalf("enclavetest: MCP initialized: %v", err)
	}
	return c
}

// SessionID is the session's id, the Mcp-Session-Id header of every
// request in it.
func (c *Client) SessionID() string { return c.session }

// InitializeResult is the result the server answered initialize with
// (its protocolVersion, capabilities, serverInfo …).
func (c *Client) InitializeResult() json.RawMessage { return c.init }

// Call runs tools/call. A refusal the capability reports (not found,
// invalid input …) is a ToolResult with IsError set; err is for transport
// and protocol failures (a *RPCError for a JSON-RPC error), and for a
// quota refusal: a *RPCError with code mcp.CodeQuotaExceeded whose data
// carries "retryAfter" (RFC 3339).
func (c *Client) Call(name string, args any) (ToolResult, error) {
	if args == nil {
		args = map[string]any{}
	}
	raw, err := c.Request("tools/call", map[string]any{"name": name, "arguments": args})
	if err != nil {
		return ToolResult{}, err
	}
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		Structured json.RawMessage `json:"structuredContent"`
		IsError    bool            `json:"isError"`
		Meta       map[string]any  `json:"_meta"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return ToolResult{}, fmt.Errorf("enclavetest: tools/call result: %w", err)
	}
	var text []string
	for _, b := range res.Content {
		if b.Type == "text" {
			text = append(text, b.Text)
		}
	}
	return ToolResult{IsError: res.IsError, Text: strings.Join(text, "\n"), Structured: res.Structured, Meta: res.Meta}, nil
}

// Tools returns the names tools/list shows this session.
func (c *Client) Tools() ([]string, error) {
	raw, err := c.Request("tools/list", map[string]any{})
	if err != nil {
		return nil, err
	}
	var res struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, err
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names, nil
}

// Request sends one JSON-RPC request and returns its result.
func (c *Client) Request(method string, params any) (json.RawMessage, error) {
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.id.Add(1), "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	status, raw, err := c.post(body)
	if err != nil {
		return nil, err
	}
	var msg struct {
		Result json.RawMessage `json:"result"`
		Error  *RPCError       `json:"error"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		return nil, fmt.Errorf("enclavetest: %s: status %d, not JSON-RPC: %.200s", method, status, raw)
	}
	if msg.Error != nil {
		msg.Error.Status = status
		return nil, msg.Error
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("enclavetest: %s: status %d", method, status)
	}
	return msg.Result, nil
}

func (c *Client) notify(method string) error {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
	status, _, err := c.post(body)
	if err == nil && status/100 != 2 {
		err = fmt.Errorf("status %d", status)
	}
	return err
}

// post sends one message and returns the single JSON-RPC message of the
// answer (a JSON body, or the last event of an SSE stream).
func (c *Client) post(body []byte) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, c.url+"/mcp", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", c.version)
	req.Header.Set("Authorization", "Bearer "+c.token)
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, nil, err
	}
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		c.session = sid
	}
	return resp.StatusCode, Message(resp.Header.Get("Content-Type"), raw), nil
}

func (c *Client) close() {
	if c.session == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.url+"/mcp", nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Mcp-Session-Id", c.session)
	req.Header.Set("MCP-Protocol-Version", c.version)
	if resp, err := c.http.Do(req); err == nil {
		resp.Body.Close()
	}
}
