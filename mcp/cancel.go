package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/enclave-mcp/enclave/internal/statuswriter"
)

// Cancelling a 2026-07-28 request.
//
// A 2026-07-28 request has no session, and mcp-go keys the requests it
// serves for notifications/cancelled by session and JSON-RPC id: every
// sessionless request under the same key. Handed to mcp-go as it came, a
// notifications/cancelled naming id 7 would cancel whichever 2026-07-28
// request with id 7 mcp-go was serving, another user's included. So mcp-go
// gets the notification without its requestId (it validates the request
// and answers it as before, and cancels nothing), and the transport
// cancels the caller's own requests with that id, which it tracks for
// both paths (modernCalls).

// modernCalls are the 2026-07-28 requests in flight, by caller, credential
// and id: a credential cancels only the requests it sent itself, so
// another credential of the account (a workspace key, another client's
// grant) cannot end them by guessing small ids.
type modernCalls struct {
	mu sync.Mutex
	m  map[string]map[*context.CancelFunc]struct{}
}

func modernCallKey(userID, credential string, rpcID []byte) string {
	return userID + "\x00" + credential + "\x00" + string(bytes.TrimSpace(rpcID))
}

// track makes r cancellable by its caller's notifications/cancelled; the
// returned func ends the tracking.
func (c *modernCalls) track(r *http.Request, userID, credential string, rpcID []byte) (*http.Request, func()) {
	ctx, cancel := context.WithCancel(r.Context())
	key := modernCallKey(userID, credential, rpcID)
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]map[*context.CancelFunc]struct{}{}
	}
	if c.m[key] == nil {
		c.m[key] = map[*context.CancelFunc]struct{}{}
	}
	c.m[key][&cancel] = struct{}{}
	c.mu.Unlock()
	return r.WithContext(ctx), func() {
		c.mu.Lock()
		delete(c.m[key], &cancel)
		if len(c.m[key]) == 0 {
			delete(c.m, key)
		}
		c.mu.Unlock()
		cancel()
	}
}

// cancel cancels the requests with the id that the caller sent with the
// same credential.
func (c *modernCalls) cancel(userID, credential string, rpcID []byte) {
	key := modernCallKey(userID, credential, rpcID)
	c.mu.Lock()
	var cancels []context.CancelFunc
	for f := range c.m[key] {
		cancels = append(cancels, *f)
	}
	c.mu.Unlock()
	for _, f := range cancels {
		f()
	}
}

// cancelModern serves a 2026-07-28 notifications/cancelled: a copy
// without the requestId is judged like any notification (headers,
// versions), and once it is accepted, the caller's own requests with that
// id are cancelled.
func (s *Server) cancelModern(w http.ResponseWriter, r *http.Request, st *reqState, msg envelope) {
	params := map[string]any{}
	if msg.Params.Meta != nil {
		params["_meta"] = msg.Params.Meta
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": msg.JSONRPC, "method": msg.Method, "params": params})
	if err != nil {
		writeHTTPError(w, http.StatusBadRequest, "invalid request", st.requestID)
		return
	}
	// The answer to the copy says whether it was accepted: its status,
	// read through the one status recorder.
	sw := statuswriter.New(w)
	if view, ok := s.admitPost(sw, r, st, body); ok {
		s.serveEngine(sw, r, st, body, view)
	}
	if sw.Status() == http.StatusAccepted && msg.decoded && len(msg.Params.RequestID) > 0 {
		s.modernCalls.cancel(st.caller.UserID, st.credential, msg.Params.RequestID)
	}
}
