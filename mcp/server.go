// Package mcp serves a capabilities.Registry over MCP's streamable HTTP
// transport, with mark3labs/mcp-go's protocol engine. The package owns
// the transport end to end (ServeHTTP): it reads the body and decodes the
// JSON-RPC envelope once, authenticates, binds the session (none for
// protocol 2026-07-28), routes by method and writes every answer itself
// (post.go). tools/call, the call agents repeat, is answered from the
// envelope (direct.go); a session's GET stream and DELETE come from its
// own session table and event log (stream.go); the 2026-07-28 tasks,
// listening streams and cancellations are its own (tasks.go, listen.go,
// cancel.go); every other request (initialize, the lists, resources,
// prompts, completion, ping, logging) goes to mcp-go's protocol engine
// (MCPServer.HandleMessage) under a session object of ours (engine.go).
//
// tools/list is Registry.Visible and tools/call is Registry.Invoke;
// resources and prompts go through the registry's guard the same way. The
// package fixes mcp-go's defaults that are unsafe for a multi-user server:
// every request carries a bearer token checked by a TokenVerifier (401 with
// a resource-metadata challenge otherwise); a session belongs to the user
// who created it, and any other user's or a forged session id gets 404, on
// GET streams too; a GET stream ends within 30 s of its token expiring or
// being revoked (the token is verified again periodically and at its
// expiry, not per event); browser requests from an Origin other than the
// server's own or Options.AllowedOrigins are refused (403); each request gets its own notification channel, so
// progress and log messages reach only the request they belong to; idle sessions expire and each user keeps a bounded number;
// request bodies are limited (413); notifications/cancelled stops the named
// request of the same session; internal errors reach the client only as
// a generic message with a request id; panics are recovered; and
// tools/list_changed is sent to a session only when the tools that session's
// user can see really changed.
//
// Protocol 2026-07-28 is served in full, statelessly: handlers ask for input
// (Call.Ask) through input-required results whose requestState is signed
// and bound to the caller and the call (ask.go); subscriptions/listen
// streams are per caller, judged with the caller's roles loaded fresh,
// and bounded per user (listen.go); capabilities that support tasks
// continue as tasks after Call.Detach, stored in a TaskStore and reachable
// only by their owner, stopped when the owner's access ends, and bounded
// per user (tasks.go, package sqltasks); errors take the shapes
// the revision prescribes (-32021 with the required capabilities, -32602
// for a bad request state, the unsupported-version data), and custom
// x-mcp-header parameters are checked against the headers. On every protocol version a
// quota refusal of tools/call is the JSON-RPC error CodeQuotaExceeded whose
// data says when to retry.
package mcp

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/trace"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/internal/background"
	"github.com/enclave-mcp/enclave/internal/requestid"
	"github.com/enclave-mcp/enclave/internal/tracing"
)

// Path is where the handler expects to be mounted.
const Path = "/mcp"

// ProtocolVersions are the MCP protocol versions served, newest first.
var ProtocolVersions = []string{
	mcpgo.ProtocolVersion20260728,
	mcpgo.ProtocolVersion20251125,
	mcpgo.ProtocolVersion20250618,
	mcpgo.ProtocolVersion20250326,
}

const (
	sessionHeader = "Mcp-Session-Id"
	versionHeader = "Mcp-Protocol-Version"
)

// Options configure a Server. Registry and BaseURL are required, and so are
// Verifier and Loader unless Anonymous is set.
type Options struct {
	Registry *capabilities.Registry
	// Verifier checks bearer tokens.
	Verifier TokenVerifier
	// Loader turns a token's subject into a caller with fresh roles.
	Loader capabilities.CallerLoader
	// BaseURL is the public origin, such as "https://mcp.example.com". The
	// protected resource is BaseURL+"/mcp", and tokens must carry it as
	// audience.
	BaseURL string
	// Logger; nil is slog.Default().
	Logger *slog.Logger
	// SessionTTL is how long an idle session lives; 0 means 30 minutes.
	SessionTTL time.Duration
	// MaxSessionsPerUser bounds each user's live sessions (the least
	// recently used is ended to make room); 0 means 8.
	MaxSessionsPerUser int
	// MaxSessions bounds all live sessions (initialize is refused with 503
	// beyond it); 0 means 10000.
	MaxSessions int
	// MaxBodyBytes bounds a request body (413 beyond it); 0 means 4 MiB.
	MaxBodyBytes int64
	// Name, Version and Instructions describe the server to clients.
	Name, Version, Instructions string
	// AllowedOrigins are the browser origins ("https://app.example.com",
	// scheme, host and port as a browser sends them in Origin) allowed to
	// call the endpoint besides its own: the origin of BaseURL, and the
	// origin naming the request's own Host. A request with any other
	// Origin header is refused with 403 (the MCP transport's defence
	// against cross-site requests); requests without Origin (non-browser
	// clients) are unaffected.
	AllowedOrigins []string
	// RequestStateKey signs the requestState of input-required results
	// (protocol 2026-07-28). Replicas must share it; nil means a random key
	// for this process, so a state is only good on the replica that issued
	// it. enclave.New derives one from the key ring.
	RequestStateKey []byte
	// States remembers spent requestStates, so that each is good once;
	// replicas must share it. Nil keeps them in this process. enclave.New
	// sets an SQL ledger (package sqlsessions).
	States StateLedger
	// Tasks stores tasks (protocol 2026-07-28 tasks extension); nil turns
	// tasks off (task-supporting capabilities then run as ordinary calls).
	// enclave.New sets an SQL store, so any replica can answer for a task.
	Tasks TaskStore
	// MaxTasksPerUser bounds the tasks each user may have running on this
	// server at once (Call.Detach beyond it fails with CodeQuotaExceeded);
	// 0 means 16.
	MaxTasksPerUser int
	// MaxListensPerUser bounds each user's open subscriptions/listen
	// streams (protocol 2026-07-28): opening one more ends the user's
	// oldest. 0 means 8. All users together keep at most MaxSessions
	// (503 beyond it).
	MaxListensPerUser int
	// Recheck is how often the access behind long-lived work is checked
	// again: the token of a GET or listen stream, and the token and account
	// of a running task. 0 means 30 seconds.
	Recheck time.Duration
	// Anonymous, when set, turns authentication off: every request is served
	// as this caller, and only requests arriving on a loopback address are
	// accepted. It exists for local conformance testing.
	Anonymous *capabilities.Caller
	// Bus links the replicas of a deployment: resource updates and list
	// changes are broadcast on it, and with Sessions it keeps the replicas'
	// session caches coherent (see shared.go). Nil: one replica.
	Bus cluster.Bus
	// TracerProvider, when set, gives every MCP request a span named after
	// its method (see traceMethod); nil: none.
	TracerProvider trace.TracerProvider

	// Sessions keeps sessions (protocol 2025-11-25 and earlier) where every
	// replica finds them (package sqlsessions); used only with Bus. Nil:
	// sessions live in this process.
	Sessions SessionStore

	now        func() time.Time // tests
	recheck    time.Duration    // tests: how often a GET stream's token is checked again; 0 means 30 s
	eventWrite time.Duration    // tests: bound of a handler's event write; 0 means eventWriteTimeout
}

// Server is an http.Handler serving MCP at Path.
type Server struct {
	opts       Options
	reg        *capabilities.Registry
	log        *slog.Logger
	mcp        *mcpserver.MCPServer
	info       mcpgo.Implementation // the server as it names itself to clients
	sessions   *sessionStore
	resource   string
	publicHost string // BaseURL's host, accepted in Host on loopback
	origin     string // BaseURL's origin
	origins    map[string]bool
	recheck    time.Duration
	stateKey   []byte
	states     StateLedger
	tasks      TaskStore
	taskModes  atomic.Pointer[map[string]capabilities.TaskSupport]
	// headerParams has every tool mirrored into mcp-go, true for those
	// whose input schema mirrors parameters in headers (x-mcp-header, as
	// mcp-go reads the schema): their 2026-07-28 calls go to mcp-go, which
	// checks the headers against the body. A call of a name it lacks
	// (unknown, registered since the last sync, or a definition mcp-go
	// refuses) goes to mcp-go too, on every protocol.
	headerParams atomic.Pointer[map[string]bool]
	// headerTools are the definitions of those with header parameters,
	// for the check of a 2026-07-28 call's headers (headerRefusal).
	headerTools atomic.Pointer[map[string]*mcpgo.Tool]
	metadataURL string
	maxBody     int64
	tracer      trace.Tracer // nil: tracing off
	now         func() time.Time

	syncMu    sync.Mutex
	synced    atomic.Uint64 // registry version mirrored into mcp-go, plus one
	pending   pendingRequests
	listening listeners
	cluster   *sharedState
	events    *eventAdapter // resumable streams of shared sessions

	draining atomic.Bool // CloseStreams was called: no new GET streams
	// modernCalls are the 2026-07-28 requests in flight, for their
	// callers' notifications/cancelled (cancel.go).
	modernCalls modernCalls
	listenMu    sync.Mutex
	listens     map[*context.CancelFunc]struct{} // open subscriptions/listen streams (2026-07-28)
	taskMu      sync.Mutex
	running     map[string]int // running tasks per user id
	stop        chan struct{}
	closeOnce   sync.Once
	work        background.Group // what background started; Close waits for it
}

// New builds a Server. Call Close when done with it.
func New(opts Options) (*Server, error) {
	switch {
	case opts.Registry == nil:
		return nil, errors.New("mcp: new: Registry is required")
	case opts.Anonymous == nil && (opts.Verifier == nil || opts.Loader == nil):
		return nil, errors.New("mcp: new: Verifier and Loader are required")
	}
	base, err := url.Parse(opts.BaseURL)
	if err != nil || base.Scheme == "" || base.Host == "" {
		return nil, fmt.Errorf("mcp: new: BaseURL %q is not an absolute URL", opts.BaseURL)
	}
	if opts.Anonymous != nil && opts.Anonymous.Session {
		// Not even the anonymous caller of a loopback server is a web-shell
		// session: session-only capabilities stay off MCP.
		anon := *opts.Anonymous
		anon.Session = false
		opts.Anonymous = &anon
	}
	origin := strings.TrimSuffix(base.String(), "/")
	s := &Server{
		opts:        opts,
		reg:         opts.Registry,
		log:         cmp.Or(opts.Logger, slog.Default()),
		resource:    origin + Path,
		publicHost:  base.Hostname(),
		origin:      strings.ToLower(base.Scheme + "://" + base.Host),
		origins:     map[string]bool{},
		recheck:     cmp.Or(opts.recheck, opts.Recheck, 30*time.Second),
		metadataURL: origin + "/.well-known/oauth-protected-resource" + Path,
		maxBody:     cmp.Or(opts.MaxBodyBytes, 4<<20),
		tracer:      tracing.Tracer(opts.TracerProvider),
		now:         time.Now,
		stop:        make(chan struct{}),
	}
	if opts.now != nil {
		s.now = opts.now
	}
	s.tasks = opts.Tasks
	if m, ok := s.tasks.(*memoryTasks); ok && opts.now != nil {
		m.now = opts.now // tests
	}
	s.stateKey = opts.RequestStateKey
	s.states = opts.States
	if s.states == nil {
		s.states = &memoryLedger{spent: map[string]time.Time{}, now: s.now}
	}
	if len(s.stateKey) == 0 {
		s.stateKey = make([]byte, 32)
		rand.Read(s.stateKey)
	}
	for _, o := range opts.AllowedOrigins {
		n, ok := normalOrigin(o)
		if !ok {
			return nil, fmt.Errorf("mcp: new: allowed origin %q is not scheme://host[:port]", o)
		}
		s.origins[n] = true
	}
	ttl := cmp.Or(opts.SessionTTL, 30*time.Minute)
	s.sessions = newSessionStore(ttl, cmp.Or(opts.MaxSessionsPerUser, 8), cmp.Or(opts.MaxSessions, 10000), s.now)

	// Hooks are registered here, before serving: adding them later races.
	hooks := &mcpserver.Hooks{}
	hooks.AddAfterInitialize(s.afterInitialize)
	hooks.AddBeforeCallTool(s.beforeCallTool)
	hooks.AddAfterSubscribe(s.afterSubscribe)
	hooks.AddAfterUnsubscribe(s.afterUnsubscribe)
	hooks.AddAfterListTools(s.afterListTools)
	hooks.AddAfterSetLevel(s.afterSetLevel)
	hooks.AddAfterListResources(s.afterListResources)
	hooks.AddAfterListResourceTemplates(s.afterListResourceTemplates)
	hooks.AddAfterDiscover(s.afterDiscover)

	serverOpts := []mcpserver.ServerOption{
		// listChanged is declared false to mcp-go so that it never broadcasts
		// to every session when the mirrored set changes; afterInitialize
		// advertises it, and notifyToolsChanged sends it per session.
		mcpserver.WithToolCapabilities(false),
		mcpserver.WithResourceCapabilities(true, false),
		mcpserver.WithPromptCapabilities(false),
		mcpserver.WithLogging(),
		mcpserver.WithCompletions(),
		mcpserver.WithRecovery(),
		mcpserver.WithResourceRecovery(),
		mcpserver.WithToolFilter(s.filterTools),
		mcpserver.WithPromptFilter(s.filterPrompts),
		mcpserver.WithPromptCompletionProvider(completer{s}),
		mcpserver.WithResourceCompletionProvider(completer{s}),
		mcpserver.WithHooks(hooks),
	}
	if opts.Instructions != "" {
		serverOpts = append(serverOpts, mcpserver.WithInstructions(opts.Instructions))
	}
	s.info = mcpgo.Implementation{Name: cmp.Or(opts.Name, "enclave"), Version: cmp.Or(opts.Version, "dev")}
	s.mcp = mcpserver.NewMCPServer(s.info.Name, s.info.Version, serverOpts...)
	// One catch-all template sends every resources/read to the registry, so
	// hidden and unknown resources get the same answer from the same code.
	s.mcp.AddResourceTemplate(mcpgo.NewResourceTemplate("{+uri}", "resource"), s.readResource)
	if log, ok := opts.Sessions.(EventLog); ok && opts.Bus != nil {
		s.events = &eventAdapter{s: s, log: log}
	}
	s.syncRegistry()
	s.initShared()

	s.background(func() { s.sweepLoop(max(ttl/4, time.Second)) })
	return s, nil
}

// ResourceMetadataURL is where the RFC 9728 metadata for this resource is
// expected (served by the OAuth package), as named in 401 challenges.
func (s *Server) ResourceMetadataURL() string { return s.metadataURL }

// Resource is the protected resource identifier: BaseURL + "/mcp".
func (s *Server) Resource() string { return s.resource }

// Close stops the session sweeper, waits for the background work of
// shared sessions (which writes to the store) and ends every session.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop) // the loops background runs end
		s.work.Close()
		s.closeShared()
	})
	return nil
}

// background runs f on a goroutine that Close waits for, and reports
// true, unless Close has begun: then it runs nothing and reports false
// (a request still in flight during Close must not start work that
// outlives it).
func (s *Server) background(f func()) bool { return s.work.Go(f) }

// CloseStreams ends every open GET stream at once and refuses new ones
// (503), leaving sessions and requests in flight alone. A graceful
// shutdown calls it first: a listening stream never ends by itself and
// would otherwise hold the shutdown until its timeout.
func (s *Server) CloseStreams() {
	s.draining.Store(true)
	s.listenMu.Lock()
	for cancel := range s.listens {
		(*cancel)()
	}
	s.listenMu.Unlock()
	if n := s.sessions.closeStreams(); n > 0 {
		s.log.Info("mcp: open streams ended for shutdown", "streams", n)
	}
}

// Stats are the transport's live counts, for metrics.
type Stats struct {
	Sessions int // live sessions (protocols before 2026-07-28)
	Streams  int // open GET streams
}

// Stats returns the live counts.
func (s *Server) Stats() Stats {
	sessions, streams := s.sessions.counts()
	return Stats{Sessions: sessions, Streams: streams}
}

func (s *Server) sweepLoop(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep()
		}
	}
}

// sweep ends idle sessions.
func (s *Server) sweep() {
	s.releaseSessions(s.sessions.expire())
	s.sweepShared()
}

// releaseSessions lets go of what is kept for sessions that ended here
// (evicted, expired, ended on another replica): their recorded stream
// events, once the session is gone from the shared store as well.
func (s *Server) releaseSessions(ids []string) {
	for _, id := range ids {
		if s.events != nil {
			ctx, cancel := sharedCtx()
			if err := s.events.PurgeSession(ctx, id); err != nil {
				s.log.Warn("mcp: purge session events failed", "err", err)
			}
			cancel()
		}
	}
}

// reqState is what the transport knows about the request being served.
type reqState struct {
	caller    capabilities.Caller
	token     string    // the bearer token, "" when anonymous
	expires   time.Time // when the token expires, zero if unknown
	requestID string
	rpcID     json.RawMessage // the JSON-RPC id of a POSTed request
	method    string
	sessionID string // legacy session, "" for 2026-07-28 requests
	created   string // the session an initialize request created
	evicted   []string
	out       *deliveryWriter
	internal  string       // the per-request id standing for sessionID (see sessionStore.begin)
	fixed     *fixedAnswer // the answer its handler decided, on the direct path (refuseCall, answerWith)
	// credential names the credential that authenticated the request
	// (see credentialOf): the 2026-07-28 per-call state is bound to it.
	credential string
}

// credentialOf names the credential behind a request for binding per-call
// state: a credential narrower than the account (a workspace key) by its
// own name, an OAuth grant by its id, else "" (the user alone).
func credentialOf(c capabilities.Caller, info TokenInfo) string {
	switch {
	case c.Credential != "":
		return "c:" + c.Credential
	case info.Grant != "":
		return "g:" + info.Grant
	}
	return ""
}

type stateKey struct{}

func stateFrom(ctx context.Context) *reqState {
	st, _ := ctx.Value(stateKey{}).(*reqState)
	return st
}

// envelope is the part of a JSON-RPC message the transport looks at.
// It is decoded once, and for a session's tools/call it is all the
// direct path needs (direct.go).
type envelope struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
	Params  envelopeParams  `json:"params"`
	decoded bool            // the body is a JSON object that decoded without error (tools/call: naming params once)
	// caps is what clientCapabilities decoded, once capsDecoded.
	caps        *mcpgo.ClientCapabilities
	capsDecoded bool
}

type envelopeParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"` // tools/call
	Task      json.RawMessage `json:"task"`      // tools/call
	// Meta is also what mcp-go decides the protocol era by (isModern): it
	// decodes params into a plain struct too, so that a body naming params
	// twice gets the same _meta here and there.
	Meta      *mcpgo.Meta     `json:"_meta"`
	RequestID json.RawMessage `json:"requestId"` // notifications/cancelled
	// The answers and state of a 2026-07-28 retry (tools/call), decoded
	// into mcp-go's types: a member of the wrong type is a decoding error,
	// as it is for mcp-go, and the request is not the direct path's.
	mcpgo.MultiRoundTripParams
}

// oneParams reports whether the JSON object b (valid JSON) names params at
// most once at its top level. encoding/json merges a second params into
// the first, where mcp-go's tools/call decoding replaces the first, so
// such a body is left to mcp-go. A top-level key that is escaped or not
// ASCII could also decode as params (keys match case-insensitively, with
// Unicode folding) and counts as a second one. One pass over the bytes,
// no allocation.
func oneParams(b []byte) bool {
	seen, depth, key := 0, 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			j, plain := i+1, true
			for ; j < len(b) && b[j] != '"'; j++ {
				switch {
				case b[j] == '\\':
					plain = false
					j++ // the escaped byte
				case b[j] >= 0x80:
					plain = false
				}
			}
			if depth == 1 && key {
				if !plain {
					seen++ // might read as params
				} else if bytes.EqualFold(b[i+1:j], []byte("params")) {
					seen++
				}
				key = false
			}
			i = j
		case '{', '[':
			depth++
			key = depth == 1 && c == '{'
		case '}', ']':
			depth--
		case ',':
			key = depth == 1
		}
	}
	return seen <= 1
}

func (e envelope) isResponse() bool {
	return e.Method == "" && len(e.ID) > 0 && (len(e.Result) > 0 || len(e.Error) > 0)
}

// ServeHTTP serves MCP: read the body, authenticate, bind the session
// (none for protocol 2026-07-28), route by method (servePost, serveGet,
// serveDelete); each route writes its one answer.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requestID := requestid.FromContext(r.Context())
	if requestID == "" {
		requestID = requestid.New()
		w.Header().Set(requestid.Header, requestID)
	}
	defer s.recoverRequest(w, r, requestID)
	if !s.admitRequest(w, r, requestID) {
		return
	}
	caller, info, ok := s.authenticate(w, r, requestID)
	if !ok {
		return
	}
	body, msg, ok := s.readBody(w, r, requestID)
	if !ok {
		return
	}
	if s.tracer != nil && msg.Method != "" {
		var end func()
		r, end = s.traceMethod(r, msg)
		defer end()
	}
	if !versionServed(w, r, msg) {
		return
	}
	s.syncRegistry()
	st := &reqState{caller: caller, requestID: requestID, method: msg.Method, expires: info.ExpiresAt, rpcID: bytes.TrimSpace(msg.ID),
		credential: credentialOf(caller, info)}
	st.token, _ = bearer(r)
	// A shallow copy, with the request's state in its context.
	r = r.WithContext(context.WithValue(r.Context(), stateKey{}, st))
	if !s.bindSession(w, r, st, msg) {
		return
	}
	switch {
	case r.Method == http.MethodPost:
		s.servePost(w, r, st, body, &msg)
		s.syncRegistry() // a request may have changed the registry
		s.releaseSessions(st.evicted)
	case st.sessionID == "":
		refuseModernSessionMethod(w, r.Method)
	case r.Method == http.MethodGet:
		var use sessionUse
		defer use.done()
		s.serveGet(w, s.withinSession(r, st, msg, &use), st)
	default:
		s.serveDelete(w, st)
	}
}

// recoverRequest answers a request whose serving panicked with a generic
// internal error, logged under the request's id.
func (s *Server) recoverRequest(w http.ResponseWriter, r *http.Request, requestID string) {
	p := recover()
	if p == nil {
		return
	}
	if p == http.ErrAbortHandler {
		panic(p)
	}
	s.log.ErrorContext(r.Context(), "mcp: panic serving request", "panic", p, "request_id", requestID)
	writeHTTPError(w, http.StatusInternalServerError, internalMessage(requestID), requestID)
}

// admitRequest refuses what is refused before authentication: another
// HTTP method, DNS rebinding, a foreign origin, a new stream during
// shutdown. It reports false when it answered.
func (s *Server) admitRequest(w http.ResponseWriter, r *http.Request, requestID string) bool {
	switch r.Method {
	case http.MethodPost, http.MethodGet, http.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeHTTPError(w, http.StatusMethodNotAllowed, "method not allowed", requestID)
		return false
	}
	switch {
	case s.rebinding(r):
		writeHTTPError(w, http.StatusForbidden, "invalid Host header", requestID)
	case !s.originAllowed(r):
		writeHTTPError(w, http.StatusForbidden, "cross-origin request refused: origin not allowed", requestID)
	case r.Method == http.MethodGet && s.draining.Load():
		w.Header().Set("Retry-After", "5")
		writeHTTPError(w, http.StatusServiceUnavailable, "the server is shutting down", requestID)
	default:
		return true
	}
	return false
}

// versionServed refuses a protocol version header naming a version not
// served: the error names the versions served and echoes the one asked
// for, under the request's own id. It reports false when it answered.
func versionServed(w http.ResponseWriter, r *http.Request, msg envelope) bool {
	v := r.Header.Get(versionHeader)
	if v == "" || slices.Contains(ProtocolVersions, v) {
		return true
	}
	e := mcpgo.UnsupportedProtocolVersionError{Version: v, Supported: ProtocolVersions}.JSONRPCError().Error
	writeError(w, http.StatusBadRequest, mcpgoID(msg.ID), e.Code, e.Message, e.Data)
	return false
}

// readBody reads a POST body within the size limit and peeks at its
// JSON-RPC envelope; a malformed body is mcp-go's to answer.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, requestID string) ([]byte, envelope, bool) {
	var msg envelope
	if r.Method != http.MethodPost {
		return nil, msg, true
	}
	if r.ContentLength > s.maxBody {
		writeHTTPError(w, http.StatusRequestEntityTooLarge, "request body too large", requestID)
		return nil, msg, false
	}
	var body []byte
	var err error
	if n := r.ContentLength; n > 0 && n <= bodyUpFront {
		// Announced (and within the limit): read it into a buffer of its
		// size; net/http ends the body there and reports a shorter one.
		// A larger one grows as it arrives: a client announcing the limit
		// and sending nothing must not hold that much memory.
		body = make([]byte, n)
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	}
	if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
		writeHTTPError(w, http.StatusRequestEntityTooLarge, "request body too large", requestID)
		return nil, msg, false
	} else if err != nil {
		writeHTTPError(w, http.StatusBadRequest, "cannot read request body", requestID)
		return nil, msg, false
	}
	decodeEnvelope(body, &msg)
	return body, msg, true
}

// bodyUpFront bounds the buffer allocated for an announced body before
// its bytes arrive.
const bodyUpFront = 64 << 10

// bindSession decides which session r belongs to: none for protocol
// 2026-07-28, a new one for initialize, otherwise the one named in the
// header, which must belong to the caller. A missing and another user's
// session answer the same 404.
func (s *Server) bindSession(w http.ResponseWriter, r *http.Request, st *reqState, msg envelope) bool {
	switch {
	case s.isModern(r, msg):
		return true // 2026-07-28 has no sessions: each request stands alone, whatever its headers say
	case r.Method == http.MethodPost && msg.Method == string(mcpgo.MethodInitialize):
		if s.sessions.len() >= s.sessions.total && s.sharedSessions() {
			// Sessions adopted from other replicas fill this one's table
			// too; they are copies of the shared store, so make room.
			if shed := s.sessions.shed(s.sessions.total - max(s.sessions.total/10, 1)); len(shed) > 0 {
				s.goShared(func() { s.releaseSessions(shed) }) // purging events asks the store about each
			}
		}
		if s.sessions.len() >= s.sessions.total {
			writeHTTPError(w, http.StatusServiceUnavailable, "too many sessions", st.requestID)
			return false
		}
		return true
	}
	sid := r.Header.Get(sessionHeader)
	if sid == "" {
		writeHTTPError(w, http.StatusBadRequest, "missing "+sessionHeader+" header", st.requestID)
		return false
	}
	owned, err := s.ownSession(r.Context(), sid, st.caller.UserID)
	if err != nil {
		w.Header().Set("Retry-After", "5")
		writeHTTPError(w, http.StatusServiceUnavailable, "service temporarily unavailable; retry shortly", st.requestID)
		return false
	}
	if !owned {
		writeHTTPError(w, http.StatusNotFound, "session not found", st.requestID)
		return false
	}
	st.sessionID = sid
	s.sessions.setScopes(sid, st.caller.Scopes, st.caller.AllScopes)
	return true
}

// taskSupportOf says whether the named capability may run as a task.
func (s *Server) taskSupportOf(name string) capabilities.TaskSupport {
	if m := s.taskModes.Load(); m != nil {
		return (*m)[name]
	}
	return capabilities.TaskNever
}

// isModern reports whether r is a protocol 2026-07-28 request.
func (s *Server) isModern(r *http.Request, msg envelope) bool {
	return mcpgo.IsModernProtocol(r.Header.Get(versionHeader)) || mcpgo.IsModernProtocol(msg.Params.Meta.ProtocolVersion())
}

// withinSession prepares a GET stream or a POST request of a session,
// recording in use what to undo once it is served (use.done).
func (s *Server) withinSession(r *http.Request, st *reqState, msg envelope, use *sessionUse) *http.Request {
	sid := st.sessionID
	use.s = s
	withCancel := func() context.CancelFunc {
		ctx, cancel := context.WithCancel(r.Context())
		r = r.WithContext(ctx)
		return cancel
	}
	switch r.Method {
	case http.MethodGet:
		// The stream ends with the session (DELETE, expiry, eviction), at
		// shutdown (CloseStreams), and when its token stops verifying
		// (expired, revoked, account suspended).
		cancel := withCancel()
		use.cleanup = append(use.cleanup, cancel)
		if s.draining.Load() {
			cancel()
		}
		use.cleanup = append(use.cleanup, s.sessions.stream(sid, cancel))
		if s.opts.Anonymous == nil {
			use.cleanup = append(use.cleanup, s.watchToken(r.Context(), st, cancel))
		}
	case http.MethodPost:
		// Each request is served under its own id (its progress and log
		// messages cannot reach another request; the session's own
		// stream is read only by the session's GET stream).
		var rpcID []byte
		switch {
		case msg.Method == string(mcpgo.MethodNotificationCancelled):
			s.sessions.cancel(sid, bytes.TrimSpace(msg.Params.RequestID))
		case len(msg.ID) > 0:
			use.cancel, rpcID = withCancel(), bytes.TrimSpace(msg.ID)
		}
		internal, se, call := s.sessions.begin(sid, rpcID, use.cancel)
		st.internal = internal
		use.session, use.internal, use.call = se, internal, call
		if msg.Method != string(mcpgo.MethodToolsList) {
			s.notifyToolsChanged(r.Context(), st)
		}
	}
	return r
}

// sessionUse is what withinSession set up for one request of a session:
// fields for a POST's fixed steps (no closure to allocate per request),
// a list for a GET stream's.
type sessionUse struct {
	s        *Server
	session  *session           // sessions.begin's, ended by done
	internal string             // the request's per-request id
	call     *trackedCall       // the request's tracking for notifications/cancelled
	cancel   context.CancelFunc // the request's own context's
	cleanup  []func()           // a GET stream's, run in reverse
}

// done undoes what withinSession set up, in the reverse order.
func (u *sessionUse) done() {
	if u.s == nil {
		return
	}
	for _, f := range slices.Backward(u.cleanup) {
		f()
	}
	if u.session != nil {
		u.s.sessions.end(u.session, u.internal, u.call)
	}
	if u.cancel != nil {
		u.cancel()
	}
}

// authenticate returns the caller of r, or answers the request itself.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, requestID string) (capabilities.Caller, TokenInfo, bool) {
	if s.opts.Anonymous != nil {
		if !loopback(r.RemoteAddr) {
			writeHTTPError(w, http.StatusForbidden, "anonymous access is only served on loopback", requestID)
			return capabilities.Caller{}, TokenInfo{}, false
		}
		return *s.opts.Anonymous, TokenInfo{}, true
	}
	token, ok := bearer(r)
	if !ok {
		s.challenge(w, false, requestID)
		return capabilities.Caller{}, TokenInfo{}, false
	}
	ctx := r.Context()
	info, err := s.verify(ctx, token)
	if capabilities.CodeOf(err) == capabilities.CodeAccountSuspended {
		refuse(w, errSuspended, requestID)
		return capabilities.Caller{}, TokenInfo{}, false
	}
	if errors.Is(err, ErrTokenUnavailable) && !errors.Is(err, context.Canceled) {
		// The token could not be checked (the database is down): 503, not
		// 401, so that the client keeps its token and retries.
		s.log.WarnContext(ctx, "mcp: token check failed", "err", err, "request_id", requestID)
		w.Header().Set("Retry-After", "5")
		writeHTTPError(w, http.StatusServiceUnavailable, "service temporarily unavailable; retry shortly", requestID)
		return capabilities.Caller{}, TokenInfo{}, false
	}
	if err != nil {
		s.log.DebugContext(ctx, "mcp: token refused", "err", err, "request_id", requestID)
		s.challenge(w, true, requestID)
		return capabilities.Caller{}, TokenInfo{}, false
	}
	var caller capabilities.Caller
	if info.Caller != nil {
		caller = *info.Caller
	} else {
		caller, err = s.opts.Loader.LoadCaller(ctx, info.UserID)
	}
	switch {
	case errors.Is(err, capabilities.ErrUnknownUser):
		s.challenge(w, true, requestID)
		return capabilities.Caller{}, TokenInfo{}, false
	case err != nil:
		s.log.ErrorContext(ctx, "mcp: load caller failed; serving without roles", "err", err, "request_id", requestID)
		caller = capabilities.FailClosed(info.UserID, nil)
	case caller.UserID != "" && caller.UserID != info.UserID:
		// The verifier or loader handed back another account's caller:
		// its roles and owner key must not ride on this token's subject.
		s.log.ErrorContext(ctx, "mcp: loaded caller is not the token's subject; serving without roles", "request_id", requestID)
		caller = capabilities.FailClosed(info.UserID, nil)
	}
	caller.UserID = info.UserID
	caller.Scopes = info.Scopes
	caller.AllScopes = false
	caller.Interactive = true
	caller.Session = false // a bearer token is never a web-shell session
	if caller.State == capabilities.AccountSuspended {
		refuse(w, errSuspended, requestID)
		return capabilities.Caller{}, TokenInfo{}, false
	}
	return caller, info, true
}

var errSuspended = capabilities.Errorf(capabilities.CodeAccountSuspended, "this account is suspended")

// rebinding refuses DNS rebinding: a request that arrived on a loopback
// address names a host in its Host header; only a loopback name or the
// public host of BaseURL (a reverse proxy on this machine forwarding the
// original Host) is accepted. A page on another site whose name was
// rebound to 127.0.0.1 sends its own name and is refused.
func (s *Server) rebinding(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || local == nil || !loopback(local.String()) {
		return false
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") || strings.EqualFold(host, s.publicHost) {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

func loopback(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// routeResponse delivers a client's answer to a question the server
// asked it (elicitation or sampling, sent on the calling request's
// stream), here or on the replica that asked.
func (s *Server) routeResponse(w http.ResponseWriter, r *http.Request, st *reqState, id json.RawMessage, body []byte) {
	var msg clientAnswer
	if json.Unmarshal(body, &msg) == nil && (s.pending.answer(st.sessionID, id, msg) ||
		s.routeAnswerRemote(r.Context(), st.sessionID, st.caller.UserID, id, msg)) {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	unmatchedAnswer(w, id)
}

// syncRegistry mirrors the registry's definitions into mcp-go when they
// changed. Visibility is decided per request by the filters.
func (s *Server) syncRegistry() {
	v := s.reg.Version() + 1
	if s.synced.Load() == v {
		return
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.synced.Load() == v {
		return
	}
	var tools []mcpserver.ServerTool
	modes := map[string]capabilities.TaskSupport{}
	headers := map[string]bool{}
	headerTools := map[string]*mcpgo.Tool{}
	for _, c := range s.reg.All() {
		tool := toolOf(c)
		if err := mcpgo.ValidateParamHeaderAnnotations(&tool); err != nil {
			// mcp-go refuses such a definition by panicking in SetTools,
			// which would fail every request from here on: the tool is
			// not served (unknown to mcp-go, and so to the direct path).
			s.log.Error("mcp: capability not served: invalid x-mcp-header annotations", "capability", c.Name, "err", err)
			continue
		}
		tools = append(tools, mcpserver.ServerTool{Tool: tool, Handler: s.callTool})
		if c.Task != capabilities.TaskNever {
			modes[c.Name] = c.Task
		}
		// mcp-go's own reading of the schema (any nesting, any case or
		// escaping of the keyword), not a search of its text.
		if headers[c.Name] = len(mcpgo.ExtractParamHeaderBindings(&tool)) > 0; headers[c.Name] {
			headerTools[c.Name] = &tool
		}
	}
	s.taskModes.Store(&modes)
	s.headerParams.Store(&headers)
	s.headerTools.Store(&headerTools)
	s.mcp.SetTools(tools...)
	var prompts []mcpserver.ServerPrompt
	for _, p := range s.reg.AllPrompts() {
		prompts = append(prompts, mcpserver.ServerPrompt{Prompt: promptOf(p), Handler: s.getPrompt})
	}
	s.mcp.SetPrompts(prompts...)
	first := s.synced.Load() == 0
	s.synced.Store(v)
	if !first {
		go s.notifyListChanges(context.Background())
	}
}

// filterTools is mcp-go's one visibility decision, on tools/list and on
// tools/call. At call time a hidden tool is filtered out so that mcp-go
// answers it exactly as an unknown one.
func (s *Server) filterTools(ctx context.Context, tools []mcpgo.Tool) []mcpgo.Tool {
	st := stateFrom(ctx)
	if st == nil {
		return nil
	}
	out := tools[:0:0]
	for _, t := range tools {
		var keep bool
		if st.method == string(mcpgo.MethodToolsCall) {
			keep = !s.reg.Screen(ctx, st.caller, t.Name)
		} else {
			keep = s.reg.IsVisible(ctx, st.caller, t.Name)
		}
		if keep {
			out = append(out, t)
		}
	}
	if st.method == string(mcpgo.MethodToolsCall) {
		return out
	}
	for i := range out {
		if d, ok := s.reg.DescriptionFor(ctx, st.caller, out[i].Name); ok {
			out[i].Description = d
		}
	}
	// The caller's own capabilities (a provider's: saved packages'
	// exports) are listed with the registered ones; the direct path
	// serves their calls.
	if own := s.reg.VisibleOwn(ctx, st.caller); len(own) > 0 {
		for _, c := range own {
			out = append(out, toolOf(c))
		}
		slices.SortFunc(out, func(a, b mcpgo.Tool) int { return strings.Compare(a.Name, b.Name) })
	}
	return out
}

func (s *Server) filterPrompts(ctx context.Context, prompts []mcpgo.Prompt) []mcpgo.Prompt {
	st := stateFrom(ctx)
	if st == nil {
		return nil
	}
	visible := map[string]bool{}
	if st.method != string(mcpgo.MethodPromptsGet) {
		for _, p := range s.reg.VisiblePrompts(ctx, st.caller) {
			visible[p.Name] = true
		}
	}
	out := prompts[:0:0]
	for _, p := range prompts {
		if st.method == string(mcpgo.MethodPromptsGet) && !s.reg.ScreenPrompt(ctx, st.caller, p.Name) || visible[p.Name] {
			out = append(out, p)
		}
	}
	return out
}

// visibleFingerprint identifies the set of tools caller can see.
func (s *Server) visibilityKey(caller capabilities.Caller) visKey {
	k, ok := s.reg.VisibilityKey(caller)
	return visKey{k, ok}
}

func (s *Server) visibleFingerprint(ctx context.Context, caller capabilities.Caller) string {
	return fingerprint(s.reg.VisibleNames(ctx, caller))
}

// notifyToolsChanged tells a session that listed tools before that its
// user's visible set changed since.
// The visible set is worked out again only when the session listed tools
// and something it depends on may have changed since (the registry, the
// caller's roles, permissions, state or confinement, or any feature flag
// when flags are configured).
func (s *Server) notifyToolsChanged(ctx context.Context, st *reqState) {
	key := s.visibilityKey(st.caller)
	if !s.sessions.toolsCheckDue(st.sessionID, key) {
		return
	}
	if s.sessions.swapToolsFP(st.sessionID, s.visibleFingerprint(ctx, st.caller), key) {
		_ = s.notifySession(st.sessionID, string(mcpgo.MethodNotificationToolsListChanged), nil)
		s.toolsChangedElsewhere(ctx, st.sessionID) // the session's stream may be on another replica
	}
}

func (s *Server) afterInitialize(ctx context.Context, _ any, req *mcpgo.InitializeRequest, res *mcpgo.InitializeResult) {
	if st := stateFrom(ctx); st != nil && st.created != "" {
		caps := req.Params.Capabilities
		info, _ := json.Marshal(req.Params.ClientInfo)
		s.sessions.setClientCaps(st.created, caps.Sampling != nil, caps.Elicitation != nil, caps.Roots != nil, res.ProtocolVersion, info)
	}
	if !slices.Contains(ProtocolVersions, res.ProtocolVersion) {
		res.ProtocolVersion = mcpgo.LATEST_LEGACY_PROTOCOL_VERSION
	}
	if res.Capabilities.Tools != nil {
		res.Capabilities.Tools.ListChanged = true
	}
}

// afterDiscover advertises list changes, which listen streams deliver per
// caller (see listen.go).
func (s *Server) afterDiscover(_ context.Context, _ any, _ *mcpgo.DiscoverRequest, res *mcpgo.DiscoverResult) {
	if res.Capabilities.Tools != nil {
		res.Capabilities.Tools.ListChanged = true
	}
	if res.Capabilities.Prompts != nil {
		res.Capabilities.Prompts.ListChanged = true
	}
	if s.tasks != nil {
		if res.Capabilities.Extensions == nil {
			res.Capabilities.Extensions = map[string]any{}
		}
		res.Capabilities.Extensions[tasksExtension] = map[string]any{}
	}
}

// beforeCallTool audits calls of names the registry does not know: mcp-go
// answers those itself, before any filter runs.
func (s *Server) beforeCallTool(ctx context.Context, _ any, req *mcpgo.CallToolRequest) {
	if st := stateFrom(ctx); st != nil && !s.reg.Has(req.Params.Name) {
		s.reg.Screen(ctx, st.caller, req.Params.Name)
	}
}

func (s *Server) afterListTools(ctx context.Context, _ any, _ *mcpgo.ListToolsRequest, _ *mcpgo.ListToolsResult) {
	if st := stateFrom(ctx); st != nil && st.sessionID != "" {
		s.sessions.setToolsFP(st.sessionID, s.visibleFingerprint(ctx, st.caller), s.visibilityKey(st.caller))
	}
}

func (s *Server) afterSetLevel(ctx context.Context, _ any, req *mcpgo.SetLevelRequest, _ *mcpgo.EmptyResult) {
	if st := stateFrom(ctx); st != nil && st.sessionID != "" {
		s.sessions.setLogLevel(st.sessionID, string(req.Params.Level))
	}
}

func (s *Server) afterListResources(ctx context.Context, _ any, _ *mcpgo.ListResourcesRequest, res *mcpgo.ListResourcesResult) {
	res.Resources = []mcpgo.Resource{}
	res.NextCursor = ""
	if st := stateFrom(ctx); st != nil {
		for _, r := range s.reg.VisibleResources(ctx, st.caller) {
			res.Resources = append(res.Resources, resourceOf(r))
		}
	}
}

func (s *Server) afterListResourceTemplates(ctx context.Context, _ any, _ *mcpgo.ListResourceTemplatesRequest, res *mcpgo.ListResourceTemplatesResult) {
	res.ResourceTemplates = []mcpgo.ResourceTemplate{}
	res.NextCursor = ""
	if st := stateFrom(ctx); st != nil {
		for _, r := range s.reg.VisibleResourceTemplates(ctx, st.caller) {
			res.ResourceTemplates = append(res.ResourceTemplates, templateOf(r))
		}
	}
}

// afterSubscribe records a subscription to a resource the caller can read.
// Any other URI is acknowledged all the same (hidden answers like unknown)
// and never notified.
func (s *Server) afterSubscribe(ctx context.Context, _ any, req *mcpgo.SubscribeRequest, _ *mcpgo.EmptyResult) {
	if st := stateFrom(ctx); st != nil && st.sessionID != "" && s.reg.CanRead(ctx, st.caller, req.Params.URI) {
		s.sessions.subscribe(st.sessionID, req.Params.URI, true)
	}
}

func (s *Server) afterUnsubscribe(ctx context.Context, _ any, req *mcpgo.UnsubscribeRequest, _ *mcpgo.EmptyResult) {
	if st := stateFrom(ctx); st != nil && st.sessionID != "" {
		s.sessions.subscribe(st.sessionID, req.Params.URI, false)
	}
}

// NotifyResourceUpdated tells the sessions subscribed to uri that it
// changed, on their GET streams. Each subscriber's user is loaded fresh and
// told only if they pass the resource's whole guard now (account state,
// requirement under the scopes of the session's latest token, and the
// resource's Allow, such as ownership of what a per-user URI names).
func (s *Server) NotifyResourceUpdated(ctx context.Context, uri string) {
	s.notifyResourceLocal(ctx, uri)
	if c := s.cluster; c != nil && len(c.node)+1+len(uri) <= cluster.MaxPayload {
		s.publish(ctx, topicResource, c.node+" "+uri) // the other replicas
	}
}

func (s *Server) notifyResourceLocal(ctx context.Context, uri string) {
	for sid, userID := range s.sessions.subscribers(uri) {
		caller, err := s.callerFor(ctx, userID)
		if err != nil {
			continue
		}
		// Under the scopes of the session's latest token (as list changes
		// are): another client of the same user, with fewer scopes, may
		// hold the session's stream now.
		caller.Scopes, caller.AllScopes = s.sessions.scopesOf(sid)
		if !s.reg.CanRead(ctx, caller, uri) {
			continue
		}
		_ = s.notifySession(sid, string(mcpgo.MethodNotificationResourceUpdated), map[string]any{"uri": uri})
	}
	s.notifyListenersUpdated(ctx, uri)
}

// callerFor loads a session's user outside of a request.
func (s *Server) callerFor(ctx context.Context, userID string) (capabilities.Caller, error) {
	if s.opts.Anonymous != nil {
		return *s.opts.Anonymous, nil
	}
	c, err := s.opts.Loader.LoadCaller(ctx, userID)
	if err != nil {
		return capabilities.Caller{}, fmt.Errorf("mcp: load caller: %w", err)
	}
	if c.UserID != "" && c.UserID != userID {
		return capabilities.Caller{}, errors.New("mcp: load caller: the loader returned another account")
	}
	c.UserID = userID
	c.Interactive = true // as the session's requests are served
	c.Session = false    // never a web-shell session over MCP
	return c, nil
}
