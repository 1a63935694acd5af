package enclavetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// ProtocolVersion is the MCP protocol version the kit's client speaks.
const ProtocolVersion = "2025-06-18"

// Client is an MCP session over streamable HTTP, authenticated with a
// bearer token.
type Client struct {
	s       *Server
	token   string
	session string
	id      atomic.Int64
}

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
	c := &Client{s: s, token: token}
	init := map[string]any{"protocolVersion": ProtocolVersion, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "enclavetest", "version": "1"}}
	if _, err := c.Request("initialize", init); err != nil {
		t.Fatalf("enclavetest: MCP initialize: %v", err)
	}
	if err := c.notify("notifications/initialized"); err != nil {
		t.Fatalf("enclavetest: MCP initialized: %v", err)
	}
	t.Cleanup(c.close)
	return c
}

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
	req, err := http.NewRequest(http.MethodPost, c.s.URL+"/mcp", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", ProtocolVersion)
	req.Header.Set("Authorization", "Bearer "+c.token)
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	resp, err := c.s.http.Do(req)
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
	req, err := http.NewRequest(http.MethodDelete, c.s.URL+"/mcp", nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Mcp-Session-Id", c.session)
	req.Header.Set("MCP-Protocol-Version", ProtocolVersion)
	if resp, err := c.s.http.Do(req); err == nil {
		resp.Body.Close()
	}
}
