package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"
)

// SessionRecord is what any replica needs to serve a session of protocol
// 2025-11-25 or earlier: its owner, what the client declared at
// initialize, and the state the client set since (log level, resource
// subscriptions, the tools it last listed).
type SessionRecord struct {
	// ID is the session id. Stores keep only its hash (SessionHash).
	ID string
	// UserID is the owner's stable user id.
	UserID          string
	ProtocolVersion string
	ClientInfo      json.RawMessage
	// What the client declared it can do at initialize.
	CanSample, CanElicit, CanRoots bool
	LogLevel                       string
	// ToolsFP identifies the tools the client last listed ("" if never).
	ToolsFP       string
	Subscriptions []string
	LastUsed      time.Time
}

// ErrSessionNotFound is returned by a SessionStore for an unknown session.
var ErrSessionNotFound = errors.New("mcp: session not found")

// SessionStore keeps sessions where every replica sees them (package
// sqlsessions keeps them in SQL). With one set in Options.Sessions and a
// cluster bus in Options.Bus, a session created on one replica is served
// by any other, still only to its owner.
type SessionStore interface {
	// CreateSession stores rec and ends the owner's least recently used
	// sessions beyond keepPerUser, returning their hashes.
	CreateSession(ctx context.Context, rec SessionRecord, keepPerUser int) (evicted []string, err error)
	// LoadSession returns the session id, or ErrSessionNotFound.
	LoadSession(ctx context.Context, id string) (SessionRecord, error)
	// SaveSession stores the mutable fields of rec (log level,
	// capabilities, subscriptions, tools fingerprint, protocol version,
	// client info).
	SaveSession(ctx context.Context, rec SessionRecord) error
	// TouchSessions records that the sessions were used at at.
	TouchSessions(ctx context.Context, ids []string, at time.Time) error
	// DeleteSession ends a session; it reports whether it existed.
	DeleteSession(ctx context.Context, id string) (bool, error)
	// ExpireSessions ends the sessions unused since before and returns
	// their hashes.
	ExpireSessions(ctx context.Context, before time.Time) ([]string, error)
	// PutAnswer holds a client's answer (to a server-to-client request) for
	// the replica waiting for it, under key, owned by userID.
	PutAnswer(ctx context.Context, userID, key string, answer []byte) error
	// TakeAnswer returns and deletes the answer under key
	// (ErrSessionNotFound if there is none), and drops stale answers.
	TakeAnswer(ctx context.Context, key string) ([]byte, error)
}

// SessionHash is the hash under which stores and the cluster bus name a
// session: the hex SHA-256 of its id. The id itself never leaves the
// replica's memory.
func SessionHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// EventLog keeps the SSE events of shared sessions for a bounded window,
// so that a client reconnecting with Last-Event-ID to any replica is sent
// what it missed (package sqlsessions keeps them in SQL). Events are
// keyed by the session's hash and owned by its user.
type EventLog interface {
	// AppendEvent records message as the next event of stream and returns
	// its id (unique within the session).
	AppendEvent(ctx context.Context, sessionHash, userID, streamID string, message json.RawMessage) (string, error)
	// ReplayEvents calls send for every event after lastEventID on the
	// same stream, in order, and returns that stream's id; an id unknown
	// for the session (or out of the window) is ErrUnknownEvent.
	ReplayEvents(ctx context.Context, sessionHash, lastEventID string, send func(id string, message json.RawMessage) error) (string, error)
	// PurgeEvents drops a session's events.
	PurgeEvents(ctx context.Context, sessionHash string) error
}

// ErrUnknownEvent is returned by EventLog.ReplayEvents for an event id it
// does not hold for the session.
var ErrUnknownEvent = errors.New("mcp: unknown event id")
