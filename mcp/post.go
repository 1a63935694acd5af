package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// A POST, once its caller is authenticated and its session bound, is
// routed by what it carries:
//
//   - a 2026-07-28 notifications/cancelled, tasks/* or
//     subscriptions/listen: cancel.go, tasks.go, listen.go;
//   - a tools/call the direct path takes: direct.go;
//   - anything else (initialize, the lists, resources, prompts,
//     completion, ping, logging, the client's notifications and answers,
//     and what the direct path leaves): first the transport's checks of
//     the body (admitPost), then mcp-go's protocol engine under a
//     session object of ours (engine.go).
//
// Every answer is written by this package (rpcwrite.go, delivery.go).

// servePost serves a POST.
func (s *Server) servePost(w http.ResponseWriter, r *http.Request, st *reqState, body []byte, msg *envelope) {
	if msg.Method == string(mcpgo.MethodToolsCall) {
		if e := s.reg.CheckScope(r.Context(), st.caller, msg.Params.Name); e != nil {
			s.insufficientScope(w, st.caller.Scopes, e.Scopes, st.requestID)
			return
		}
	}
	if st.sessionID == "" && s.isModern(r, *msg) {
		switch {
		case msg.Method == string(mcpgo.MethodNotificationCancelled):
			s.cancelModern(w, r, st, *msg)
			return
		case len(msg.ID) > 0 && !msg.isResponse():
			var done func()
			r, done = s.modernCalls.track(r, st.caller.UserID, st.credential, msg.ID)
			defer done()
		}
		switch {
		case strings.HasPrefix(msg.Method, "tasks/"):
			s.serveTasks(w, r, st, msg.Method, body)
			return
		case msg.Method == string(mcpgo.MethodSubscriptionsListen):
			s.serveListen(w, r, st, body)
			return
		}
	}
	direct := s.directToolCall(r, st, msg)
	var view postView
	if !direct {
		var ok bool
		if view, ok = s.admitPost(w, r, st, body); !ok {
			return
		}
	}
	if st.sessionID != "" && !view.modern {
		var use sessionUse
		r = s.withinSession(r, st, *msg, &use)
		defer use.done()
		if st.internal == "" {
			// The session ended since it was bound (a DELETE, eviction or
			// expiry in between).
			writeHTTPError(w, http.StatusNotFound, "session not found", st.requestID)
			return
		}
	}
	if direct {
		s.serveToolCall(w, r, st, msg)
		return
	}
	s.serveEngine(w, r, st, body, view)
}

// postView is the transport's reading of a POST body that is not the
// direct path's: the JSON-RPC members that say what the message is, and
// the protocol era (2026-07-28 when the header or params._meta names it).
type postView struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
	Method mcpgo.MCPMethod `json:"method,omitempty"`

	modern      bool
	metaVersion string // params._meta's protocol version, "" if none
}

// admitPost makes the transport's checks of a POST body before the
// protocol engine sees it, and answers what never reaches the engine: a
// body that is not JSON, a client's answer (to one of our questions, or
// a ping), and a 2026-07-28 request whose version or headers do not
// check out. It reports false when it answered.
func (s *Server) admitPost(w http.ResponseWriter, r *http.Request, st *reqState, body []byte) (postView, bool) {
	var v postView
	if !jsonMediaType(r.Header.Get("Content-Type")) {
		writePlainError(w, http.StatusBadRequest, "Invalid content type: must be 'application/json'")
		return v, false
	}
	var both struct {
		postView
		Params struct {
			Meta *mcpgo.Meta `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &both) == nil {
		v, v.metaVersion = both.postView, both.Params.Meta.ProtocolVersion()
	} else {
		// Read as two: the members that say what the message is, and the
		// era from params._meta on its own (a body whose other members do
		// not decode still names it).
		if json.Unmarshal(body, &v) != nil {
			writeError(w, http.StatusBadRequest, nil, mcpgo.PARSE_ERROR, "request body is not valid json", nil)
			return v, false
		}
		var era struct {
			Params struct {
				Meta *mcpgo.Meta `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &era) == nil {
			v.metaVersion = era.Params.Meta.ProtocolVersion()
		}
	}
	v.modern = mcpgo.IsModernProtocol(v.metaVersion) || mcpgo.IsModernProtocol(r.Header.Get(versionHeader))
	if v.Method == "" && v.ID != nil {
		switch {
		case emptyObject(v.Result) && len(bytes.TrimSpace(v.Error)) == 0, emptyJSON(v.Result) && emptyJSON(v.Error):
			// An answer to a ping, or an empty one: nothing to deliver.
			w.WriteHeader(http.StatusAccepted)
			return v, false
		case v.Result != nil || v.Error != nil:
			switch {
			case v.modern:
				writeError(w, http.StatusBadRequest, mcpgoID(v.ID), mcpgo.INVALID_REQUEST,
					"client-to-server responses are not supported in protocol version "+mcpgo.ProtocolVersion20260728+
						": server-initiated requests were replaced by multi round-trip requests", nil)
			case st.sessionID == "":
				// Read as 2026-07-28 by the envelope (no session bound), as an
				// older answer here: it answers no question of ours.
				writePlainError(w, http.StatusBadRequest, "Missing session ID for sampling response")
			default:
				s.routeResponse(w, r, st, v.ID, body)
			}
			return v, false
		}
	}
	if v.modern {
		if f := modernRefusal(r, v.metaVersion); f != nil {
			f.write(w, mcpgoID(v.ID))
			return v, false
		}
	} else if st.sessionID == "" && v.Method != mcpgo.MethodInitialize {
		// Before 2026-07-28 only an initialize is served outside a session.
		// bindSession let this one through on the envelope's reading (an
		// initialize, or 2026-07-28), which this reading, the engine's,
		// contradicts (the envelope's decoding stopped early): served
		// sessionless, it would share the engine's sessionless key with
		// every 2026-07-28 request, and could cancel another user's.
		writeHTTPError(w, http.StatusBadRequest, "missing "+sessionHeader+" header", st.requestID)
		return v, false
	}
	return v, true
}

// refusal is a JSON-RPC error answered before the protocol engine.
type refusal struct {
	status, code int
	message      string
	data         any
}

func (f *refusal) write(w http.ResponseWriter, id json.RawMessage) {
	writeError(w, f.status, id, f.code, f.message, f.data)
}

// modernRefusal is the transport's check of every 2026-07-28 POST (nil
// when it passes): streams are not resumable, and the protocol version
// is stated in the header and in params._meta alike, and served.
func modernRefusal(r *http.Request, meta string) *refusal {
	header := r.Header.Get(versionHeader)
	switch {
	case r.Header.Get(mcpgo.HeaderLastEventID) != "":
		return &refusal{http.StatusBadRequest, mcpgo.HEADER_MISMATCH, "Last-Event-ID is not supported in protocol version " +
			mcpgo.ProtocolVersion20260728 + ": streams are not resumable, re-issue the request with a new ID", nil}
	case header == "":
		return &refusal{http.StatusBadRequest, mcpgo.HEADER_MISMATCH, versionHeader + " header is required for requests carrying " + mcpgo.MetaKeyProtocolVersion, nil}
	case meta == "":
		return &refusal{http.StatusBadRequest, mcpgo.INVALID_PARAMS, "missing or invalid _meta field " + mcpgo.MetaKeyProtocolVersion, nil}
	case header != meta:
		return &refusal{http.StatusBadRequest, mcpgo.HEADER_MISMATCH, versionHeader + " header " + header + " does not match request " + mcpgo.MetaKeyProtocolVersion + " " + meta, nil}
	case !slices.Contains(ProtocolVersions, meta):
		e := mcpgo.UnsupportedProtocolVersionError{Version: meta, Supported: ProtocolVersions}.JSONRPCError().Error
		return &refusal{http.StatusBadRequest, e.Code, e.Message, e.Data}
	}
	return nil
}

// headerRefusal checks a 2026-07-28 request's standard headers (and a
// tools/call's x-mcp-header parameters) against its body, as the engine
// would if it were handed the headers, at the same point: only a request
// the engine would get that far with (a JSON-RPC 2.0 request, not a
// notification or an answer, declaring its client capabilities). Nil
// when they match or are not checked.
//
// A tool hidden from the caller answers like an unknown one, whose
// parameters are not checked: a mismatch of its header parameters is
// answered as the engine answers an unknown name, the denial audited
// once (by Screen), as the engine audits an unknown name once.
func (s *Server) headerRefusal(r *http.Request, st *reqState, body []byte, version string) *refusal {
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		Method  mcpgo.MCPMethod `json:"method"`
		ID      any             `json:"id,omitempty"`
		Result  any             `json:"result,omitempty"`
		Params  json.RawMessage `json:"params"`
	}
	if json.Unmarshal(body, &m) != nil || m.JSONRPC != mcpgo.JSONRPC_VERSION || m.ID == nil || m.Result != nil {
		return nil
	}
	var meta struct {
		Params struct {
			Meta *mcpgo.Meta `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &meta) != nil || meta.Params.Meta.ClientCapabilities() == nil || !mcpgo.IsValidProtocolVersion(version) {
		return nil
	}
	err := mcpgo.ValidateStandardHeaders(r.Header.Get, version, m.Method, m.Params)
	if err == nil && m.Method == mcpgo.MethodToolsCall {
		var call struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(m.Params, &call) == nil {
			if tool := s.headerTool(call.Name); tool != nil {
				err = mcpgo.ValidateParamHeadersLookup(func(name string) (string, bool) {
					v := r.Header.Values(name)
					if len(v) == 0 {
						return "", false
					}
					return v[0], true
				}, tool, m.Params)
				if err != nil && s.reg.Screen(r.Context(), st.caller, call.Name) {
					return &refusal{http.StatusBadRequest, mcpgo.INVALID_PARAMS,
						fmt.Sprintf("tool '%s' not found: %v", call.Name, mcpserver.ErrToolNotFound), nil}
				}
			}
		}
	}
	if err == nil {
		return nil
	}
	code := mcpgo.INVALID_PARAMS
	if unsupported, ok := errors.AsType[mcpgo.UnsupportedProtocolVersionError](err); ok {
		e := unsupported.JSONRPCError().Error
		return &refusal{modernErrorStatus(e.Code), e.Code, e.Message, e.Data}
	} else if _, ok := errors.AsType[mcpgo.HeaderMismatchError](err); ok {
		code = mcpgo.HEADER_MISMATCH
	} else if _, ok := errors.AsType[mcpgo.MissingRequiredClientCapabilityError](err); ok {
		code = mcpgo.MISSING_REQUIRED_CLIENT_CAPABILITY
	}
	return &refusal{modernErrorStatus(code), code, err.Error(), nil}
}

// headerTool is the mirrored definition of a tool whose input schema
// mirrors parameters in headers (x-mcp-header), nil for any other name.
func (s *Server) headerTool(name string) *mcpgo.Tool {
	if m := s.headerTools.Load(); m != nil {
		return (*m)[name]
	}
	return nil
}

// serveListen serves a 2026-07-28 subscriptions/listen stream, ended at
// shutdown like a GET stream.
func (s *Server) serveListen(w http.ResponseWriter, r *http.Request, st *reqState, body []byte) {
	if s.draining.Load() {
		w.Header().Set("Retry-After", "5")
		writeHTTPError(w, http.StatusServiceUnavailable, "the server is shutting down", st.requestID)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	key := &cancel
	s.listenMu.Lock()
	if s.listens == nil {
		s.listens = map[*context.CancelFunc]struct{}{}
	}
	s.listens[key] = struct{}{}
	s.listenMu.Unlock()
	defer func() {
		s.listenMu.Lock()
		delete(s.listens, key)
		s.listenMu.Unlock()
		cancel()
	}()
	s.listen(w, r.WithContext(ctx), st, body)
}
