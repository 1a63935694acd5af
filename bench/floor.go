package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
)

// The floor (server f): a plain net/http handler that decodes one JSON-RPC
// envelope and encodes one answer, with no MCP library, no authentication
// and no session table. It answers exactly what the load generator sends
// (initialize, notifications/initialized, tools/list, tools/call echo,
// DELETE), in the shapes a real MCP client reads, so its row measures the
// same requests as the others: the most any MCP server written in Go can
// do on this machine. Every other row is also reported as a ratio to it.

// floorRequest is one JSON-RPC request or notification.
type floorRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  struct {
		Name      string `json:"name"`
		Arguments struct {
			Text string `json:"text"`
		} `json:"arguments"`
		ProtocolVersion string `json:"protocolVersion"`
	} `json:"params"`
}

// floorResponse is one JSON-RPC answer: a result or an error.
type floorResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *floorError     `json:"error,omitempty"`
}

type floorError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type floorContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type floorCallResult struct {
	Content []floorContent `json:"content"`
}

// floorTools is the tools/list answer: the echo tool, as (a) lists it.
var floorTools = json.RawMessage(`{"tools":[{"name":"echo","description":"Echoes its text.",` +
	`"inputSchema":{"type":"object","properties":{"text":{"type":"string","description":"text to echo"}},"required":["text"]}}]}`)

// floorHandler serves the floor's /mcp.
func floorHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
		case http.MethodDelete:
			w.WriteHeader(http.StatusOK)
			return
		default:
			w.Header().Set("Allow", "POST, DELETE")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		var req floorRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || req.JSONRPC != "2.0" || req.Method == "" {
			floorWrite(w, floorResponse{JSONRPC: "2.0", ID: json.RawMessage("null"),
				Error: &floorError{Code: -32700, Message: "the body is not one JSON-RPC 2.0 request"}})
			return
		}
		if len(req.ID) == 0 { // a notification
			w.WriteHeader(http.StatusAccepted)
			return
		}
		resp := floorResponse{JSONRPC: "2.0", ID: req.ID}
		switch req.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", floorSessionID())
			resp.Result = map[string]any{
				"protocolVersion": req.Params.ProtocolVersion,
				"capabilities":    map[string]any{"tools": map[string]any{}},
				"serverInfo":      map[string]string{"name": "bench-floor", "version": "1"},
			}
		case "tools/list":
			resp.Result = floorTools
		case "tools/call":
			if req.Params.Name != "echo" {
				resp.Error = &floorError{Code: -32602, Message: "unknown tool " + req.Params.Name}
				break
			}
			resp.Result = floorCallResult{Content: []floorContent{{Type: "text", Text: req.Params.Arguments.Text}}}
		case "ping":
			resp.Result = struct{}{}
		default:
			resp.Error = &floorError{Code: -32601, Message: "method not found: " + req.Method}
		}
		floorWrite(w, resp)
	})
}

func floorWrite(w http.ResponseWriter, resp floorResponse) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func floorSessionID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// serveFloor is server (f), the floor, on ln until ctx ends.
func serveFloor(ctx context.Context, ln net.Listener) error {
	return serveMCPHandler(ctx, ln, floorHandler())
}
