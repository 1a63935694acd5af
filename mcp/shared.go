package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/internal/background"
)

// Shared sessions (protocol 2025-11-25 and earlier) across replicas.
//
// With Options.Sessions and Options.Bus set, the session table of each
// replica is a cache of the shared store: a session created on one replica
// is adopted by another on its first request there (after the same owner
// check: another user's id answers 404 like an unknown one), client-set
// state (log level, subscriptions, capabilities, the tools last listed) is
// written through and the other replicas' copies are refreshed over the
// bus, and a session ended anywhere (DELETE, expiry, eviction) is dropped
// everywhere. Resource updates and list changes are broadcast, so they
// reach a GET stream whichever replica holds it; a client's answer to a
// server-to-client request that lands on another replica is handed over
// through the store and the bus. While the bus reports a gap, cached
// sessions are dropped and every request checks the store.

// Bus topics used by this package. Payloads are session hashes, replica
// ids, resource URIs and JSON-RPC ids: never content.
const (
	topicSessionEnd     = "mcp.session.end"     // hash
	topicSessionChanged = "mcp.session.changed" // node " " hash
	topicResource       = "mcp.resource"        // node " " uri
	topicListChanged    = "mcp.list-changed"    // node
	topicAnswer         = "mcp.answer"          // node " " answer key
	topicSessionTools   = "mcp.session.tools"   // node " " hash
)

type sharedState struct {
	store  SessionStore
	bus    cluster.Bus
	node   string
	cancel []func()
	// The background work of shared sessions (goShared): releasing a
	// dropped session (which purges its recorded events), refreshing a
	// copy, taking a handed-over answer. closeShared waits for it; once
	// closing none starts.
	work background.Group
	// ends counts the session-end notices heard. A replica adopting a
	// session samples it before loading the record: a notice that arrived
	// between the load and the adoption found nothing to drop here, so the
	// record is checked again.
	ends atomic.Uint64
}

func (s *Server) shared() *sharedState { return s.cluster }

// initShared wires the session cache to the shared store and the bus.
func (s *Server) initShared() {
	if s.opts.Bus == nil {
		return
	}
	c := &sharedState{store: s.opts.Sessions, bus: s.opts.Bus, node: s.opts.Bus.Node()}
	s.cluster = c
	s.pending.prefix = "enclave-" + c.node + "-"
	c.cancel = append(c.cancel,
		// The publishing replica tells its own streams itself (at once);
		// the others do it here, off the bus's goroutine.
		c.bus.Subscribe(topicResource, func(_ string, p []byte) {
			if node, uri, _ := strings.Cut(string(p), " "); node != c.node {
				s.goShared(func() { s.notifyResourceLocal(context.Background(), uri) })
			}
		}),
		c.bus.Subscribe(topicListChanged, func(_ string, p []byte) {
			if string(p) != c.node {
				s.goShared(func() { s.notifyListChangedLocal(context.Background()) })
			}
		}),
	)
	if c.store == nil {
		return
	}
	s.sessions.onChange = s.saveShared
	c.cancel = append(c.cancel,
		c.bus.Subscribe(topicSessionEnd, func(_ string, p []byte) {
			c.ends.Add(1)
			if id, ok := s.sessions.idByHash(string(p)); ok {
				s.dropCached(id)
			}
		}),
		c.bus.Subscribe(topicSessionChanged, func(_ string, p []byte) {
			node, hash, _ := strings.Cut(string(p), " ")
			if node == c.node {
				return
			}
			if id, ok := s.sessions.idByHash(hash); ok {
				s.goShared(func() { s.refreshCached(id) })
			}
		}),
		c.bus.Subscribe(topicSessionTools, func(_ string, p []byte) {
			node, hash, _ := strings.Cut(string(p), " ")
			if node == c.node {
				return
			}
			if id, ok := s.sessions.idByHash(hash); ok {
				// Reaches the session's stream if it is on this replica.
				_ = s.notifySession(id, string(mcpgo.MethodNotificationToolsListChanged), nil)
			}
		}),
		c.bus.Subscribe(topicAnswer, func(_ string, p []byte) {
			node, key, _ := strings.Cut(string(p), " ")
			if node == c.node {
				s.goShared(func() { s.takeAnswer(key) })
			}
		}),
		c.bus.OnGap(func() {
			if ids := s.sessions.dropIdle(); len(ids) > 0 {
				s.goShared(func() { s.releaseSessions(ids) })
			}
			// A session with a stream or request here stays cached, but it
			// may have ended or changed elsewhere while notices were lost:
			// check it against the store (dropped, streams ended, if gone).
			for _, id := range s.sessions.busyIDs() {
				s.goShared(func() { s.refreshCached(id) })
			}
		}),
	)
}

// closeShared stops hearing the bus and waits for the background work
// started (goShared): it writes to the store, which its owner closes (or
// a test drops) once Close has returned.
func (s *Server) closeShared() {
	if c := s.shared(); c != nil {
		for _, f := range c.cancel {
			f()
		}
		c.work.Close()
	}
}

// goShared runs f on a goroutine of its own that closeShared waits for,
// unless closeShared has begun: then f does not run (Close ends the
// sessions left itself). Only with shared sessions (s.cluster set).
func (s *Server) goShared(f func()) {
	s.cluster.work.Go(f)
}

// revalidateAfter bounds how long a replica serves its cached copy of a
// shared session without asking the store, however healthy the bus: a
// notice that never went out (its publication failed) or was lost before
// the bus noticed the break (up to its ping interval) leaves a session
// ended elsewhere usable here for at most this long.
const revalidateAfter = 30 * time.Second

func sharedCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// sharedSessions reports whether sessions are shared with other replicas.
func (s *Server) sharedSessions() bool { return s.cluster != nil && s.cluster.store != nil }

// ownSession reports whether sid is a live session of userID, loading it
// from the shared store when this replica has not seen it (or cannot
// trust its copy while the bus is unhealthy, or the copy is due for its
// periodic check). The error is the store's failure to answer (a database
// outage): the session may well exist, so the request is answered 503,
// not 404 (which would make the client drop its session).
func (s *Server) ownSession(ctx context.Context, sid, userID string) (bool, error) {
	if !s.sharedSessions() {
		return s.sessions.owned(sid, userID), nil
	}
	c := s.cluster
	owner, cached := s.sessions.cached(sid)
	healthy := c.bus.Healthy()
	if cached && healthy && s.sessions.trusted(sid, s.now().Add(-revalidateAfter)) {
		if owner != userID {
			return false, nil
		}
		return s.sessions.owned(sid, userID), nil
	}
	// A copy only due for its periodic check keeps its state (the bus has
	// kept it current); the store need only confirm the session exists.
	due := cached && healthy && owner == userID
	ends, epoch := c.ends.Load(), c.bus.Epoch()
	rec, err := c.store.LoadSession(ctx, sid)
	if err != nil {
		if !errors.Is(err, ErrSessionNotFound) {
			s.log.WarnContext(ctx, "mcp: load shared session failed", "err", err)
			if due {
				// Only due for a check: the store's hiccup does not end it.
				return s.sessions.owned(sid, userID), nil
			}
			return false, err
		}
		if _, ok := s.sessions.cached(sid); ok {
			s.dropCached(sid) // ended elsewhere, its notice lost or not yet here
		}
		return false, nil
	}
	if rec.UserID != userID {
		return false, nil
	}
	if due {
		s.sessions.confirm(sid)
		return s.sessions.owned(sid, userID), nil
	}
	s.sessions.adopt(rec)
	if c.ends.Load() != ends || c.bus.Epoch() != epoch {
		// A session may have ended elsewhere between the load and the
		// adoption, its notice finding nothing to drop here: load again,
		// or the copy would be served until it idles out.
		if _, err := c.store.LoadSession(ctx, sid); err != nil {
			s.dropCached(sid)
			if !errors.Is(err, ErrSessionNotFound) {
				return false, err
			}
			return false, nil
		}
	}
	return s.sessions.owned(sid, userID), nil
}

// createShared records a session just created here in the shared store.
// A session whose owner the store does not know (an anonymous test
// server) stays on this replica.
func (s *Server) createShared(id, userID string) {
	if !s.sharedSessions() {
		return
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	rec, _ := s.sessions.snapshot(id)
	evicted, err := s.cluster.store.CreateSession(ctx, rec, s.sessions.perUser)
	if err != nil {
		s.log.Warn("mcp: shared session not stored; it is served by this replica only", "err", err)
		s.sessions.markLocal(id)
		return
	}
	for _, h := range evicted {
		s.publish(ctx, topicSessionEnd, h)
	}
}

// endSession ends a session everywhere (the client's DELETE).
func (s *Server) endSession(id string) {
	s.sessions.remove(id)
	if !s.sharedSessions() {
		return
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	if _, err := s.cluster.store.DeleteSession(ctx, id); err != nil {
		s.log.Warn("mcp: delete shared session failed", "err", err)
	}
	s.publish(ctx, topicSessionEnd, SessionHash(id))
}

// dropCached forgets a session here (it ended on another replica): its
// streams end and mcp-go's state for it is released.
func (s *Server) dropCached(id string) {
	if s.sessions.remove(id) {
		s.goShared(func() { s.releaseSessions([]string{id}) })
	}
}

// refreshCached reloads a cached session changed on another replica.
func (s *Server) refreshCached(id string) {
	ctx, cancel := sharedCtx()
	defer cancel()
	rec, err := s.cluster.store.LoadSession(ctx, id)
	switch {
	case errors.Is(err, ErrSessionNotFound):
		s.dropCached(id)
	case err != nil:
		if !s.sessions.isBusy(id) {
			s.dropCached(id) // reloaded on its next request
		}
	default:
		s.sessions.adopt(rec)
	}
}

// saveShared writes a session's client-set state through and tells the
// other replicas to refresh their copies.
func (s *Server) saveShared(id string) {
	rec, ok := s.sessions.snapshot(id)
	if !ok {
		return
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	if err := s.cluster.store.SaveSession(ctx, rec); err != nil {
		s.log.Warn("mcp: save shared session failed", "err", err)
		return
	}
	s.publish(ctx, topicSessionChanged, s.cluster.node+" "+SessionHash(id))
}

func (s *Server) publish(ctx context.Context, topic, payload string) {
	if err := s.cluster.bus.Publish(ctx, topic, []byte(payload)); err != nil {
		s.log.Warn("mcp: bus publish failed", "topic", topic, "err", err)
	}
}

// sweepShared records the use of sessions served here, and ends sessions
// idle everywhere.
func (s *Server) sweepShared() {
	if !s.sharedSessions() {
		return
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	ttl := s.sessions.ttl
	if ids := s.sessions.dueForTouch(s.now().Add(-ttl / 10)); len(ids) > 0 {
		if err := s.cluster.store.TouchSessions(ctx, ids, s.now()); err != nil {
			s.log.Warn("mcp: touch shared sessions failed", "err", err)
		}
	}
	hashes, err := s.cluster.store.ExpireSessions(ctx, s.now().Add(-ttl))
	if err != nil {
		s.log.Warn("mcp: expire shared sessions failed", "err", err)
	}
	for _, h := range hashes {
		s.publish(ctx, topicSessionEnd, h)
	}
}

// routeAnswerRemote hands a client's answer to the replica that asked
// (named in the request id), through the store and the bus. It reports
// whether the answer was taken.
func (s *Server) routeAnswerRemote(ctx context.Context, sid, userID string, id json.RawMessage, a clientAnswer) bool {
	if !s.sharedSessions() {
		return false
	}
	var rid string
	if json.Unmarshal(id, &rid) != nil || !strings.HasPrefix(rid, "enclave-") {
		return false
	}
	node, _, ok := strings.Cut(strings.TrimPrefix(rid, "enclave-"), "-")
	if !ok || node == s.cluster.node || len(rid) > 100 {
		return false
	}
	body, err := json.Marshal(a)
	if err != nil {
		return false
	}
	key := SessionHash(sid) + ":" + rid
	if err := s.cluster.store.PutAnswer(ctx, userID, key, body); err != nil {
		s.log.WarnContext(ctx, "mcp: hand over answer failed", "err", err)
		return false
	}
	s.publish(ctx, topicAnswer, node+" "+key)
	return true
}

// takeAnswer delivers an answer another replica stored for a request
// waiting here.
func (s *Server) takeAnswer(key string) {
	hash, rid, ok := strings.Cut(key, ":")
	if !ok {
		return
	}
	sid, ok := s.sessions.idByHash(hash)
	if !ok {
		return
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	body, err := s.cluster.store.TakeAnswer(ctx, key)
	if err != nil {
		return
	}
	var a clientAnswer
	if json.Unmarshal(body, &a) != nil {
		return
	}
	id, _ := json.Marshal(rid)
	s.pending.answer(sid, id, a)
}

// toolsChangedElsewhere tells the replica holding a session's GET stream
// (if not this one) that the tools the session's user can see changed.
func (s *Server) toolsChangedElsewhere(ctx context.Context, sid string) {
	if s.sharedSessions() {
		s.publish(ctx, topicSessionTools, s.cluster.node+" "+SessionHash(sid))
	}
}

// NotifyListChanged tells every session and listen stream, on every
// replica, whose visible tools or prompts changed (after a change this
// process cannot see in its registry, such as a feature flag or a role
// changed on another replica).
func (s *Server) NotifyListChanged(ctx context.Context) {
	s.notifyListChangedLocal(ctx)
	if s.cluster != nil {
		s.publish(ctx, topicListChanged, s.cluster.node)
	}
}

func (s *Server) notifyListChangedLocal(ctx context.Context) {
	s.notifyListChanges(ctx)
	for sid, userID := range s.sessions.withStreams() {
		caller, err := s.callerFor(ctx, userID)
		if err != nil {
			continue
		}
		caller.Scopes, caller.AllScopes = s.sessions.scopesOf(sid)
		if s.sessions.swapToolsFP(sid, s.visibleFingerprint(ctx, caller), s.visibilityKey(caller)) {
			_ = s.notifySession(sid, string(mcpgo.MethodNotificationToolsListChanged), nil)
		}
	}
}
