// Package relclient is an HTTP client of a running enclave server, used by
// the reliability tests (crash consistency, fault injection) and by the
// soak bench: it signs people in through the web shell's pages, runs the
// OAuth authorization flow the way an agent does (dynamic registration,
// PKCE S256, the sign-in and consent pages, the code exchange), refreshes
// tokens, and calls MCP over streamable HTTP.
//
// It talks to the server only over HTTP, like a real client; it holds no
// server internals.
package relclient

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
)

// Protocol is the MCP protocol version the sessions negotiate.
const Protocol = "2025-06-18"

// Client is one user agent: a cookie jar (the web session) and an HTTP
// client that does not follow redirects.
type Client struct {
	Base string
	HTTP *http.Client
	// ForwardedFor, when set, is sent as X-Forwarded-For: the client's
	// address as a trusted proxy would report it (per-address rate limits
	// then count this client alone).
	ForwardedFor string
}

// New returns a client of the server at base ("http://127.0.0.1:port").
// transport may be nil (a transport of its own).
func New(base string, transport http.RoundTripper) *Client {
	jar, _ := cookiejar.New(nil)
	if transport == nil {
		transport = &http.Transport{MaxIdleConnsPerHost: 4}
	}
	return &Client{Base: strings.TrimRight(base, "/"), HTTP: &http.Client{
		Jar: jar, Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// StatusError is an answer with an unexpected HTTP status.
type StatusError struct {
	What   string
	Status int
	Body   string
}

func (e *StatusError) Error() string {
	b := e.Body
	if len(b) > 200 {
		b = b[:200] + "…"
	}
	return fmt.Sprintf("relclient: %s: status %d: %s", e.What, e.Status, b)
}

// StatusOf returns the HTTP status carried by err, or 0.
func StatusOf(err error) int {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	return 0
}

func (c *Client) do(ctx context.Context, method, path string, body io.Reader, hdr map[string]string) (*http.Response, []byte, error) {
	target := path
	if strings.HasPrefix(path, "/") {
		target = c.Base + path
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if c.ForwardedFor != "" {
		req.Header.Set("X-Forwarded-For", c.ForwardedFor)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp, b, err
}

var form = map[string]string{"Content-Type": "application/x-www-form-urlencoded"}

// SignIn signs in on the web shell's sign-in page; the session cookie is
// kept in the client's jar.
func (c *Client) SignIn(ctx context.Context, email, password string) error {
	resp, body, err := c.do(ctx, http.MethodPost, "/login", strings.NewReader(url.Values{"email": {email}, "password": {password}}.Encode()), form)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusSeeOther && resp.StatusCode != http.StatusFound {
		return &StatusError{"sign in", resp.StatusCode, string(body)}
	}
	return nil
}

// Get fetches a page with the client's cookies and returns its status and
// body.
func (c *Client) Get(ctx context.Context, path string) (int, string, error) {
	resp, body, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, string(body), nil
}

// PostForm posts a form with the client's cookies, as a same-origin page
// would, and returns its status and body.
func (c *Client) PostForm(ctx context.Context, path string, v url.Values) (int, string, error) {
	resp, body, err := c.do(ctx, http.MethodPost, path, strings.NewReader(v.Encode()), map[string]string{
		"Content-Type": "application/x-www-form-urlencoded", "Origin": c.Base, "Sec-Fetch-Site": "same-origin",
	})
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, string(body), nil
}

// Tokens are an OAuth token pair and the client they were issued to.
type Tokens struct {
	ClientID     string `json:"-"`
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
}

const redirectURI = "http://127.0.0.1:9/callback"

var formAction = regexp.MustCompile(`<form[^>]*method="post"[^>]*action="([^"]*/oauth/authorize[^"]*)"`)

// Authorize registers a public client and runs the authorization code flow
// with PKCE through the sign-in and consent pages as the user with email,
// then exchanges the code. It uses a fresh cookie jar: the person signs in
// on the authorization page itself.
func (c *Client) Authorize(ctx context.Context, email, password string) (Tokens, error) {
	resp, body, err := c.do(ctx, http.MethodPost, "/oauth/register",
		strings.NewReader(`{"client_name":"relclient agent","redirect_uris":["`+redirectURI+`"],"token_endpoint_auth_method":"none"}`),
		map[string]string{"Content-Type": "application/json"})
	if err != nil {
		return Tokens{}, err
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &reg) != nil || reg.ClientID == "" {
		return Tokens{}, &StatusError{"register", resp.StatusCode, string(body)}
	}
	vb := make([]byte, 32)
	_, _ = rand.Read(vb)
	verifier := base64.RawURLEncoding.EncodeToString(vb)
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type": {"code"}, "client_id": {reg.ClientID}, "redirect_uri": {redirectURI},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"state": {"relclient-state-0123"}, "scope": {"mcp"}, "resource": {c.Base + "/mcp"},
	}
	browser := New(c.Base, c.HTTP.Transport)
	browser.ForwardedFor = c.ForwardedFor
	resp, body, err = browser.do(ctx, http.MethodGet, "/oauth/authorize?"+q.Encode(), nil, nil)
	if err != nil {
		return Tokens{}, err
	}
	m := formAction.FindSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		return Tokens{}, &StatusError{"authorize page", resp.StatusCode, string(body)}
	}
	resp, body, err = browser.do(ctx, http.MethodPost, html.UnescapeString(string(m[1])),
		strings.NewReader(url.Values{"email": {email}, "password": {password}}.Encode()), form)
	if err != nil {
		return Tokens{}, err
	}
	if m = formAction.FindSubmatch(body); resp.StatusCode != http.StatusOK || m == nil {
		return Tokens{}, &StatusError{"authorize sign-in", resp.StatusCode, string(body)}
	}
	resp, body, err = browser.do(ctx, http.MethodPost, html.UnescapeString(string(m[1])),
		strings.NewReader(url.Values{"decision": {"approve"}}.Encode()), form)
	if err != nil {
		return Tokens{}, err
	}
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if loc == nil || loc.Query().Get("code") == "" {
		return Tokens{}, &StatusError{"consent", resp.StatusCode, string(body)}
	}
	t, err := c.token(ctx, url.Values{
		"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "redirect_uri": {redirectURI},
		"client_id": {reg.ClientID}, "code_verifier": {verifier}, "resource": {c.Base + "/mcp"},
	})
	t.ClientID = reg.ClientID
	return t, err
}

// Refresh exchanges t's refresh token for a new pair.
func (c *Client) Refresh(ctx context.Context, t Tokens) (Tokens, error) {
	n, err := c.token(ctx, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {t.RefreshToken}, "client_id": {t.ClientID}, "resource": {c.Base + "/mcp"}})
	n.ClientID = t.ClientID
	return n, err
}

func (c *Client) token(ctx context.Context, v url.Values) (Tokens, error) {
	resp, body, err := c.do(ctx, http.MethodPost, "/oauth/token", strings.NewReader(v.Encode()), form)
	if err != nil {
		return Tokens{}, err
	}
	var t Tokens
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &t) != nil || t.AccessToken == "" {
		return Tokens{}, &StatusError{"token " + v.Get("grant_type"), resp.StatusCode, string(body)}
	}
	return t, nil
}

// Session is an MCP session.
type Session struct {
	c     *Client
	Token string
	ID    string
	next  atomic.Int64
}

// Open initializes an MCP session with token.
func (c *Client) Open(ctx context.Context, token string) (*Session, error) {
	s := &Session{c: c, Token: token}
	msg, hdr, err := s.rpc(ctx, "initialize", map[string]any{
		"protocolVersion": Protocol, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "relclient", "version": "1"},
	}, false)
	if err != nil {
		return nil, err
	}
	if s.ID = hdr.Get("Mcp-Session-Id"); s.ID == "" {
		return nil, fmt.Errorf("relclient: initialize: no session id: %s", msg)
	}
	if _, _, err := s.rpc(ctx, "notifications/initialized", nil, true); err != nil {
		return nil, err
	}
	return s, nil
}

// Result is a tools/call answer.
type Result struct {
	IsError    bool            `json:"isError"`
	Structured json.RawMessage `json:"structuredContent"`
	Content    []struct {
		Text string `json:"text"`
	} `json:"content"`
}

// Text is the result's text content.
func (r Result) Text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// RPCError is a JSON-RPC error answer.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("relclient: JSON-RPC error %d: %s", e.Code, e.Message)
}

// Call calls a tool. A tool failure is a Result with IsError; a protocol
// failure is an *RPCError; a refused request is a *StatusError.
func (s *Session) Call(ctx context.Context, tool string, args any) (Result, error) {
	msg, _, err := s.rpc(ctx, "tools/call", map[string]any{"name": tool, "arguments": args}, false)
	if err != nil {
		return Result{}, err
	}
	var r Result
	if err := json.Unmarshal(msg, &r); err != nil {
		return Result{}, fmt.Errorf("relclient: %s: %w", tool, err)
	}
	return r, nil
}

// Close ends the session (DELETE).
func (s *Session) Close(ctx context.Context) error {
	resp, body, err := s.c.do(ctx, http.MethodDelete, "/mcp", nil, map[string]string{
		"Authorization": "Bearer " + s.Token, "Mcp-Session-Id": s.ID, "MCP-Protocol-Version": Protocol,
	})
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return &StatusError{"close session", resp.StatusCode, string(body)}
	}
	return nil
}

// rpc sends one JSON-RPC message and returns the result of the answer.
func (s *Session) rpc(ctx context.Context, method string, params any, notification bool) (json.RawMessage, http.Header, error) {
	m := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		m["params"] = params
	}
	if !notification {
		m["id"] = s.next.Add(1)
	}
	b, _ := json.Marshal(m)
	hdr := map[string]string{
		"Authorization": "Bearer " + s.Token, "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
	}
	if s.ID != "" {
		hdr["Mcp-Session-Id"] = s.ID
		hdr["MCP-Protocol-Version"] = Protocol
	}
	resp, body, err := s.c.do(ctx, http.MethodPost, "/mcp", bytes.NewReader(b), hdr)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode >= 300 {
		return nil, resp.Header, &StatusError{method, resp.StatusCode, string(body)}
	}
	if notification {
		return nil, resp.Header, nil
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var last []byte
		for _, line := range bytes.Split(body, []byte("\n")) {
			if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				last = d
			}
		}
		body = last
	}
	var env struct {
		Result json.RawMessage `json:"result"`
		Error  *RPCError       `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, resp.Header, fmt.Errorf("relclient: %s: %w: %s", method, err, body)
	}
	if env.Error != nil {
		return nil, resp.Header, env.Error
	}
	return env.Result, resp.Header, nil
}
