package mcp

import (
	"maps"
	"slices"
	"time"
)

// The methods below make sessionStore a per-replica cache of a shared
// SessionStore (see shared.go): sessions created elsewhere are adopted on
// first use, and dropped when another replica ends them.

// snapshot returns the shared record of a cached session.
func (s *sessionStore) snapshot(id string) (SessionRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[id]
	if !ok {
		return SessionRecord{}, false
	}
	subs := slices.Sorted(maps.Keys(se.subs))
	return SessionRecord{ID: se.id, UserID: se.userID, ProtocolVersion: se.version, ClientInfo: se.info,
		CanSample: se.canSample, CanElicit: se.canElicit, CanRoots: se.canRoots, LogLevel: se.logLevel,
		ToolsFP: se.toolsFP, Subscriptions: subs, LastUsed: se.lastSeen}, true
}

// adopt caches rec (a session loaded from the shared store), or refreshes
// the cached copy's client-set state, keeping its streams and requests.
func (s *sessionStore) adopt(rec SessionRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[rec.ID]
	if !ok {
		se = &session{id: rec.ID, hash: SessionHash(rec.ID), userID: rec.UserID, lastSeen: s.now(), synced: s.now(), streams: map[int]func(){}}
		s.byID[rec.ID] = se
	}
	if se.userID != rec.UserID {
		return // never: ids are unique, but an owner is never replaced
	}
	se.verified, se.local = s.now(), false
	se.version, se.info = rec.ProtocolVersion, rec.ClientInfo
	se.canSample, se.canElicit, se.canRoots = rec.CanSample, rec.CanElicit, rec.CanRoots
	if se.toolsFP != rec.ToolsFP {
		se.toolsKey = visKey{} // listed elsewhere: work the set out again here
	}
	se.logLevel, se.toolsFP = rec.LogLevel, rec.ToolsFP
	se.subs = map[string]bool{}
	for _, u := range rec.Subscriptions {
		se.subs[u] = true
	}
}

// cached reports whether id is cached, and for whom.
func (s *sessionStore) cached(id string) (userID string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[id]
	if !ok {
		return "", false
	}
	return se.userID, true
}

// trusted reports whether the cached copy of id may be served without
// asking the shared store: the store confirmed it since cutoff, or it is
// not in the store at all (served by this replica only).
func (s *sessionStore) trusted(id string, cutoff time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[id]
	return ok && (se.local || !se.verified.Before(cutoff))
}

// confirm records that the shared store has just confirmed id.
func (s *sessionStore) confirm(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se, ok := s.byID[id]; ok {
		se.verified, se.local = s.now(), false
	}
}

// markLocal records that id could not be stored in the shared store.
func (s *sessionStore) markLocal(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se, ok := s.byID[id]; ok {
		se.local = true
	}
}

// idByHash returns the id of the cached session with that hash.
func (s *sessionStore) idByHash(hash string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, se := range s.byID {
		if se.hash == hash {
			return id, true
		}
	}
	return "", false
}

// isBusy reports whether the cached session has a request or stream here.
func (s *sessionStore) isBusy(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.byID[id]
	return ok && se.busy > 0
}

// dueForTouch returns the sessions whose use was last recorded in the
// shared store before the cutoff and that were used since (or are in use
// now), and marks them recorded.
func (s *sessionStore) dueForTouch(cutoff time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	now := s.now()
	for id, se := range s.byID {
		if se.synced.Before(cutoff) && (se.busy > 0 || se.lastSeen.After(se.synced)) {
			se.synced = now
			out = append(out, id)
		}
	}
	return out
}

// dropIdle forgets every cached session with nothing in progress here and
// returns their ids (after a gap in the bus: any of them may have ended or
// changed elsewhere).
func (s *sessionStore) dropIdle() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, se := range s.byID {
		if se.busy == 0 {
			out = append(out, id)
			s.dropLocked(se)
		}
	}
	return out
}

// busyIDs returns the cached sessions with a request or stream in
// progress here.
func (s *sessionStore) busyIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, se := range s.byID {
		if se.busy > 0 {
			out = append(out, id)
		}
	}
	return out
}

// shed forgets the least recently used idle cached copies of shared
// sessions (not those served by this replica only) until fewer than
// target remain, and returns their ids. The copies are only a cache: the
// sessions live on in the shared store and are loaded again on next use.
func (s *sessionStore) shed(target int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var idle []*session
	for _, se := range s.byID {
		if se.busy == 0 && !se.local {
			idle = append(idle, se)
		}
	}
	slices.SortFunc(idle, func(a, b *session) int { return a.lastSeen.Compare(b.lastSeen) })
	var out []string
	for _, se := range idle {
		if len(s.byID) < target {
			break
		}
		out = append(out, se.id)
		s.dropLocked(se)
	}
	return out
}

// withStreams returns the cached sessions holding a GET stream here.
func (s *sessionStore) withStreams() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for id, se := range s.byID {
		if len(se.streams) > 0 {
			out[id] = se.userID
		}
	}
	return out
}
