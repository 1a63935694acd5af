package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	mcpserver "github.com/mark3labs/mcp-go/server"
)

// Resumable streams of shared sessions (protocol 2025-11-25 and earlier).
//
// With an EventLog (Options.Sessions implementing it, with a Bus), every
// SSE event of a session's streams carries an id and is recorded for a
// bounded window (mcp-go's resumability, on our log). A client that
// reconnects its GET stream with Last-Event-ID is sent what it missed:
// on the replica that holds the stream, mcp-go replays and takes the
// stream over; on another replica (the first one died), the events are
// replayed from the log and the stream continues here. A POST's stream
// resumed anywhere is replayed from the log. Event ids are looked up
// within the caller's own session only (the session was already bound to
// the caller), so another session's id answers 400 like an unknown one.

// Listening streams (the GET stream of a session) are told apart from
// request streams in the log by this prefix on the stream id.
const listenStreamPrefix = "L:"

type eventAdapter struct {
	s   *Server
	log EventLog

	mu     sync.Mutex
	listen map[string]string // session id -> id of its listening stream here
}

var _ mcpserver.EventStore = (*eventAdapter)(nil)

func baseSessionID(id string) (base string, request bool) {
	b, _, request := strings.Cut(id, ".")
	return b, request
}

func (e *eventAdapter) StoreEvent(ctx context.Context, sessionID, streamID string, message json.RawMessage) (string, error) {
	base, request := baseSessionID(sessionID)
	userID, ok := e.s.sessions.cached(base)
	if !ok {
		return "", errors.New("mcp: event of an unknown session")
	}
	stored := streamID
	if !request {
		stored = listenStreamPrefix + streamID
		e.mu.Lock()
		e.listen[base] = streamID
		e.mu.Unlock()
	}
	// Recording runs on the path of the event itself (a handler's progress
	// report, the answer): a stalled database must not hold it for longer
	// than this. An event that could not be recorded is still delivered,
	// without an id.
	ctx, cancel := context.WithTimeout(ctx, storeEventTimeout)
	defer cancel()
	return e.log.AppendEvent(ctx, SessionHash(base), userID, stored, message)
}

// storeEventTimeout bounds the recording of one stream event.
var storeEventTimeout = 5 * time.Second // a variable for tests

func (e *eventAdapter) ReplayEventsAfter(ctx context.Context, sessionID, lastEventID string, send func(string, json.RawMessage) error) (string, error) {
	base, _ := baseSessionID(sessionID)
	stream, err := e.log.ReplayEvents(ctx, SessionHash(base), lastEventID, send)
	if errors.Is(err, ErrUnknownEvent) {
		return "", fmt.Errorf("%w: %s", mcpserver.ErrUnknownEventID, lastEventID)
	}
	return strings.TrimPrefix(stream, listenStreamPrefix), err
}

// PurgeSession drops a session's events once it has ended everywhere; a
// replica only forgetting its copy of a live session keeps them.
func (e *eventAdapter) PurgeSession(ctx context.Context, sessionID string) error {
	base, request := baseSessionID(sessionID)
	if request {
		return nil
	}
	e.mu.Lock()
	delete(e.listen, base)
	e.mu.Unlock()
	if _, err := e.s.cluster.store.LoadSession(ctx, base); err == nil {
		return nil
	}
	return e.log.PurgeEvents(ctx, SessionHash(base))
}

// resumeElsewhere serves a GET with Last-Event-ID whose listening stream
// is not on this replica: it replays the missed events from the log, then
// opens the session's listening stream here. It reports false when mcp-go
// should serve the request itself (the stream is here, the stream was a
// request's, or the id is unknown).
func (s *Server) resumeElsewhere(w http.ResponseWriter, r *http.Request, sid string) bool {
	e := s.events
	last := r.Header.Get("Last-Event-ID")
	if e == nil || r.Method != http.MethodGet || last == "" {
		return false
	}
	hash := SessionHash(sid)
	stream, err := e.log.ReplayEvents(r.Context(), hash, last, func(string, json.RawMessage) error { return nil })
	if err != nil || !strings.HasPrefix(stream, listenStreamPrefix) {
		return false
	}
	e.mu.Lock()
	here := e.listen[sid] == strings.TrimPrefix(stream, listenStreamPrefix)
	e.mu.Unlock()
	if here {
		return false
	}
	rc := http.NewResponseController(w)
	flusher := flushFunc(func() { _ = rc.Flush() })
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, err = e.log.ReplayEvents(r.Context(), hash, last, func(id string, msg json.RawMessage) error {
		if strings.ContainsAny(id, "\r\n") {
			return errors.New("mcp: bad event id")
		}
		if _, err := fmt.Fprintf(w, "id: %s\nevent: message\ndata: %s\n\n", id, msg); err != nil {
			return err
		}
		flusher.Flush()
		return nil
	})
	if err != nil {
		return true
	}
	ownHeader(r)
	r.Header.Del("Last-Event-ID")
	s.http.ServeHTTP(&continuedStream{ResponseWriter: w, flusher: flusher}, r)
	return true
}

// continuedStream lets mcp-go open a listening stream on a response whose
// header was already written (by the replay).
type flushFunc func()

func (f flushFunc) Flush() { f() }

type continuedStream struct {
	http.ResponseWriter
	flusher http.Flusher
}

func (c *continuedStream) WriteHeader(int) {}
func (c *continuedStream) Flush()          { c.flusher.Flush() }
func (c *continuedStream) Unwrap() http.ResponseWriter {
	return c.ResponseWriter
}
