package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"io"
	"net/http"
	"net/url"

	mcpserver "github.com/mark3labs/mcp-go/server"
)

// TEMPORARY: Options.noDirect serves every POST through mcp-go's own
// transport, for the differential tests, until they are deleted.

// viaTransport serves a POST through mcp-go's transport.
func (s *Server) viaTransport(w http.ResponseWriter, r *http.Request, st *reqState, body []byte, msg *envelope) {
	if st.sessionID != "" {
		var use sessionUse
		r = s.withinSession(r, st, *msg, &use)
		defer use.done()
		r.Header = r.Header.Clone()
		r.Header.Set(sessionHeader, st.internal)
		defer s.terminate(st.internal)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	st.out = newDeliveryWriter(w)
	s.http.ServeHTTP(st.out, r)
	st.out.abandon()
}

// terminate releases mcp-go's state for a session that our store already
// ended, through the transport's own DELETE path.
func (s *Server) terminate(id string) {
	req := (&http.Request{
		Method: http.MethodDelete,
		URL:    &url.URL{Path: Path},
		Header: http.Header{sessionHeader: {id}},
		Body:   http.NoBody,
	}).WithContext(context.Background())
	s.http.ServeHTTP(discard{}, req)
}

// resolver hands mcp-go a session id manager bound to the request's user.
type resolver struct{ s *Server }

func (rv resolver) ResolveSessionIdManager(r *http.Request) mcpserver.SessionIdManager {
	var st *reqState
	if r != nil {
		st = stateFrom(r.Context())
	}
	return idManager{s: rv.s, st: st}
}

type idManager struct {
	s  *Server
	st *reqState
}

// Generate makes a session bound to the requesting user.
func (m idManager) Generate() string {
	if m.st == nil || m.st.caller.UserID == "" {
		return ""
	}
	id, evicted := m.s.sessions.create(m.st.caller.UserID)
	m.st.evicted = append(m.st.evicted, evicted...)
	m.st.created = id
	if id != "" {
		m.s.createShared(id, m.st.caller.UserID)
	}
	return id
}

// Validate accepts only live ids: ServeHTTP has already checked ownership.
func (m idManager) Validate(id string) (bool, error) {
	if !m.s.sessions.known(id) {
		return false, errors.New("mcp: unknown session")
	}
	return false, nil
}

// Terminate is our own release of mcp-go's state (a DELETE, expiry,
// eviction, a session ended on another replica, a request's own id):
// the session table and a shared store have already done what was needed.
func (m idManager) Terminate(id string) (bool, error) {
	m.s.sessions.remove(id)
	return false, nil
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

func newTransport(s *Server) *mcpserver.StreamableHTTPServer {
	httpOpts := []mcpserver.StreamableHTTPOption{
		mcpserver.WithSessionIdManagerResolver(resolver{s}),
		mcpserver.WithStreamableHTTPLogger(s.log),
		mcpserver.WithStreamableHTTPProtocolVersions(ProtocolVersions...),
		mcpserver.WithDisableLocalhostProtection(true),
	}
	if s.events != nil {
		httpOpts = append(httpOpts, mcpserver.WithEventStore(s.events))
	}
	return mcpserver.NewStreamableHTTPServer(s.mcp, httpOpts...)
}

// clientAnswer reports whether body is a session's answer to a question
// (mcp-go's transport knows none of ours).
func (s *Server) clientAnswer(r *http.Request, body []byte) bool {
	var v postView
	if !jsonMediaType(r.Header.Get("Content-Type")) || json.Unmarshal(body, &v) != nil || v.Method != "" || v.ID == nil {
		return false
	}
	return !(emptyObject(v.Result) && len(bytes.TrimSpace(v.Error)) == 0 || emptyJSON(v.Result) && emptyJSON(v.Error)) &&
		(v.Result != nil || v.Error != nil) && !mcpgo.IsModernProtocol(r.Header.Get(versionHeader))
}
