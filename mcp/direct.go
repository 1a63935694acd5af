package mcp

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"slices"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/enclave-mcp/enclave/internal/requestid"
)

// The direct path: tools/call, the call agents make most, is answered
// here from the envelope the transport already decoded, instead of being
// handed to mcp-go's engine, which decodes the body again (the envelope,
// the protocol era, the message, the arguments into a map) and encodes
// the answer through reflection. Everything else about the request is
// the same as on the engine's path: the caller was authenticated and, for
// protocol 2025-11-25 and earlier, the session bound to them and the
// request tracked for notifications/cancelled (for 2026-07-28, tracked by
// caller and id: cancel.go); tools/call goes through the same screen (a
// hidden tool answers exactly like an unknown one) and the same callTool.
// Its notifications (progress, log messages) and the questions it asks a
// session's client are written to the response as they are sent, turning
// it into an event stream, with event ids recorded when the session's
// streams are resumable; the answer follows on the same stream. Because
// the handler writes them itself, each write is bounded
// (eventWriteTimeout: a client that stops reading does not hold the
// handler), and nothing is written once the answer was (a handler's
// goroutine that outlives the call gets errAnswered, never the response
// net/http has finished).
//
// The direct path takes only requests the engine would run as they are;
// anything else (another method, a task-augmented call, a body that is
// not a well-formed JSON-RPC request, has members of the wrong type or
// carries a result besides its method, arguments that are not an object,
// a 2026-07-28 request whose version, headers or client capabilities do
// not check out, a tool with x-mcp-header parameters or not yet mirrored
// into mcp-go) goes to the engine's path (engine.go), which answers it,
// errors included. The golden wire files (testdata/golden) pin both
// paths' answers, and FuzzGeneratedSessionCalls and
// FuzzGenerated2026Calls hold generated requests to the invariants.

// directToolCall reports whether the request can take the direct path.
func (s *Server) directToolCall(r *http.Request, st *reqState, msg *envelope) bool {
	if r.Method != http.MethodPost || !msg.decoded ||
		msg.Method != string(mcpgo.MethodToolsCall) || msg.JSONRPC != mcpgo.JSONRPC_VERSION ||
		len(msg.Params.Task) > 0 || !plainID(msg.ID) {
		return false
	}
	if len(msg.Result) > 0 && firstByte(msg.Result) != 'n' {
		// mcp-go takes a request that also carries a result for a response
		// to one of its own requests: it runs nothing and answers 202.
		return false
	}
	switch a := firstByte(msg.Params.Arguments); a {
	case 0, '{', 'n': // absent, an object, or null
	default:
		return false // mcp-go's answer to arguments that are not an object
	}
	// mcp-go's own test: a type it cannot parse is refused (400) there.
	if !jsonMediaType(r.Header.Get("Content-Type")) {
		return false
	}
	headers, mirrored := s.mirrored(msg.Params.Name)
	own := false
	if !mirrored {
		// Not a tool mcp-go knows (unknown, registered since the last
		// sync, or refused by mcp-go): mcp-go answers it, unless it is
		// one of the caller's own capabilities (a provider's, never
		// mirrored), which only this path serves.
		if own = s.reg.IsOwn(r.Context(), st.caller, msg.Params.Name); !own {
			return false
		}
	}
	if st.sessionID != "" {
		return true // a session's request (bindSession gives 2026-07-28 requests none)
	}
	if own {
		return s.modernChecks(r, msg) // a caller's own capability has no header parameters
	}
	return !headers && s.modernDirect(r, msg)
}

// jsonMediaType reports whether a Content-Type names application/json as
// mime.ParseMediaType reads it; the header as clients send it is decided
// without parsing (which builds a map of its parameters).
func jsonMediaType(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mediaType, _, err := mime.ParseMediaType(ct)
	return err == nil && mediaType == "application/json"
}

// mirrored reports whether the named tool is mirrored into mcp-go, and
// whether its input schema mirrors parameters in headers (x-mcp-header).
func (s *Server) mirrored(name string) (headers, ok bool) {
	if m := s.headerParams.Load(); m != nil {
		headers, ok = (*m)[name]
	}
	return headers, ok
}

// modernDirect reports whether a protocol 2026-07-28 tools/call passes the
// checks mcp-go makes before the handler: the version in the header and in
// _meta agree and are served, no Last-Event-ID, client capabilities
// declared, the standard headers match the body, and the tool has no
// parameters mirrored in headers (x-mcp-header), which mcp-go checks. A
// name the last sync did not mirror (unknown, or registered since) is
// mcp-go's to answer, as it would be without the direct path.
func (s *Server) modernDirect(r *http.Request, msg *envelope) bool {
	if !s.modernChecks(r, msg) {
		return false
	}
	headers, known := s.mirrored(msg.Params.Name)
	return known && !headers
}

// modernChecks is modernDirect without the tool's own part: the version,
// header and client-capability checks mcp-go makes of every 2026-07-28
// tools/call.
func (s *Server) modernChecks(r *http.Request, msg *envelope) bool {
	meta := msg.Params.Meta
	v := meta.ProtocolVersion()
	if !mcpgo.IsModernProtocol(v) || r.Header.Get(versionHeader) != v || !slices.Contains(ProtocolVersions, v) ||
		r.Header.Get(mcpgo.HeaderLastEventID) != "" || msg.clientCapabilities() == nil {
		return false
	}
	return toolHeadersMatch(r.Header.Get, v, msg.Params.Name)
}

// toolHeadersMatch is mcpgo.ValidateStandardHeaders(get, v,
// tools/call, {"name": name}) == nil, the same checks in the same order,
// without encoding the name into params for mcp-go to decode it again
// (name, decoded from the body, is valid UTF-8, which that round trip
// keeps as it is; TestToolHeadersMatch compares the two).
func toolHeadersMatch(get func(string) string, v, name string) bool {
	if !mcpgo.RequiresStandardHeaders(v) {
		return true
	}
	if get(mcpgo.HeaderMethod) != string(mcpgo.MethodToolsCall) {
		return false
	}
	if !mcpgo.MethodRequiresNameHeader(mcpgo.MethodToolsCall) {
		return true
	}
	h := get(mcpgo.HeaderName)
	if h == "" {
		return false
	}
	decoded, ok := mcpgo.DecodeHeaderValue(h)
	return ok && decoded == name
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

// mcpgoID is id as mcp-go writes it back: its request handler decodes
// the id into an any (a string, or a float64 for any number) and its
// error answer marshals that value again, so 1e2 comes back as 100 and -0
// as -0 (not through RequestId's own decoding, which would make it 0). An
// id it cannot decode is kept as it came.
func mcpgoID(id json.RawMessage) json.RawMessage {
	var v any
	if err := json.Unmarshal(id, &v); err != nil {
		return id
	}
	out, err := json.Marshal(mcpgo.NewRequestId(v))
	if err != nil {
		return id
	}
	return out
}

// serveToolCall answers a tools/call on the direct path.
func (s *Server) serveToolCall(w http.ResponseWriter, r *http.Request, st *reqState, msg *envelope) {
	ctx := r.Context()
	d := s.ownWriter(ctx, w, st)
	// However this ends (a panic included), nothing is sent on the
	// response once it has: a handler's goroutine may still hold the client.
	defer d.abandon()
	modern := st.sessionID == ""
	if modern {
		// What mcp-go derives from _meta for the handlers (IsModernRequest,
		// the log level, the client's capabilities).
		meta := msg.Params.Meta
		ctx = mcpserver.WithRequestProtocolInfo(ctx, &mcpserver.RequestProtocolInfo{
			Modern: true, ProtocolVersion: meta.ProtocolVersion(), ClientInfo: meta.ClientInfo(),
			ClientCapabilities: msg.clientCapabilities(), LogLevel: meta.LogLevel(),
		})
	}
	id := msg.ID
	name := msg.Params.Name
	var resp rpcResponse
	if s.reg.Screen(ctx, st.caller, name) {
		// mcp-go's words, so that both paths answer an unknown or hidden
		// tool the same way.
		// The id too: an unknown name is answered by mcp-go, which
		// re-encodes the id (1e2 comes back as 100), so a hidden one
		// must be, or its spelling would tell the two apart.
		resp = rpcResponse{ID: mcpgoID(id), Error: &rpcError{Code: mcpgo.INVALID_PARAMS,
			Message: fmt.Sprintf("tool '%s' not found: %v", name, mcpserver.ErrToolNotFound)}}
	} else {
		req := mcpgo.CallToolRequest{Request: mcpgo.Request{Method: string(mcpgo.MethodToolsCall)}}
		req.Params.Name = name
		req.Params.Meta = msg.Params.Meta
		req.Params.MultiRoundTripParams = msg.Params.MultiRoundTripParams
		// As mcp-go hands them on: an explicit null stays "null" (a
		// handler may decode it; absent arguments are nil).
		if len(msg.Params.Arguments) > 0 {
			req.Params.RawArguments = msg.Params.Arguments
		}
		res, err := s.callToolSafely(ctx, st, req)
		switch {
		case st.fixed != nil:
			// Decided by the handler (a refusal, a created task): written
			// as it is, with its status.
		case err != nil:
			resp = rpcResponse{ID: id, Error: &rpcError{Code: mcpgo.INTERNAL_ERROR, Message: err.Error()}}
		default:
			if modern {
				// 2026-07-28 results say what they are and who answered.
				if res.GetResultType() == "" {
					res.SetResultType(mcpgo.ResultTypeComplete)
				}
				if meta := res.EnsureResultMeta(); meta != nil && meta.ServerInfo() == nil {
					meta.SetServerInfo(s.info)
				}
			}
			resp = rpcResponse{ID: id, Result: res}
		}
	}
	resp.JSONRPC = mcpgo.JSONRPC_VERSION
	var body []byte
	var pooled *[]byte // body's buffer, when it came from answerBufs
	if res, ok := resp.Result.(*mcpgo.CallToolResult); ok && resp.Error == nil {
		buf := getAnswerBuf()
		if b, ok := appendToolAnswer(*buf, id, res); ok {
			body, pooled = b, buf
		} else {
			putAnswerBuf(buf)
		}
	}
	status := http.StatusOK
	if st.fixed != nil {
		body, status = st.fixed.body, st.fixed.status
	}
	if body == nil {
		var err error
		if body, err = json.Marshal(resp); err != nil {
			s.log.ErrorContext(ctx, "mcp: encode tools/call answer", "err", err, "request_id", st.requestID)
			body = errorAnswer(id, mcpgo.INTERNAL_ERROR, internalMessage(st.requestID), nil)
		}
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
	if modern && resp.Error != nil {
		status = modernErrorStatus(resp.Error.Code) // 2026-07-28 maps error codes onto HTTP statuses
	}
	if err := writeAnswer(d, status, body); err == nil && pooled != nil {
		// Written (the response copied it): the buffer can serve the next
		// answer. A write that failed may not have let go of it (net/http's
		// HTTP/2 server returns when the stream is reset or the connection
		// goes, while its frame writer may still read the bytes), and a
		// streamed answer's may be kept by the event log: only this path
		// gives it back.
		*pooled = body
		putAnswerBuf(pooled)
	}
}

// ownWriter is the delivery writer of a request the package answers
// itself: its handler's notifications and
// questions are written to it as they are sent.
func (s *Server) ownWriter(ctx context.Context, w http.ResponseWriter, st *reqState) *deliveryWriter {
	d := newDeliveryWriter(w)
	d.writeTimeout = cmp.Or(s.opts.eventWrite, eventWriteTimeout)
	st.out = d
	if s.events != nil && st.internal != "" {
		// The session's streams are resumable: every event of this
		// request's stream is recorded under the request's own stream id,
		// so a client that lost the connection replays it with
		// Last-Event-ID on any replica.
		stream := requestid.New() // random, like a request id
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
	return d
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

// modernErrorStatus is the HTTP status protocol 2026-07-28 prescribes for
// a JSON-RPC error code (as mcp-go maps it).
func modernErrorStatus(code int) int {
	switch code {
	case mcpgo.METHOD_NOT_FOUND:
		return http.StatusNotFound
	case mcpgo.HEADER_MISMATCH, mcpgo.MISSING_REQUIRED_CLIENT_CAPABILITY, mcpgo.UNSUPPORTED_PROTOCOL_VERSION,
		mcpgo.INVALID_REQUEST, mcpgo.INVALID_PARAMS, mcpgo.PARSE_ERROR:
		return http.StatusBadRequest
	}
	return http.StatusOK
}
