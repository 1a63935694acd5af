package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	mcpserver "github.com/mark3labs/mcp-go/server"
)

// Resumable streams of shared sessions (protocol 2025-11-25 and earlier).
//
// With an EventLog (Options.Sessions implementing it, with a Bus), every
// SSE event of a session's streams carries an id and is recorded for a
// bounded window. A client that reconnects its GET stream with
// Last-Event-ID is sent what it missed, from the log, and the session's
// listening stream continues on that connection, on any replica
// (stream.go); a POST's stream resumed anywhere is replayed from the log
// and ends. mcp-go records the streams of the requests it serves through
// the same log (the adapter below is its EventStore). Event ids are looked up
// within the caller's own session only (the session was already bound to
// the caller), so another session's id answers 400 like an unknown one.

// Listening streams (the GET stream of a session) are told apart from
// request streams in the log by this prefix on the stream id.
const listenStreamPrefix = "L:"

type eventAdapter struct {
	s   *Server
	log EventLog
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
	if _, err := e.s.cluster.store.LoadSession(ctx, base); err == nil {
		return nil
	}
	return e.log.PurgeEvents(ctx, SessionHash(base))
}
