package mcp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"sync/atomic"
	"unicode"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// What is not the direct path's, and not a 2026-07-28 task, listening
// stream or cancellation (initialize, the lists, resources, prompts,
// completion, ping, logging, the client's notifications, and whatever
// tools/call the direct path does not take), is answered by mcp-go's
// protocol engine (MCPServer.HandleMessage) under a session object of
// ours, once admitPost has made the transport's checks, and written by
// the package: JSON, or an event stream when the handler sent
// notifications or questions meanwhile.
//
// The engine checks a 2026-07-28 request's headers only when the context
// carries them under a key of its own, which no transport but its own
// can set; headerRefusal makes the same checks at the same point first,
// and the engine, seeing no headers, skips its own.

// serveEngine answers a request through the protocol engine.
func (s *Server) serveEngine(w http.ResponseWriter, r *http.Request, st *reqState, body []byte, view postView) {
	ctx := r.Context()
	if view.modern {
		if f := s.headerRefusal(r, st, body, view.metaVersion); f != nil {
			f.write(w, mcpgoID(view.ID))
			return
		}
	} else if view.Method == mcpgo.MethodInitialize {
		id, evicted := s.sessions.create(st.caller.UserID)
		st.evicted = append(st.evicted, evicted...)
		if id == "" {
			// The table filled up since bindSession looked: refused as
			// there, not answered without a session the client could use.
			writeHTTPError(w, http.StatusServiceUnavailable, "too many sessions", st.requestID)
			return
		}
		st.created = id
		s.createShared(id, st.caller.UserID)
	}
	d := s.ownWriter(ctx, w, st)
	defer d.abandon()
	sess := &engineSession{s: s, st: st, notes: make(chan mcpgo.JSONRPCNotification, 100)}
	if st.internal == "" && st.created == "" {
		sess.own = "req." + strconv.FormatUint(engineSeq.Add(1), 36)
	}
	ctx = s.mcp.WithContext(ctx, sess)
	ctx = mcpserver.WithSupportedProtocolVersions(ctx, ProtocolVersions)
	done := make(chan struct{})
	forwarded := make(chan struct{})
	go func() { // what mcp-go itself sends the session during the request
		defer close(forwarded)
		for {
			select {
			case n := <-sess.notes:
				_ = d.send(n)
			case <-done:
				return
			}
		}
	}()
	resp := func() mcpgo.JSONRPCMessage {
		// The forwarder ends with the engine's serving, a panic included
		// (recovered by ServeHTTP): otherwise it waits for ever.
		defer func() {
			close(done)
			<-forwarded
		}()
		return s.mcp.HandleMessage(ctx, body)
	}()
	for len(sess.notes) > 0 {
		_ = d.send(<-sess.notes)
	}
	if _, ok := resp.(mcpgo.JSONRPCResponse); st.created != "" && !ok {
		// An initialize the engine did not answer with a result (sent as a
		// notification, or refused) opens no session: the client is never
		// given its id, and it would hold a place among the user's.
		s.endSession(st.created)
		st.created = ""
	}
	if resp == nil { // a notification
		d.mu.Lock()
		started := d.started
		d.answered = true
		d.mu.Unlock()
		if !started {
			w.WriteHeader(http.StatusAccepted)
		}
		return
	}
	status := http.StatusOK
	if e, ok := resp.(mcpgo.JSONRPCError); ok && view.modern {
		status = modernErrorStatus(e.Error.Code) // 2026-07-28 maps error codes onto HTTP statuses
	}
	out, err := json.Marshal(resp)
	switch {
	case st.fixed != nil: // decided by a tool's handler (a quota refusal)
		out, status = st.fixed.body, st.fixed.status
	case err != nil:
		s.log.ErrorContext(ctx, "mcp: encode answer", "err", err, "request_id", st.requestID)
		out = errorAnswer(st.rpcID, mcpgo.INTERNAL_ERROR, internalMessage(st.requestID), nil)
	}
	if ctx.Err() != nil {
		_, _ = d.finish(out, false)
		return
	}
	streamed, err := d.finish(out, true)
	if streamed || err != nil {
		return
	}
	if st.created != "" {
		w.Header().Set(sessionHeader, st.created)
	}
	_ = writeAnswer(d, status, out)
}

// engineSession is the session mcp-go's engine serves a request under:
// the request's own, one per request.
type engineSession struct {
	s     *Server
	st    *reqState
	notes chan mcpgo.JSONRPCNotification
	info  atomic.Pointer[mcpgo.Implementation]
	caps  atomic.Pointer[mcpgo.ClientCapabilities]
	// own is the id of a request served outside a session (2026-07-28):
	// its own, so that the engine, which keys the requests it serves by
	// session id and JSON-RPC id, never confuses two callers' requests.
	own string
}

// engineSeq numbers the requests served outside a session.
var engineSeq atomic.Uint64

var (
	_ mcpserver.ClientSession                   = (*engineSession)(nil)
	_ mcpserver.SessionWithLogging              = (*engineSession)(nil)
	_ mcpserver.SessionWithClientInfo           = (*engineSession)(nil)
	_ mcpserver.SessionWithStreamableHTTPConfig = (*engineSession)(nil)
)

func (c *engineSession) Initialize()                                           {}
func (c *engineSession) Initialized() bool                                     { return true }
func (c *engineSession) NotificationChannel() chan<- mcpgo.JSONRPCNotification { return c.notes }

// SessionID is the request's own id within its session (see
// sessionStore.begin), the session an initialize creates, or the
// request's own id outside a session.
func (c *engineSession) SessionID() string {
	switch {
	case c.st.internal != "":
		return c.st.internal
	case c.st.created != "":
		return c.st.created
	}
	return c.own
}

// SetLogLevel: the level is kept in the session table (afterSetLevel).
func (c *engineSession) SetLogLevel(mcpgo.LoggingLevel) {}

func (c *engineSession) GetLogLevel() mcpgo.LoggingLevel {
	if l := c.s.sessions.logLevel(c.st.sessionID); l != "" {
		return mcpgo.LoggingLevel(l)
	}
	return mcpgo.LoggingLevelError
}

func (c *engineSession) GetClientInfo() mcpgo.Implementation {
	if p := c.info.Load(); p != nil {
		return *p
	}
	return mcpgo.Implementation{}
}

func (c *engineSession) SetClientInfo(info mcpgo.Implementation) { c.info.Store(&info) }

func (c *engineSession) GetClientCapabilities() mcpgo.ClientCapabilities {
	if p := c.caps.Load(); p != nil {
		return *p
	}
	return mcpgo.ClientCapabilities{}
}

func (c *engineSession) SetClientCapabilities(caps mcpgo.ClientCapabilities) { c.caps.Store(&caps) }

// UpgradeToSSEWhenReceiveNotification: the answer follows the request's
// events on its stream whenever the stream was opened.
func (c *engineSession) UpgradeToSSEWhenReceiveNotification() {}

// unmatchedAnswer answers a client's answer that answers no question of
// ours (none pending under its id, here or on another replica).
func unmatchedAnswer(w http.ResponseWriter, id json.RawMessage) {
	var n int64
	if json.Unmarshal(id, &n) != nil {
		writePlainError(w, http.StatusBadRequest, "Invalid request ID in sampling response")
		return
	}
	writePlainError(w, http.StatusBadRequest, "No pending sampling request found for the given request ID")
}

// emptyJSON reports whether a member is absent, null, or an empty object
// or array (an empty answer, acknowledged with 202).
func emptyJSON(data json.RawMessage) bool {
	t := bytes.TrimSpace(data)
	if len(t) == 0 {
		return true
	}
	switch t[0] {
	case '{', '[':
		closing := byte('}')
		if t[0] == '[' {
			closing = ']'
		}
		for _, c := range t[1:] {
			if !unicode.IsSpace(rune(c)) {
				return c == closing
			}
		}
	case 'n':
		return string(t) == "null"
	}
	return false
}

// emptyObject reports whether data is a JSON object with no members.
func emptyObject(data json.RawMessage) bool {
	t := bytes.TrimSpace(data)
	if len(t) == 0 || t[0] != '{' {
		return false
	}
	var obj map[string]json.RawMessage
	return json.Unmarshal(t, &obj) == nil && len(obj) == 0
}
