package mcp

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// The direct path: a session's tools/call (protocol 2025-11-25 and
// earlier), the call agents make most, is answered here from the envelope
// the transport already decoded, instead of being handed to mcp-go's
// transport, which reads the body again, decodes it four more times (the
// envelope, the protocol era, the message, the arguments into a map), makes
// a session object and a forwarding goroutine per request, and encodes the
// answer through reflection. Everything else about the request is the same
// as on mcp-go's path: the session was bound to the caller, the request is
// tracked for notifications/cancelled, tools/call goes through the same
// screen (a hidden tool answers exactly like an unknown one) and the same
// callTool. Its notifications (progress, log messages) and the questions
// it asks the client are written to the response as they are sent,
// turning it into an event stream, with event ids recorded when the
// session's streams are resumable; the answer follows on the same stream.
// Because the handler writes them itself, each write is bounded
// (eventWriteTimeout: a client that stops reading does not hold the
// handler), and nothing is written once the answer was (a handler's
// goroutine that outlives the call gets errAnswered, never the response
// net/http has finished). The direct path's answers are checked against
// mcp-go's, request by request, in direct_test.go (Options.noDirect).
//
// Anything the direct path does not cover (another method, protocol
// 2026-07-28, a task-augmented call, a body that is not a well-formed
// JSON-RPC request) still goes to mcp-go, which answers its errors.

// directToolCall reports whether the request can take the direct path.
func (s *Server) directToolCall(r *http.Request, st *reqState, msg *envelope) bool {
	if s.opts.noDirect || st.sessionID == "" || r.Method != http.MethodPost || !msg.decoded ||
		msg.Method != string(mcpgo.MethodToolsCall) || msg.JSONRPC != mcpgo.JSONRPC_VERSION ||
		len(msg.Params.Task) > 0 || !plainID(msg.ID) || s.isModern(r, *msg) {
		return false
	}
	switch a := firstByte(msg.Params.Arguments); a {
	case 0, '{', 'n': // absent, an object, or null
	default:
		return false // mcp-go's answer to arguments that are not an object
	}
	// mcp-go's own test: a type it cannot parse is refused (400) there.
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mediaType == "application/json"
}

// plainID reports whether id is a JSON-RPC request id: a string or a
// number (not null, an object or an array).
func plainID(id json.RawMessage) bool {
	switch c := firstByte(id); {
	case c == '"', c == '-', c >= '0' && c <= '9':
		return true
	}
	return false
}

func firstByte(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

// rpcResponse is a JSON-RPC response as the direct path writes it; the id
// is echoed byte for byte.
type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// serveToolCall answers a session's tools/call on the direct path.
func (s *Server) serveToolCall(w http.ResponseWriter, r *http.Request, st *reqState, msg *envelope) {
	ctx := r.Context()
	d := newDeliveryWriter(w)
	d.writeTimeout = cmp.Or(s.opts.eventWrite, eventWriteTimeout)
	st.out, st.direct = d, true
	// However this ends (a panic included), nothing is sent on the
	// response once it has: a handler's goroutine may still hold the client.
	defer d.abandon()
	if s.events != nil && st.internal != "" {
		// The session's streams are resumable: every event of this
		// request's stream is recorded under the request's own stream id,
		// so a client that lost the connection replays it with
		// Last-Event-ID on any replica.
		stream := newStreamID()
		store := context.WithoutCancel(ctx)
		d.record = func(data []byte) string {
			id, err := s.events.StoreEvent(store, st.internal, stream, data)
			if err != nil {
				s.log.ErrorContext(ctx, "mcp: record stream event", "err", err, "request_id", st.requestID)
				return ""
			}
			return id
		}
	}
	id := msg.ID
	name := msg.Params.Name
	var resp rpcResponse
	if s.reg.Screen(ctx, st.caller, name) {
		// mcp-go's words, so that both paths answer an unknown or hidden
		// tool the same way.
		resp = rpcResponse{ID: id, Error: &rpcError{Code: mcpgo.INVALID_PARAMS,
			Message: fmt.Sprintf("tool '%s' not found: %v", name, mcpserver.ErrToolNotFound)}}
	} else {
		req := mcpgo.CallToolRequest{Request: mcpgo.Request{Method: string(mcpgo.MethodToolsCall)}}
		req.Params.Name = name
		req.Params.Meta = msg.Params.Meta
		// As mcp-go hands them on: an explicit null stays "null" (a
		// handler may decode it; absent arguments are nil).
		if len(msg.Params.Arguments) > 0 {
			req.Params.RawArguments = msg.Params.Arguments
		}
		res, err := s.callToolSafely(ctx, st, req)
		switch {
		case err != nil:
			resp = rpcResponse{ID: id, Error: &rpcError{Code: mcpgo.INTERNAL_ERROR, Message: err.Error()}}
		default:
			resp = rpcResponse{ID: id, Result: res}
		}
	}
	resp.JSONRPC = mcpgo.JSONRPC_VERSION
	body, err := json.Marshal(resp)
	if err != nil {
		s.log.ErrorContext(ctx, "mcp: encode tools/call answer", "err", err, "request_id", st.requestID)
		body, _ = json.Marshal(rpcResponse{JSONRPC: mcpgo.JSONRPC_VERSION, ID: id,
			Error: &rpcError{Code: mcpgo.INTERNAL_ERROR, Message: internalMessage(st.requestID)}})
	}
	if ctx.Err() != nil {
		// The client has gone, or cancelled the call: no answer is sent.
		// A stream's answer is still recorded, for a client that lost
		// its connection to resume.
		_, _ = d.finish(body, false)
		return
	}
	streamed, err := d.finish(body, true)
	if err != nil {
		s.log.DebugContext(ctx, "mcp: write tools/call answer", "err", err, "request_id", st.requestID)
	}
	if streamed || err != nil {
		return // the answer followed the request's events on its stream
	}
	w.Header().Set("Content-Type", "application/json")
	d.WriteHeader(http.StatusOK)
	_, _ = d.Write(append(body, '\n'))
}

// callToolSafely is callTool with a handler's panic turned into a generic
// internal error (the registry recovers handlers' panics itself; this
// covers the transport's own code).
func (s *Server) callToolSafely(ctx context.Context, st *reqState, req mcpgo.CallToolRequest) (res *mcpgo.CallToolResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.ErrorContext(ctx, "mcp: panic in tools/call", "panic", p, "request_id", st.requestID)
			res, err = nil, safeError{internalMessage(st.requestID)}
		}
	}()
	return s.callTool(ctx, req)
}

func newStreamID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// notification is a JSON-RPC notification as the direct path writes it.
func notification(method string, params map[string]any) mcpgo.JSONRPCNotification {
	return mcpgo.JSONRPCNotification{
		JSONRPC: mcpgo.JSONRPC_VERSION,
		Notification: mcpgo.Notification{
			Method: method,
			Params: mcpgo.NotificationParams{AdditionalFields: params},
		},
	}
}
