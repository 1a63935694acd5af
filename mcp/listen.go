package mcp

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/enclave-mcp/enclave/capabilities"
)

// subscriptions/listen (protocol 2026-07-28) is served here rather than by
// mcp-go, whose stream would carry list changes of the whole server to
// everyone: each listen stream belongs to its caller, is told that the
// tools or prompts changed only when the ones that caller can see changed,
// gets resources/updated only for resources its caller may read now, and
// ends with the token that opened it (see watchToken).

// listener is one open subscriptions/listen stream.
type listener struct {
	mu        sync.Mutex // guards the fingerprints
	caller    capabilities.Caller
	id        json.RawMessage
	filter    mcpgo.SubscriptionFilter
	out       chan []byte
	end       context.CancelFunc // ends the stream
	toolsFP   string
	promptsFP string
}

type listeners struct {
	mu   sync.Mutex
	m    map[*listener]struct{}
	user map[string][]*listener // each user's streams, oldest first
}

// add registers l, ending its user's oldest streams to keep at most
// perUser; it refuses (ok false) when total streams are open already.
func (ls *listeners) add(l *listener, perUser, total int) (remove func(), ok bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.m == nil {
		ls.m = map[*listener]struct{}{}
		ls.user = map[string][]*listener{}
	}
	uid := l.caller.UserID
	mine := ls.user[uid]
	evict := max(len(mine)-perUser+1, 0)
	if len(ls.m)-evict >= total {
		return nil, false
	}
	for _, old := range mine[:evict] {
		old.end() // it leaves ls.m when its handler returns
	}
	ls.user[uid] = append(slices.Clone(mine[evict:]), l)
	ls.m[l] = struct{}{}
	return func() {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		delete(ls.m, l)
		rest := slices.DeleteFunc(slices.Clone(ls.user[uid]), func(x *listener) bool { return x == l })
		if len(rest) == 0 {
			delete(ls.user, uid)
		} else {
			ls.user[uid] = rest
		}
	}, true
}

func (ls *listeners) all() []*listener {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := make([]*listener, 0, len(ls.m))
	for l := range ls.m {
		out = append(out, l)
	}
	return out
}

// frame is a notification of a listen stream, tagged with its id.
func (l *listener) frame(method string, params map[string]any) []byte {
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = map[string]any{mcpgo.MetaKeySubscriptionID: l.id}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
	return b
}

// push queues a frame; a listener that does not keep up loses it.
func (l *listener) push(b []byte) {
	select {
	case l.out <- b:
	default:
	}
}

func (s *Server) promptsFingerprint(ctx context.Context, caller capabilities.Caller) string {
	var names []string
	for _, p := range s.reg.VisiblePrompts(ctx, caller) {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return fingerprint(names)
}

// listen serves a subscriptions/listen request.
func (s *Server) listen(w http.ResponseWriter, r *http.Request, st *reqState, body []byte) {
	var req struct {
		Params struct {
			Notifications mcpgo.SubscriptionFilter `json:"notifications"`
		} `json:"params"`
	}
	if len(st.rpcID) == 0 || json.Unmarshal(body, &req) != nil {
		writeError(w, http.StatusBadRequest, st.rpcID, mcpgo.INVALID_PARAMS, "subscriptions/listen needs an id and a notifications filter", nil)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	want := req.Params.Notifications
	l := &listener{caller: st.caller, id: st.rpcID, out: make(chan []byte, 16), end: cancel}
	l.filter.ToolsListChanged = want.ToolsListChanged
	l.filter.PromptsListChanged = want.PromptsListChanged
	for _, uri := range want.ResourceSubscriptions {
		if len(l.filter.ResourceSubscriptions) < maxSubscriptions && s.reg.CanRead(ctx, st.caller, uri) {
			l.filter.ResourceSubscriptions = append(l.filter.ResourceSubscriptions, uri)
		}
	}
	l.toolsFP = s.visibleFingerprint(ctx, st.caller)
	l.promptsFP = s.promptsFingerprint(ctx, st.caller)
	remove, ok := s.listening.add(l, cmp.Or(s.opts.MaxListensPerUser, 8), s.sessions.total)
	if !ok {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, st.rpcID, mcpgo.INTERNAL_ERROR, "too many open streams", nil)
		return
	}
	defer remove()
	if s.opts.Anonymous == nil {
		defer s.watchToken(ctx, st, cancel)()
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	write := func(b []byte) bool {
		if _, err := fmt.Fprintf(w, "event: message\ndata: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	filter := l.filter
	if !write(l.frame(string(mcpgo.MethodNotificationSubscriptionsAcknowledged), map[string]any{"notifications": filter})) {
		return
	}
	if !filter.IsEmpty() {
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case <-s.stop:
				break loop
			case b := <-l.out:
				if !write(b) {
					return
				}
			}
		}
	}
	res, _ := resultAnswer(l.id, listenResult{ResultType: mcpgo.ResultTypeComplete, Meta: map[string]json.RawMessage{mcpgo.MetaKeySubscriptionID: l.id}})
	write(res)
}

// notifyListChanges tells listen streams whose caller's visible tools or
// prompts changed.
func (s *Server) notifyListChanges(ctx context.Context) {
	for _, l := range s.listening.all() {
		l.notifyChanges(ctx, s)
	}
}

// The caller is loaded fresh (roles are never carried over from the
// request that opened the stream): a stream whose user lost a role is not
// told about changes among the tools that role showed, and one whose user
// cannot be loaded or is suspended is told nothing.
func (l *listener) notifyChanges(ctx context.Context, s *Server) {
	if !l.filter.ToolsListChanged && !l.filter.PromptsListChanged {
		return
	}
	caller, err := s.callerFor(ctx, l.caller.UserID)
	if err != nil || caller.State == capabilities.AccountSuspended {
		return
	}
	caller.Scopes, caller.AllScopes = l.caller.Scopes, l.caller.AllScopes
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.filter.ToolsListChanged {
		if fp := s.visibleFingerprint(ctx, caller); fp != l.toolsFP {
			l.toolsFP = fp
			l.push(l.frame(string(mcpgo.MethodNotificationToolsListChanged), nil))
		}
	}
	if l.filter.PromptsListChanged {
		if fp := s.promptsFingerprint(ctx, caller); fp != l.promptsFP {
			l.promptsFP = fp
			l.push(l.frame(string(mcpgo.MethodNotificationPromptsListChanged), nil))
		}
	}
}

// notifyListenersUpdated is NotifyResourceUpdated for listen streams.
func (s *Server) notifyListenersUpdated(ctx context.Context, uri string) {
	for _, l := range s.listening.all() {
		if !slices.Contains(l.filter.ResourceSubscriptions, uri) {
			continue
		}
		caller, err := s.callerFor(ctx, l.caller.UserID)
		if err != nil || !s.reg.CanRead(ctx, caller, uri) {
			continue
		}
		l.push(l.frame(string(mcpgo.MethodNotificationResourceUpdated), map[string]any{"uri": uri}))
	}
}

// listenResult is the result that ends a subscriptions/listen stream.
type listenResult struct {
	Meta       map[string]json.RawMessage `json:"_meta"`
	ResultType mcpgo.ResultType           `json:"resultType"`
}
