package mcp

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// session is one legacy (session-based) MCP session, bound to the user who
// created it.
type session struct {
	id       string
	hash     string // SessionHash(id): its name in the shared store and on the bus
	userID   string
	version  string          // protocol version negotiated at initialize
	info     json.RawMessage // the client's clientInfo
	synced   time.Time       // when last use was last recorded in the shared store
	verified time.Time       // when the shared store last confirmed the session (created or loaded)
	local    bool            // not in the shared store (storing it failed): served here only
	lastSeen time.Time
	busy     int    // requests and GET streams in progress
	toolsFP  string // fingerprint of the tool names the client last listed
	toolsKey visKey // the caller's visibility key when toolsFP was last worked out
	logLevel string // level set with logging/setLevel; "" sends everything
	streams  map[int]func()
	nextID   int
	listen   *listenStream // the listening stream, from the first GET (stream.go)
	// what the client declared it can do at initialize
	canSample, canElicit, canRoots bool
	subs                           map[string]bool // resource URIs subscribed to

	// the token scopes of the session's latest request: a caller loaded
	// outside a request (a broadcast list change) carries none, and the
	// admin scope changes which tools are listed
	scopes    []string
	allScopes bool
}

// maxSubscriptions bounds the resource subscriptions of one session.
const maxSubscriptions = 256

// sessionStore binds session ids to users and bounds how many live: each
// user keeps at most perUser sessions (the least recently used is evicted)
// and the whole store at most total (new sessions are refused beyond it).
type sessionStore struct {
	mu       sync.Mutex
	byID     map[string]*session
	internal map[string]string       // per-request id -> session id
	calls    map[string]*trackedCall // session id + JSON-RPC id -> the requests in progress with it
	ttl      time.Duration
	perUser  int
	total    int
	seq      uint64
	now      func() time.Time
	// onChange, when set, runs (outside the lock) after a session's
	// client-set state changed: the shared store writes it through.
	onChange func(id string)
}

func newSessionStore(ttl time.Duration, perUser, total int, now func() time.Time) *sessionStore {
	return &sessionStore{
		byID: map[string]*session{}, internal: map[string]string{}, calls: map[string]*trackedCall{},
		ttl: ttl, perUser: perUser, total: total, now: now,
	}
}

func newSessionID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create makes a session for userID. It returns "" when the store is full,
// and the ids of sessions evicted to make room for this user.
func (s *sessionStore) create(userID string) (id string, evicted []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var mine []*session
	for _, se := range s.byID {
		if se.userID == userID {
			mine = append(mine, se)
		}
	}
	for len(mine) >= s.perUser {
		oldest := 0
		for i, se := range mine {
			if se.lastSeen.Before(mine[oldest].lastSeen) {
				oldest = i
			}
		}
		evicted = append(evicted, mine[oldest].id)
		s.dropLocked(mine[oldest])
		mine = append(mine[:oldest], mine[oldest+1:]...)
	}
	if len(s.byID) >= s.total {
		return "", evicted
	}
	id = newSessionID()
	s.byID[id] = &session{id: id, hash: SessionHash(id), userID: userID, lastSeen: s.now(), verified: s.now(), streams: map[int]func(){}}
	return id, evicted
}

// owned returns the session id if it exists and belongs to userID. A
// missing and a foreign session are indistinguishable to the caller.
func (s *sessionStore) owned(id, userID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[id]
	if !ok || se.userID != userID {
		return false
	}
	se.lastSeen = s.now()
	return true
}

// known reports whether id is a live session or per-request id.
func (s *sessionStore) known(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[id]; ok {
		return true
	}
	_, ok := s.internal[id]
	return ok
}

// begin marks a request in progress on session id; end, given the
// session it returns (nil when there is no such session), ends it. It
// mints a per-request id that the transport uses in place of the session
// id, so that the request gets its own notification channel. With a
// JSON-RPC id and a cancel func, the request is also tracked for
// notifications/cancelled from the same session (call, nil otherwise):
// one lock for both.
func (s *sessionStore) begin(id string, rpcID []byte, cancel func()) (internalID string, se *session, call *trackedCall) {
	if cancel != nil {
		call = &trackedCall{key: callKey(id, rpcID), cancel: cancel}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[id]
	if !ok {
		return "", nil, nil
	}
	se.busy++
	s.seq++
	internalID = id + "." + strconv.FormatUint(s.seq, 36)
	s.internal[internalID] = id
	if call != nil {
		call.next = s.calls[call.key]
		s.calls[call.key] = call
	}
	return internalID, se, call
}

// end ends a request begin began on se under internalID, and forgets
// its tracking (call, if any).
func (s *sessionStore) end(se *session, internalID string, call *trackedCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se.busy--
	se.lastSeen = s.now()
	delete(s.internal, internalID)
	if call != nil {
		s.untrackLocked(call)
	}
}

// stream registers a GET stream's cancel func, called when the session
// ends; the returned func unregisters it.
// maxStreamsPerSession bounds a session's open GET streams.
const maxStreamsPerSession = 4

func (s *sessionStore) stream(id string, cancel func()) (done func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[id]
	if !ok {
		cancel()
		return func() {}
	}
	// A session keeps at most maxStreamsPerSession GET streams: a new one
	// ends the oldest (a client reconnecting keeps working; one opening
	// streams in a loop holds no more than this).
	for len(se.streams) >= maxStreamsPerSession {
		oldest := 0
		for k := range se.streams {
			if oldest == 0 || k < oldest {
				oldest = k
			}
		}
		se.streams[oldest]()
		delete(se.streams, oldest)
	}
	se.nextID++
	n := se.nextID
	se.streams[n] = cancel
	se.busy++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(se.streams, n)
		se.busy--
		se.lastSeen = s.now()
	}
}

// remove ends a session and reports whether it existed.
func (s *sessionStore) remove(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[id]
	if ok {
		s.dropLocked(se)
	}
	return ok
}

func (s *sessionStore) dropLocked(se *session) {
	delete(s.byID, se.id)
	for _, cancel := range se.streams {
		cancel()
	}
	if se.listen != nil {
		se.listen.end()
		se.listen = nil
	}
}

// expire removes sessions idle for longer than the TTL (a session with a
// request or stream in progress is not idle) and returns their ids.
func (s *sessionStore) expire() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := s.now().Add(-s.ttl)
	var out []string
	for _, se := range s.byID {
		if se.busy == 0 && se.lastSeen.Before(cutoff) {
			out = append(out, se.id)
			s.dropLocked(se)
		}
	}
	return out
}

// closeStreams ends every open GET stream (the sessions stay) and reports
// how many it ended.
func (s *sessionStore) closeStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, se := range s.byID {
		for _, cancel := range se.streams {
			cancel()
			n++
		}
	}
	return n
}

// counts returns the number of live sessions and open GET streams.
func (s *sessionStore) counts() (sessions, streams int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, se := range s.byID {
		streams += len(se.streams)
	}
	return len(s.byID), streams
}

func (s *sessionStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

// setToolsFP records the fingerprint of the tools a session listed, and
// the visibility key it was worked out under ("" for none).
func (s *sessionStore) setToolsFP(id, fp string, key visKey) {
	s.mu.Lock()
	se, ok := s.byID[id]
	changed := ok && se.toolsFP != fp
	if ok {
		se.toolsFP, se.toolsKey = fp, key
	}
	s.mu.Unlock()
	if changed {
		s.changed(id)
	}
}

// setScopes records the token scopes of a request of session id.
func (s *sessionStore) setScopes(id string, scopes []string, all bool) {
	s.mu.Lock()
	if se, ok := s.byID[id]; ok && (se.allScopes != all || !slices.Equal(se.scopes, scopes)) {
		se.scopes, se.allScopes = slices.Clone(scopes), all
	}
	s.mu.Unlock()
}

// scopesOf returns the token scopes of session id's latest request.
func (s *sessionStore) scopesOf(id string) (scopes []string, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se, ok := s.byID[id]; ok {
		return slices.Clone(se.scopes), se.allScopes
	}
	return nil, false
}

// toolsCheckDue reports whether a request of session id should work out
// its caller's visible tools again: the session listed tools, and the
// caller has no visibility key or not the one the listed set was last
// worked out under.
func (s *sessionStore) toolsCheckDue(id string, key visKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[id]
	return ok && se.toolsFP != "" && (!key.ok || se.toolsKey != key)
}

// visKey is a caller's capabilities.Registry.VisibilityKey; the zero
// value is none.
type visKey struct {
	key uint64
	ok  bool
}

func (s *sessionStore) changed(id string) {
	if s.onChange != nil {
		s.onChange(id)
	}
}

// swapToolsFP replaces a listed fingerprint with fp, worked out under
// the visibility key key, and reports whether the session had listed
// tools before and they differ.
func (s *sessionStore) swapToolsFP(id, fp string, key visKey) bool {
	s.mu.Lock()
	se, ok := s.byID[id]
	if !ok || se.toolsFP == "" {
		s.mu.Unlock()
		return false
	}
	se.toolsKey = key
	if se.toolsFP == fp {
		s.mu.Unlock()
		return false
	}
	se.toolsFP = fp
	s.mu.Unlock()
	s.changed(id)
	return true
}

func (s *sessionStore) setLogLevel(id, level string) {
	s.mu.Lock()
	se, ok := s.byID[id]
	if ok {
		se.logLevel = level
	}
	s.mu.Unlock()
	if ok {
		s.changed(id)
	}
}

func (s *sessionStore) logLevel(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se, ok := s.byID[id]; ok {
		return se.logLevel
	}
	return ""
}

// fingerprint identifies a set of names (already sorted).
func fingerprint(names []string) string {
	sum := sha256.Sum256([]byte(strings.Join(names, "\x00")))
	return "#" + hex.EncodeToString(sum[:16])
}

func (s *sessionStore) setClientCaps(id string, sample, elicit, roots bool, version string, info json.RawMessage) {
	s.mu.Lock()
	se, ok := s.byID[id]
	if ok {
		se.canSample, se.canElicit, se.canRoots = sample, elicit, roots
		se.version, se.info = version, info
	}
	s.mu.Unlock()
	if ok {
		s.changed(id)
	}
}

// clientCan reports what the session's client declared it supports.
func (s *sessionStore) clientCan(id string) (sample, elicit, roots bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se, ok := s.byID[id]; ok {
		return se.canSample, se.canElicit, se.canRoots
	}
	return false, false, false
}

func callKey(sid string, rpcID []byte) string { return sid + "\x00" + string(rpcID) }

// trackedCall is a request of a session in progress, which
// notifications/cancelled from the same session stops. Requests in
// flight with the same id are chained, and each is cancelled.
type trackedCall struct {
	key    string
	cancel func()
	next   *trackedCall
}

// untrackLocked unchains call from its key's requests (s.mu held).
func (s *sessionStore) untrackLocked(call *trackedCall) {
	for p := s.calls[call.key]; p != nil; p = p.next {
		if p == call {
			break
		}
		if p.next == call {
			p.next = call.next
			return
		}
	}
	if s.calls[call.key] == call {
		if call.next == nil {
			delete(s.calls, call.key)
		} else {
			s.calls[call.key] = call.next
		}
	}
}

// cancel stops the requests of session sid with the id, if still in
// progress.
func (s *sessionStore) cancel(sid string, rpcID []byte) {
	s.mu.Lock()
	var cancels []func()
	for c := s.calls[callKey(sid, rpcID)]; c != nil; c = c.next {
		cancels = append(cancels, c.cancel)
	}
	s.mu.Unlock()
	for _, f := range cancels {
		f()
	}
}

// subscribe records (or with on false, drops) a resource subscription. It
// reports false when the session is at its limit.
func (s *sessionStore) subscribe(id, uri string, on bool) bool {
	ok, changed := s.subscribeLocked(id, uri, on)
	if changed {
		s.changed(id)
	}
	return ok
}

func (s *sessionStore) subscribeLocked(id, uri string, on bool) (ok, changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[id]
	if !ok {
		return false, false
	}
	if !on {
		changed = se.subs[uri]
		delete(se.subs, uri)
		return true, changed
	}
	if se.subs == nil {
		se.subs = map[string]bool{}
	}
	if len(se.subs) >= maxSubscriptions && !se.subs[uri] {
		return false, false
	}
	changed = !se.subs[uri]
	se.subs[uri] = true
	return true, changed
}

// subscribers returns the sessions subscribed to uri, with their users.
func (s *sessionStore) subscribers(uri string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for id, se := range s.byID {
		if se.subs[uri] {
			out[id] = se.userID
		}
	}
	return out
}
