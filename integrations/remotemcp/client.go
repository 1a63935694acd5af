package remotemcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/internal/egress"
)

// protocolVersion is the MCP version enclave speaks to remote servers
// (mcp-go's client would otherwise negotiate its newest, stateless one,
// which most servers do not speak yet).
const protocolVersion = "2025-06-18"

// maxListPages bounds the pages of one tools/list.
const maxListPages = 8

// newHTTPClient returns the client for remotes: the egress client (https,
// public addresses only, bounded time and answer size, at most 3
// redirects each re-checked) and, with Options.AllowLoopbackHTTP (tests),
// the same over plain http to loopback hosts.
func (s *Service) newHTTPClient(maxBytes int64) *http.Client {
	hc := egress.NewClient(egress.Options{AllowPrivate: s.opts.AllowLoopbackHTTP, Timeout: s.timeout, MaxResponseBytes: maxBytes, MaxRedirects: -1})
	if !s.opts.AllowLoopbackHTTP {
		return hc
	}
	plain := &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil || !loopback(host) {
				return egress.ErrForbiddenAddress
			}
			return nil
		}}).DialContext,
		ResponseHeaderTimeout: s.timeout,
	}
	secure := hc.Transport
	hc.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Scheme == "http" && loopback(r.URL.Hostname()) {
			resp, err := plain.RoundTrip(r)
			if err != nil {
				return nil, err
			}
			resp.Body = &capped{rc: resp.Body, left: maxBytes}
			return resp, nil
		}
		return secure.RoundTrip(r)
	})
	return hc
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type capped struct {
	rc   io.ReadCloser
	left int64
}

func (b *capped) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, egress.ErrResponseTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n + int(b.left), egress.ErrResponseTooLarge
	}
	return n, err
}

func (b *capped) Close() error { return b.rc.Close() }

// errUnauthorized: the remote asked for a token (401); challenge is its
// WWW-Authenticate header.
type errUnauthorized struct{ challenge string }

func (e *errUnauthorized) Error() string { return "remotemcp: the server requires authorization" }

// probe sends initialize without a token and tells whether the server
// answers (nil), asks for authorization (*errUnauthorized) or fails.
func (s *Service) probe(ctx context.Context, serverURL string) error {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + protocolVersion + `","capabilities":{},"clientInfo":{"name":"enclave","version":"1"}}}`
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, serverURL, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := s.listHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return &errUnauthorized{challenge: resp.Header.Get("WWW-Authenticate")}
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
			s.endSession(serverURL, sid, "")
		}
		return nil
	default:
		return fmt.Errorf("remotemcp: the server answered HTTP %d to initialize", resp.StatusCode)
	}
}

// session opens an MCP session with the remote (initialize), with the
// access token when there is one.
func (s *Service) session(ctx context.Context, hc *http.Client, serverURL, token string) (*mcpclient.Client, func(), error) {
	// Not WithHTTPTimeout: it sets the Timeout of the shared client hc
	// (which has its own already).
	opts := []transport.StreamableHTTPCOption{transport.WithHTTPBasicClient(hc)}
	if token != "" {
		opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	}
	tr, err := transport.NewStreamableHTTP(serverURL, opts...)
	if err != nil {
		return nil, nil, err
	}
	c := mcpclient.NewClient(tr, mcpclient.WithProtocolVersion(protocolVersion))
	if err := c.Start(ctx); err != nil {
		return nil, nil, err
	}
	closeFn := func() {
		sid := tr.GetSessionId()
		_ = c.Close()
		if sid != "" {
			// mcp-go's Close sends its DELETE without our header: end the
			// session ourselves, with it.
			s.endSession(serverURL, sid, token)
		}
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ProtocolVersion = protocolVersion
	init.Params.ClientInfo = mcpgo.Implementation{Name: "enclave", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		closeFn()
		return nil, nil, err
	}
	return c, closeFn, nil
}

// endSession deletes a remote session, in the background, bounded.
func (s *Service) endSession(serverURL, sid, token string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, serverURL, nil)
		if err != nil {
			return
		}
		req.Header.Set("Mcp-Session-Id", sid)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if resp, err := s.listHTTP.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
}

// remoteTool is a remote tool as kept: sanitised.
type remoteTool struct {
	Name        string          `json:"name"`
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema"`
	ReadOnly    bool            `json:"readOnly,omitempty"`
}

func (r serverRow) tools() []remoteTool {
	var ts []remoteTool
	_ = json.Unmarshal([]byte(r.Tools), &ts)
	return ts
}

// listTools reads the remote's tools and keeps those enclave can offer:
// a name the capability rules allow (letters, digits, "_", "-", the whole
// capability name at most 64 characters), an object input schema of at
// most MaxSchemaBytes without references, at most MaxTools of them.
// skipped counts the others.
func (s *Service) listTools(ctx context.Context, serverURL, server, token string) (kept []remoteTool, skipped int, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	c, done, err := s.session(ctx, s.listHTTP, serverURL, token)
	if err != nil {
		return nil, 0, err
	}
	defer done()
	seen := map[string]bool{}
	var req mcpgo.ListToolsRequest
	for page := 0; page < maxListPages; page++ {
		res, err := c.ListToolsByPage(ctx, req)
		if err != nil {
			return nil, 0, err
		}
		for _, t := range res.Tools {
			if len(kept) >= MaxTools {
				// Not compiled: a list of many thousand small tools
				// would cost a schema compilation each.
				skipped++
				continue
			}
			rt, ok := s.sanitise(server, t)
			if !ok || seen[rt.Name] {
				skipped++
				continue
			}
			seen[rt.Name] = true
			kept = append(kept, rt)
		}
		if res.NextCursor == "" {
			break
		}
		req.Params.Cursor = res.NextCursor
	}
	return kept, skipped, nil
}

func (s *Service) sanitise(server string, t mcpgo.Tool) (remoteTool, bool) {
	name := CapabilityName(server, t.Name)
	if !toolName.MatchString(t.Name) || len(name) > 64 {
		return remoteTool{}, false
	}
	schema := t.RawInputSchema
	if len(schema) == 0 {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return remoteTool{}, false
		}
		schema = b
	}
	if len(schema) > MaxSchemaBytes {
		return remoteTool{}, false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(schema, &top) != nil {
		return remoteTool{}, false
	}
	if typ, ok := top["type"]; ok && string(bytes.TrimSpace(typ)) != `"object"` {
		return remoteTool{}, false
	}
	var compact bytes.Buffer
	if json.Compact(&compact, schema) != nil {
		return remoteTool{}, false
	}
	rt := remoteTool{Name: t.Name, Title: clip(t.Title, 128), Description: clip(t.Description, MaxDescription), InputSchema: compact.Bytes()}
	if t.Annotations.ReadOnlyHint != nil {
		rt.ReadOnly = *t.Annotations.ReadOnlyHint
	}
	// The schema must compile as a capability's (no $ref, valid JSON
	// Schema); a tool whose schema does not is not offered.
	if _, err := s.reg.Compile(s.toolCapability(server, rt)); err != nil {
		return remoteTool{}, false
	}
	return rt, true
}

// clip cuts s to at most n bytes on a rune boundary, dropping control
// characters other than newlines and tabs.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// callTool forwards one call to the remote.
// listChanged reports whether the remote sent
// notifications/tools/list_changed during the call.
func (s *Service) callTool(ctx context.Context, serverURL, token, tool string, args json.RawMessage) (res *mcpgo.CallToolResult, listChanged bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	c, done, err := s.session(ctx, s.callHTTP, serverURL, token)
	if err != nil {
		return nil, false, err
	}
	defer done()
	var changed atomic.Bool
	c.OnNotification(func(n mcpgo.JSONRPCNotification) {
		if n.Method == mcpgo.MethodNotificationToolsListChanged {
			changed.Store(true)
		}
	})
	var req mcpgo.CallToolRequest
	req.Params.Name = tool
	if len(args) > 0 && string(args) != "null" {
		var m map[string]any
		if err := json.Unmarshal(args, &m); err != nil {
			return nil, false, err
		}
		req.Params.Arguments = m
	}
	res, err = c.CallTool(ctx, req)
	return res, changed.Load(), err
}

// toResult turns a remote's answer into a capability result: text and
// images kept, everything bounded by the answer's size limit already.
func toResult(server string, res *mcpgo.CallToolResult) capabilities.Result {
	out := capabilities.Result{IsError: res.IsError}
	for _, c := range res.Content {
		switch c := c.(type) {
		case mcpgo.TextContent:
			out.Content = append(out.Content, capabilities.Text{Text: c.Text})
		case mcpgo.ImageContent:
			out.Content = append(out.Content, capabilities.Text{Text: fmt.Sprintf("[an image (%s) from remote server %s, not shown]", clip(c.MIMEType, 64), server)})
		}
	}
	if len(out.Content) == 0 {
		if len(res.RawStructuredContent) > 0 {
			out.Content = append(out.Content, capabilities.Text{Text: string(res.RawStructuredContent)})
		} else if res.StructuredContent != nil {
			if b, err := json.Marshal(res.StructuredContent); err == nil {
				out.Content = append(out.Content, capabilities.Text{Text: string(b)})
			}
		} else {
			out.Content = append(out.Content, capabilities.Text{Text: ""})
		}
	}
	return out
}

// breaker is a server's circuit breaker: BreakerFailures consecutive
// failures open it for BreakerCooldown; then one call is let through
// (half-open), whose success closes it and whose failure opens it again.
type breaker struct {
	// renew serialises the renewals of the server's token (accessToken).
	renew     sync.Mutex
	mu        sync.Mutex
	failures  int
	openUntil time.Time
	trial     bool
}

func (s *Service) breakerOf(publicID string) *breaker {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.breakers[publicID]
	if !ok {
		if len(s.breakers) > 100000 {
			s.breakers = map[string]*breaker{}
		}
		b = &breaker{}
		s.breakers[publicID] = b
	}
	return b
}

// allow reports whether a call may go to the server now.
func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failures < BreakerFailures {
		return true
	}
	if now.Before(b.openUntil) || b.trial {
		return false
	}
	b.trial = true
	return true
}

func (b *breaker) done(now time.Time, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trial = false
	if ok {
		b.failures = 0
		return
	}
	b.failures++
	if b.failures >= BreakerFailures {
		b.openUntil = now.Add(BreakerCooldown)
	}
}

// describeFailure says in a sentence why a remote failed, without the
// remote's own words (which may echo a token) or internal detail.
func describeFailure(err error) string {
	var ue *errUnauthorized
	switch {
	case errors.As(err, &ue), errors.Is(err, transport.ErrUnauthorized):
		return "the server refused the token (finish consent again on the MCP servers page)"
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return "the server did not answer in time"
	case errors.Is(err, egress.ErrResponseTooLarge):
		return "the server's answer was too large"
	case errors.Is(err, egress.ErrForbiddenAddress):
		return "the server's address is not a public internet address"
	case errors.Is(err, egress.ErrScheme):
		return "the server's URL is not https"
	}
	return "the server could not be reached or did not answer as an MCP server"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
