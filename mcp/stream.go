package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

// A session's GET stream and DELETE (protocol 2025-11-25 and earlier),
// served from the session table (sessions.go) and, for shared sessions,
// the event log (resume.go).
//
// What the server tells a session outside of a request (a list change, a
// subscribed resource's update) goes to the session's listening stream
// (notifySession). The stream exists from the session's first GET until
// the session ends; one connection at a time is attached to it (a new GET
// takes it over). Without an event log, what is sent while no connection
// is attached is dropped. With one, every event is recorded with an id
// first, so that a client that lost its connection gets what it missed
// with Last-Event-ID, on any replica: the listening stream's events
// followed by the stream itself, a request's stream's events and then the
// end.

// listenStream is a session's listening stream.
type listenStream struct {
	id   string      // the stream's id in the event log
	in   chan []byte // encoded messages for the stream, taken by pump
	stop chan struct{}
	mu   sync.Mutex  // held while an event is recorded, and during a replay
	conn *streamConn // the attached connection, nil while none is
	// attached is whether conn is set, read without the lock.
	attached atomic.Bool
}

// streamConn is a connection attached to a listening stream.
type streamConn struct {
	sink chan streamEvent
	gone chan struct{} // closed when detached or superseded
	once sync.Once
}

type streamEvent struct {
	id   string // "" when not recorded
	data []byte
}

func (c *streamConn) close() { c.once.Do(func() { close(c.gone) }) }

// listenBuffer bounds the messages waiting for a session's listening
// stream; beyond it a message is dropped (an attached connection that
// does not keep up is closed, so that its client resumes).
const listenBuffer = 100

// sessionStream returns the listening stream of session sid, starting it on
// first use; nil when there is no such session.
func (s *Server) sessionStream(sid string) *listenStream {
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	se, ok := s.sessions.byID[sid]
	if !ok {
		return nil
	}
	if se.listen == nil {
		l := &listenStream{id: newStreamID(), in: make(chan []byte, listenBuffer), stop: make(chan struct{})}
		if !s.background(func() { s.pump(sid, l) }) {
			return nil // the server is closing
		}
		se.listen = l
	}
	return se.listen
}

// newStreamID names a stream in the event log.
func newStreamID() string { return newSessionID()[:22] }

var errNoStream = errors.New("mcp: the session has no stream here")

// notifySession sends a notification to session sid's listening stream;
// it never blocks. It fails when the notification cannot reach the
// session: no stream here (or, without an event log, none attached), or
// the stream's buffer is full.
func (s *Server) notifySession(sid, method string, params map[string]any) error {
	s.sessions.mu.Lock()
	var l *listenStream
	if se, ok := s.sessions.byID[sid]; ok {
		l = se.listen
	}
	s.sessions.mu.Unlock()
	if l == nil || s.events == nil && !l.attached.Load() {
		return errNoStream
	}
	b, err := json.Marshal(notification(method, params))
	if err != nil {
		return fmt.Errorf("mcp: encode notification: %w", err)
	}
	select {
	case l.in <- b:
		return nil
	default:
		return errors.New("mcp: the session's stream is full")
	}
}

// pump records and delivers what is sent to a listening stream until the
// session ends (or the server closes).
func (s *Server) pump(sid string, l *listenStream) {
	for {
		select {
		case b := <-l.in:
			l.deliver(s, sid, b)
		case <-l.stop:
			return
		case <-s.stop:
			return
		}
	}
}

// deliver records b (with an event log) and hands it to the attached
// connection, if any.
func (l *listenStream) deliver(s *Server, sid string, b []byte) {
	l.mu.Lock()
	var id string
	if s.events != nil {
		var err error
		if id, err = s.events.StoreEvent(context.Background(), sid, l.id, b); err != nil {
			s.log.Error("mcp: record stream event", "err", err)
			id = ""
		}
	}
	conn := l.conn
	l.mu.Unlock()
	if conn == nil {
		return
	}
	select {
	case conn.sink <- streamEvent{id: id, data: b}:
	case <-conn.gone:
	default:
		// The client does not keep up: it reconnects, and resumes when
		// the events are recorded.
		conn.close()
		l.detach(conn)
	}
}

// attach makes a new connection the stream's, superseding the one before.
// With lastEventID, the events recorded after it are first written to w
// (its header already sent) under the stream's lock, so that each event
// reaches the client once, by the replay or live.
func (l *listenStream) attach(s *Server, w io.Writer, flush func(), sid, lastEventID string, ctx context.Context) (*streamConn, error) {
	conn := &streamConn{sink: make(chan streamEvent, listenBuffer), gone: make(chan struct{})}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.close()
		l.conn = nil
		l.attached.Store(false)
	}
	if lastEventID != "" {
		if err := s.replay(ctx, w, flush, sid, lastEventID); err != nil {
			return nil, err
		}
	}
	l.conn = conn
	l.attached.Store(true)
	return conn, nil
}

// detach lets go of conn if it is still the attached connection.
func (l *listenStream) detach(conn *streamConn) {
	l.mu.Lock()
	if l.conn == conn {
		l.conn = nil
		l.attached.Store(false)
	}
	l.mu.Unlock()
}

// end stops the stream's pump (the session ended; its GET streams'
// contexts are cancelled by the session table).
func (l *listenStream) end() { close(l.stop) }

// serveGet serves a session's GET: its listening stream, preceded with
// Last-Event-ID (resumable sessions) by what the client missed.
func (s *Server) serveGet(w http.ResponseWriter, r *http.Request, st *reqState) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writePlainError(w, http.StatusMethodNotAllowed, "Streaming unsupported")
		return
	}
	ctx := r.Context()
	sid := st.sessionID
	var last string
	if s.events != nil {
		last = r.Header.Get(mcpgo.HeaderLastEventID)
	}
	if last != "" {
		// Find the stream (an id of another session is unknown) before
		// writing anything.
		stream, err := s.events.log.ReplayEvents(ctx, SessionHash(sid), last, func(string, json.RawMessage) error { return nil })
		switch {
		case errors.Is(err, ErrUnknownEvent):
			writePlainError(w, http.StatusBadRequest, "Unknown Last-Event-ID")
			return
		case err != nil:
			s.log.ErrorContext(ctx, "mcp: resume stream", "err", err, "request_id", st.requestID)
			writePlainError(w, http.StatusInternalServerError, "Failed to resume stream")
			return
		case !strings.HasPrefix(stream, listenStreamPrefix):
			// A request's stream: what was recorded of it, and the end.
			startStream(w, flusher)
			if err := s.replay(ctx, w, flusher.Flush, sid, last); err != nil {
				s.log.DebugContext(ctx, "mcp: replay stream", "err", err, "request_id", st.requestID)
			}
			return
		}
	}
	l := s.sessionStream(sid)
	if l == nil {
		writeHTTPError(w, http.StatusNotFound, "session not found", st.requestID)
		return
	}
	if last != "" {
		startStream(w, flusher) // before the replay
	}
	// Attached before the header is sent: a client that sees the
	// stream open misses nothing sent after.
	conn, err := l.attach(s, w, flusher.Flush, sid, last, ctx)
	if last == "" {
		startStream(w, flusher)
	}
	if err != nil {
		s.log.DebugContext(ctx, "mcp: replay stream", "err", err, "request_id", st.requestID)
		return
	}
	defer l.detach(conn)
	defer conn.close()
	for {
		select {
		case ev := <-conn.sink:
			if writeEvent(w, ev.id, ev.data) != nil {
				return
			}
			flusher.Flush()
		case <-conn.gone:
			return
		case <-ctx.Done():
			return
		}
	}
}

// replayWriteTimeout bounds a replay's writes to a client that does not
// read (the stream's lock is held meanwhile).
const replayWriteTimeout = 30 * time.Second

// replay writes the events recorded after lastEventID on its stream.
func (s *Server) replay(ctx context.Context, w io.Writer, flush func(), sid, lastEventID string) error {
	if rw, ok := w.(http.ResponseWriter); ok {
		rc := http.NewResponseController(rw)
		if rc.SetWriteDeadline(time.Now().Add(replayWriteTimeout)) == nil {
			defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
		}
	}
	_, err := s.events.log.ReplayEvents(ctx, SessionHash(sid), lastEventID, func(id string, msg json.RawMessage) error {
		if err := writeEvent(w, id, msg); err != nil {
			return err
		}
		flush()
		return nil
	})
	return err
}

// startStream sends the header of an event stream.
func startStream(w http.ResponseWriter, f http.Flusher) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	f.Flush()
}

// writeEvent writes one event of a stream, with its id when it has one.
func writeEvent(w io.Writer, id string, data []byte) error {
	var err error
	if id != "" && !strings.ContainsAny(id, "\r\n") {
		_, err = fmt.Fprintf(w, "id: %s\nevent: message\ndata: %s\n\n", id, data)
	} else {
		_, err = fmt.Fprintf(w, "event: message\ndata: %s\n\n", data)
	}
	return err
}

// serveDelete ends the request's session, everywhere.
func (s *Server) serveDelete(w http.ResponseWriter, st *reqState) {
	s.endSession(st.sessionID)
	s.releaseSessions([]string{st.sessionID}) // its recorded events
	w.WriteHeader(http.StatusOK)
}

// refuseModernSessionMethod answers a GET or DELETE of protocol
// 2026-07-28, which has no sessions and no GET stream.
func refuseModernSessionMethod(w http.ResponseWriter, verb string) {
	w.Header().Set("Allow", http.MethodPost)
	writePlainError(w, http.StatusMethodNotAllowed, verb+" is not supported in protocol version "+mcpgo.ProtocolVersion20260728+
		": server-to-client messages use subscriptions/listen")
}
