// Package outbound is the secret-aware outbound gateway: it sends an HTTP
// request on a caller's behalf and lets the request use the caller's
// stored secrets without the agent ever seeing them.
//
// Headers and body may hold placeholders {{secret:NAME}} and
// {{connection:NAME}}. A connection placeholder (package integrations)
// becomes "Bearer <access token>" of the caller's own connected account,
// and only for a request to one of its provider's API hosts; elsewhere it
// is refused like an unapproved secret, and the token (alone or in the
// header's form) is scrubbed from the answer like a secret. Before anything
// is sent, each one is resolved against the caller's own secrets (never
// another user's) and filled in only when the secret has not expired and
// its owner approved the destination host for it (secrets.HostAllowed);
// otherwise the request is refused with an error naming the host and the
// secret, never the value. Placeholders in the URL are refused: URLs end
// up in logs, Referer headers and redirects.
//
// Requests leave through internal/egress: https only, the dialled address
// checked after resolution (no loopback, private, link-local, metadata
// addresses), bounded in time, redirects and response size. Every
// redirect a secret-bearing request follows is checked again: the new host
// must be approved for every secret the request carries, or the redirect
// is refused before the secrets are sent there.
//
// Every response (status line, headers and body) is scrubbed: each value of
// a secret the request used is replaced by its placeholder, in its raw form
// and the encodings an echo commonly takes (base64, base64url, URL
// escaping in either case, JSON string escaping as Go, PHP and Python
// write it, hex). Header names are scrubbed too, and a caller may not ask
// for a compressed answer (the transport decompresses what it asked for
// before scrubbing). A secret embedded inside a larger
// encoded blob (say a base64 "user:token" pair) is not found by the
// scrubber; that is why host approval, not scrubbing, is the control.
//
// Each request counts against the caller's daily outbound quota
// (quota.Meter.AllowClass, class "outbound"), and each filled-in secret is
// audited: the secret's name, the host and the status code; never the
// value.
//
// Embedders call Gateway.Do from their own capability handlers with the
// handler's Caller; the httpRequest capability (Gateway.Capability) is the
// same call for agents.
package outbound

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/internal/egress"
	"github.com/enclave-mcp/enclave/internal/tracing"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/storage"
)

// QuotaClass is the quota class each outbound request counts under.
const QuotaClass = "outbound"

// MaxSecretsPerRequest is how many different secrets one request may use.
const MaxSecretsPerRequest = 16

// MaxHeaderBytes bounds a request's headers, names and values, with the
// secrets filled in.
const MaxHeaderBytes = 128 << 10

// Defaults of Limits.
const (
	DefaultDailyRequests    = 1000
	DefaultTimeout          = 15 * time.Second
	DefaultMaxRedirects     = 3
	DefaultMaxResponseBytes = 1 << 20
	DefaultMaxRequestBytes  = 1 << 20
	DefaultMaxConcurrent    = 4
)

// Limits bound what one user may send. Zero fields take the defaults.
type Limits struct {
	// DailyRequests is how many requests a user may send per UTC day;
	// negative: unlimited. Default DefaultDailyRequests.
	DailyRequests int64
	// Timeout bounds one request, redirects and body included.
	Timeout time.Duration
	// MaxRedirects is how many redirects a request follows; negative
	// follows none (the redirect response is returned).
	MaxRedirects int
	// MaxResponseBytes bounds a response body; a longer one fails.
	MaxResponseBytes int64
	// MaxRequestBytes bounds a request body.
	MaxRequestBytes int
	// MaxConcurrent is how many requests one user may have in flight at
	// once; more are refused. Without it, the daily quota's worth of
	// requests to a server that answers slowly would all hold a
	// connection and up to MaxResponseBytes of memory at the same time.
	MaxConcurrent int
}

// WithQuota returns l with DailyRequests taken from q's daily limit of
// QuotaClass (--quota outbound=N/day) when l sets none.
func (l Limits) WithQuota(q quota.Limits) Limits {
	if n := q.Daily[QuotaClass]; l.DailyRequests == 0 && n > 0 {
		l.DailyRequests = n
	}
	return l
}

func (l Limits) withDefaults() Limits {
	if l.DailyRequests == 0 {
		l.DailyRequests = DefaultDailyRequests
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	if l.MaxRedirects == 0 {
		l.MaxRedirects = DefaultMaxRedirects
	}
	if l.MaxResponseBytes <= 0 {
		l.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if l.MaxRequestBytes <= 0 {
		l.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if l.MaxConcurrent <= 0 {
		l.MaxConcurrent = DefaultMaxConcurrent
	}
	return l
}

// Quota counts requests per user and day; *quota.Meter implements it.
type Quota interface {
	AllowClass(ctx context.Context, caller capabilities.Caller, class string, limit int64) error
}

// Auditor records audit events; *audit.Log implements it.
type Auditor interface {
	Record(ctx context.Context, e audit.Event) error
	HashUser(stableUserID string) string
}

// Connections opens a caller's connected accounts for {{connection:NAME}};
// *integrations.Service implements it.
type Connections interface {
	Use(ctx context.Context, o storage.Owner, name string) (integrations.Usable, error)
}

// Options configure a Gateway.
type Options struct {
	// Secrets and Owner resolve the caller's secrets. Required.
	Secrets *secrets.Service
	Owner   capabilities.OwnerOf
	// Connections resolves {{connection:NAME}} (nil: no connection is
	// known, and such a placeholder is refused).
	Connections Connections
	// Quota counts requests (nil: no daily limit).
	Quota Quota
	// Audit records every filled-in secret use (nil: not audited).
	Audit  Auditor
	Limits Limits
	// AllowPrivate and TLSConfig are for tests only: they let the gateway
	// reach an httptest TLS server on loopback. Never set them from
	// configuration.
	AllowPrivate bool
	TLSConfig    *tls.Config
	// Now is the clock secrets' expiry is checked against (default
	// time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Gateway sends requests on callers' behalf.
type Gateway struct {
	o      Options
	lim    Limits
	client *http.Client

	mu       sync.Mutex
	inFlight map[string]int // requests in flight per user
}

// New returns a gateway.
func New(o Options) *Gateway {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	g := &Gateway{o: o, lim: o.Limits.withDefaults(), inFlight: map[string]int{}}
	g.client = egress.NewClient(egress.Options{
		AllowPrivate:     o.AllowPrivate,
		Timeout:          g.lim.Timeout,
		MaxRedirects:     g.lim.MaxRedirects,
		MaxResponseBytes: g.lim.MaxResponseBytes,
		TLSConfig:        o.TLSConfig,
		CheckRedirect:    checkRedirect,
	})
	return g
}

// Request is one outbound request. Headers and Body may hold
// {{secret:NAME}} placeholders; URL may not.
type Request struct {
	Method  string            `json:"method,omitempty" jsonschema:"the HTTP method (default GET)" schema:"enum=GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS,default=GET"`
	URL     string            `json:"url" jsonschema:"an https URL on the public internet; secret placeholders are not allowed here"`
	Headers map[string]string `json:"headers,omitempty" jsonschema:"request headers; values may contain {{secret:NAME}} placeholders, and {{connection:NAME}} (a connected account's bearer token, e.g. Authorization: {{connection:github}}) for its provider's hosts"`
	Body    string            `json:"body,omitempty" jsonschema:"request body (text); may contain {{secret:NAME}} placeholders"`
}

// Response is what came back, scrubbed of every secret the request used.
type Response struct {
	Status  int                 `json:"status"`
	URL     string              `json:"url" jsonschema:"the URL that answered, after redirects"`
	Headers map[string][]string `json:"headers"`
	Body    string              `json:"body"`
	// BodyEncoding is "base64" when the body is not UTF-8 text.
	BodyEncoding string `json:"bodyEncoding,omitempty" jsonschema:"base64 when the body is not UTF-8 text" schema:"enum=base64"`
	// SecretsUsed names the secrets filled into the request.
	SecretsUsed []string `json:"secretsUsed,omitempty"`
	// ConnectionsUsed names the connected accounts whose token the
	// request carried.
	ConnectionsUsed []string `json:"connectionsUsed,omitempty"`
}

var (
	// placeholder matches {{secret:NAME}} and {{connection:NAME}}: group 1
	// is "secret:NAME" or "connection:NAME", the key of a used value.
	placeholder = regexp.MustCompile(`\{\{((?:secret|connection):[A-Za-z0-9][A-Za-z0-9_.-]{0,63})\}\}`)
	methods     = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}
	// Headers a caller may not set: the transport owns them.
	// Accept-Encoding among them: when the caller asks for a compressed
	// answer, net/http hands the body over compressed, and a secret echoed
	// inside it passes the scrubber unseen (the agent just decompresses
	// it). The transport asks for gzip itself and decompresses before the
	// scrubber reads the body.
	// Range and If-Range among them: an agent asking for a reflected
	// secret a few bytes at a time would get pieces too short for the
	// scrubber to recognise.
	reserved = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Upgrade", "Te", "Trailer", "Proxy-Authorization", "Proxy-Connection", "Accept-Encoding", "Range", "If-Range"}
)

func refuse(format string, args ...any) error {
	return capabilities.Errorf(capabilities.CodeInvalidInput, format, args...)
}

// used is one secret or connection filled into a request.
type used struct {
	key   string // "secret:NAME" or "connection:NAME", the placeholder's inside
	name  string
	value []byte
	hosts []string
	// token is a connection's access token (value is "Bearer <token>"):
	// the scrubber looks for it on its own too.
	token []byte
}

// label names u in a sentence: secret "x" or connection "y".
func (u used) label() string {
	kind, _, _ := strings.Cut(u.key, ":")
	return fmt.Sprintf("%s %q", kind, u.name)
}

type ctxKey struct{}

// checkRedirect runs for every redirect (after egress's own checks): a
// request carrying secrets may only move to a host every one of them is
// approved for.
func checkRedirect(req *http.Request, _ []*http.Request) error {
	us, _ := req.Context().Value(ctxKey{}).([]used)
	if len(us) == 0 {
		return nil
	}
	host, err := secrets.CanonicalRequestHost(req.URL.Hostname())
	if err != nil {
		return &redirectRefused{host: req.URL.Hostname(), secret: us[0].label()}
	}
	for _, u := range us {
		if !secrets.HostAllowed(u.hosts, host, req.URL.Port()) {
			return &redirectRefused{host: host, secret: u.label()}
		}
	}
	// The redirect goes to the name that was approved (see Do).
	req.URL.Host = hostPort(host, req.URL.Port())
	return nil
}

// hostPort joins a canonical host and an optional port into a URL's Host.
func hostPort(host, port string) string {
	if port != "" {
		return net.JoinHostPort(host, port)
	}
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

type redirectRefused struct{ host, secret string }

func (e *redirectRefused) Error() string {
	return fmt.Sprintf("redirect to %s refused: %s is not approved for that host", e.host, e.secret)
}

// Do sends req on caller's behalf. Refusals (a bad request, an unknown,
// expired or unapproved secret, the quota) are *capabilities.Error values
// sent before any connection; a failed exchange (address not public,
// timeout, oversized response, refused redirect) is a CodeConflict error.
// An answer with any status code is a Response, not an error.
func (g *Gateway) Do(ctx context.Context, caller capabilities.Caller, req Request) (Response, error) {
	if !caller.Authenticated() {
		return Response{}, capabilities.Errorf(capabilities.CodeNotFound, "Outbound requests need a signed-in caller.")
	}
	switch caller.State {
	case capabilities.AccountActive:
	case capabilities.AccountSuspended:
		return Response{}, capabilities.Errorf(capabilities.CodeAccountSuspended, "This account is suspended.")
	default:
		return Response{}, capabilities.Errorf(capabilities.CodeAccountDeleting, "This account cannot send requests now.")
	}
	method := strings.ToUpper(strings.TrimSpace(req.Method))
	if method == "" {
		method = http.MethodGet
	}
	if !slices.Contains(methods, method) {
		return Response{}, refuse("Method %q is not supported; use one of %s.", req.Method, strings.Join(methods, ", "))
	}
	if hasPlaceholder(req.URL) || hasPlaceholder(unescape(req.URL)) {
		return Response{}, refuse("Secret and connection placeholders are not allowed in the URL; put the secret in a header or the body.")
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return Response{}, refuse("The URL is not valid.")
	}
	if err := egress.CheckURL(u); err != nil {
		return Response{}, refuse("The URL must be https, with a host and no user name or password in it.")
	}
	host, err := secrets.CanonicalRequestHost(u.Hostname())
	if err != nil {
		return Response{}, refuse("The URL's host %q is not a valid host name.", u.Hostname())
	}
	// Send to the very name that was checked, not to whatever net/http
	// makes of the original spelling.
	u.Host = hostPort(host, u.Port())
	if len(req.Body) > g.lim.MaxRequestBytes {
		return Response{}, refuse("The body is larger than %d bytes.", g.lim.MaxRequestBytes)
	}
	headerBytes := 0
	for name, v := range req.Headers {
		headerBytes += len(name) + len(v)
	}
	if headerBytes > MaxHeaderBytes {
		return Response{}, refuse("The headers are larger than %d bytes.", MaxHeaderBytes)
	}
	for name, v := range req.Headers {
		if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(v) {
			return Response{}, refuse("Header %q is not a valid header.", name)
		}
		// Many servers (CGI, WSGI, PHP) read "If_Range" or
		// "Accept_Encoding" as the hyphenated header: an underscore does
		// not make a reserved name the caller's.
		if slices.Contains(reserved, http.CanonicalHeaderKey(strings.ReplaceAll(name, "_", "-"))) {
			return Response{}, refuse("Header %q is set by the gateway, not by the caller.", name)
		}
	}

	// Resolve every placeholder before anything is sent.
	names, err := placeholders(req)
	if err != nil {
		return Response{}, err
	}
	if len(names) > MaxSecretsPerRequest {
		return Response{}, refuse("A request may use at most %d secrets.", MaxSecretsPerRequest)
	}
	var us []used
	if len(names) > 0 {
		o, err := g.o.Owner(ctx, caller)
		if err != nil {
			return Response{}, err
		}
		owner := storage.Owner(o)
		now := g.o.Now()
		for _, key := range names {
			kind, name, _ := strings.Cut(key, ":")
			if kind == "connection" {
				cu, err := g.connection(ctx, caller, owner, name, host, u.Port())
				if err != nil {
					return Response{}, err
				}
				us = append(us, cu)
				continue
			}
			s, err := g.o.Secrets.Use(ctx, owner, name, now)
			switch {
			case errors.Is(err, secrets.ErrNotFound):
				return Response{}, refuse("There is no secret named %q.", name)
			case errors.Is(err, secrets.ErrExpired):
				g.audit(ctx, caller, audit.ResultDenied, name, host, "expired")
				return Response{}, refuse("Secret %q expired at %s and is no longer used.", name, s.ExpiresAt.UTC().Format(time.RFC3339))
			case err != nil:
				return Response{}, fmt.Errorf("outbound: %w", err)
			}
			if !secrets.HostAllowed(s.AllowedHosts, host, u.Port()) {
				g.audit(ctx, caller, audit.ResultDenied, name, host, "host not approved")
				return Response{}, refuse("Secret %q is not approved for host %s; its owner can approve the host on the account's Secrets page.", name, host)
			}
			us = append(us, used{key: key, name: name, value: s.Value, hosts: s.AllowedHosts})
		}
	}
	// Bound the request as it will be sent: each placeholder grows by its
	// secret's length (up to secrets.MaxValueBytes), so a body within
	// MaxRequestBytes written only of placeholders would otherwise expand
	// to gigabytes in memory.
	if filledLen(req.Body, us) > g.lim.MaxRequestBytes {
		return Response{}, refuse("With its secrets filled in, the body is larger than %d bytes.", g.lim.MaxRequestBytes)
	}
	headerBytes = 0
	for name, v := range req.Headers {
		headerBytes += len(name) + filledLen(v, us)
	}
	if headerBytes > MaxHeaderBytes {
		return Response{}, refuse("With their secrets filled in, the headers are larger than %d bytes.", MaxHeaderBytes)
	}
	if !g.enter(caller.UserID) {
		return Response{}, &capabilities.Error{Code: capabilities.CodeQuotaExceeded, RetryAfter: g.o.Now().Add(time.Second),
			Message: fmt.Sprintf("At most %d outbound requests may be in flight at once; wait for one to finish.", g.lim.MaxConcurrent)}
	}
	defer g.leave(caller.UserID)
	if g.o.Quota != nil {
		limit := g.lim.DailyRequests
		if limit < 0 {
			limit = math.MaxInt64 // no server limit; the account's plan still applies
		}
		if err := g.o.Quota.AllowClass(ctx, caller, QuotaClass, limit); err != nil {
			if quota.IsPlanLimit(err) {
				return Response{}, err // the plan's window and limit, as the meter named them
			}
			if at, ok := capabilities.RetryAfterOf(err); ok && capabilities.CodeOf(err) == capabilities.CodeQuotaExceeded {
				return Response{}, &capabilities.Error{Code: capabilities.CodeQuotaExceeded, RetryAfter: at,
					Message: fmt.Sprintf("Daily limit of %d outbound requests reached; retry after %s.", g.lim.DailyRequests, at.UTC().Format(time.RFC3339))}
			}
			return Response{}, err
		}
	}

	fill := func(s string) string {
		return placeholder.ReplaceAllStringFunc(s, func(m string) string {
			key := placeholder.FindStringSubmatch(m)[1]
			for _, u := range us {
				if u.key == key {
					return string(u.value)
				}
			}
			return m
		})
	}
	var body io.Reader
	if req.Body != "" {
		body = strings.NewReader(fill(req.Body))
	}
	hreq, err := http.NewRequestWithContext(context.WithValue(ctx, ctxKey{}, us), method, u.String(), body)
	if err != nil {
		return Response{}, refuse("The request is not valid.")
	}
	for name, v := range req.Headers {
		hreq.Header.Set(name, fill(v))
	}
	if len(us) > 0 && method != http.MethodHead {
		// Asked for by the gateway, not left to net/http: the transport
		// decodes its own gzip only when the first Content-Encoding is
		// exactly "gzip" and then drops the header whole, so a second
		// coding ("gzip" twice, "gzip" then "br") would reach the agent
		// unmarked, an echoed secret inside it. decodeBody sees them all.
		hreq.Header.Set("Accept-Encoding", "gzip")
	}
	if hreq.Header.Get("User-Agent") == "" {
		hreq.Header.Set("User-Agent", "enclave-outbound/1")
	}

	scrub := newScrubber(us)
	resp, err := g.send(ctx, hreq, host)
	if rr := (*redirectRefused)(nil); errors.As(err, &rr) {
		// The redirect's host comes from the server's Location, which
		// can echo a secret: scrub it like the response.
		g.auditAll(ctx, caller, us, audit.ResultDenied, scrub.string(rr.host), "redirect from "+host+" not approved")
		return Response{}, g.failure(host, err, scrub)
	}
	if err != nil {
		g.auditAll(ctx, caller, us, audit.ResultFailure, host, "no response")
		return Response{}, g.failure(host, err, scrub)
	}
	raw, err := egress.ReadAll(resp)
	if err != nil {
		g.auditAll(ctx, caller, us, audit.ResultFailure, host, fmt.Sprintf("status=%d body unread", resp.StatusCode))
		return Response{}, g.failure(host, err, scrub)
	}
	if len(us) > 0 && resp.StatusCode == http.StatusPartialContent {
		// A piece of a body may hold a piece of a secret, which the
		// scrubber cannot recognise.
		g.auditAll(ctx, caller, us, audit.ResultDenied, host, "partial response")
		return Response{}, &capabilities.Error{Code: capabilities.CodeConflict,
			Message: fmt.Sprintf("%s answered a request carrying secrets with part of a body (206); the gateway returns only whole answers to such requests.", host)}
	}
	if len(us) > 0 {
		// net/http decodes the gzip it asked for itself; a server may
		// still send an encoding nobody asked for, which would carry an
		// echoed secret past the scrubber.
		plain, err := decodeBody(raw, resp.Header.Values("Content-Encoding"), g.lim.MaxResponseBytes)
		if err != nil {
			// The coding's name is the server's and may echo a secret.
			msg := scrub.string(err.Error())
			g.auditAll(ctx, caller, us, audit.ResultDenied, host, fmt.Sprintf("status=%d %s", resp.StatusCode, msg))
			return Response{}, &capabilities.Error{Code: capabilities.CodeConflict, Message: fmt.Sprintf("The response from %s: %s.", host, msg)}
		}
		if plain != nil {
			raw = plain
			resp.Header.Del("Content-Encoding")
			resp.Header.Del("Content-Length")
		}
	}
	g.auditAll(ctx, caller, us, audit.ResultSuccess, host, fmt.Sprintf("status=%d", resp.StatusCode))

	out := Response{Status: resp.StatusCode, URL: scrub.string(resp.Request.URL.String()), Headers: map[string][]string{}}
	for k, vs := range resp.Header {
		k = scrub.string(k) // a header's name can echo a value too
		for _, v := range vs {
			out.Headers[k] = append(out.Headers[k], scrub.string(v))
		}
	}
	// A short secret replaced by its longer placeholder grows the body:
	// a 1-byte value echoed a million times would become 12 MB or more.
	// The scrubbed body is bounded while it is written.
	clean, ok := scrub.bounded(raw, 2*g.lim.MaxResponseBytes)
	if !ok {
		return Response{}, &capabilities.Error{Code: capabilities.CodeConflict,
			Message: fmt.Sprintf("The response from %s, with the secrets it echoes replaced by placeholders, is larger than %d bytes.", host, 2*g.lim.MaxResponseBytes)}
	}
	if utf8.Valid(clean) {
		out.Body = string(clean)
	} else {
		out.Body, out.BodyEncoding = base64.StdEncoding.EncodeToString(clean), "base64"
	}
	for _, u := range us {
		if strings.HasPrefix(u.key, "connection:") {
			out.ConnectionsUsed = append(out.ConnectionsUsed, u.name)
		} else {
			out.SecretsUsed = append(out.SecretsUsed, u.name)
		}
	}
	return out, nil
}

// send sends hreq, in a client span "outbound METHOD" when ctx's span is
// recorded (the server traces requests): the span records the method, the
// host and the status, never the URL's path or query, a header, the body
// or a secret. No traceparent goes out: the trace's ids are the
// operator's, not the remote host's to see.
func (g *Gateway) send(ctx context.Context, hreq *http.Request, host string) (*http.Response, error) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return g.client.Do(hreq)
	}
	_, span := parent.TracerProvider().Tracer(tracing.Scope).Start(ctx, "outbound "+hreq.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", hreq.Method), attribute.String("server.address", host)))
	defer span.End()
	resp, err := g.client.Do(hreq)
	if err != nil {
		span.SetAttributes(attribute.String("error.type", fmt.Sprintf("%T", err)))
		span.SetStatus(codes.Error, "")
		return resp, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, "")
	}
	return resp, nil
}

// decodeBody undoes the content codings of a response body (the header's
// values, applied in order, so undone last first): gzip and deflate, the
// result bounded by max. It returns nil when the body is not encoded, and
// an error that may be shown for an encoding it cannot read (br, zstd,
// compress), a corrupt body or a result over max.
func decodeBody(body []byte, header []string, max int64) ([]byte, error) {
	var codings []string
	for _, h := range header {
		for c := range strings.SplitSeq(h, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	if len(codings) == 0 || len(body) == 0 {
		return nil, nil // nothing to decode, and no room for an echo
	}
	if len(codings) > 2 {
		return nil, fmt.Errorf("it is encoded %d times over (Content-Encoding %.80q), which the gateway does not undo", len(codings), strings.Join(codings, ", "))
	}
	for i := len(codings) - 1; i >= 0; i-- {
		var r io.Reader
		var err error
		switch codings[i] {
		case "gzip", "x-gzip":
			r, err = gzip.NewReader(bytes.NewReader(body))
		case "deflate":
			// RFC 9110: zlib-wrapped; some servers send the raw stream.
			if r, err = zlib.NewReader(bytes.NewReader(body)); err != nil {
				r, err = flate.NewReader(bytes.NewReader(body)), nil
			}
		default:
			return nil, fmt.Errorf("it is encoded as %.40q, which the gateway cannot read to remove the secrets it may echo", codings[i])
		}
		if err != nil {
			return nil, errors.New("its compressed body is not valid")
		}
		out, err := io.ReadAll(io.LimitReader(r, max+1))
		if err != nil {
			return nil, errors.New("its compressed body is not valid")
		}
		if int64(len(out)) > max {
			return nil, fmt.Errorf("decompressed, it is larger than %d bytes", max)
		}
		body = out
	}
	return body, nil
}

// enter counts a request of user in flight, or reports false when the
// user already has MaxConcurrent.
func (g *Gateway) enter(user string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight[user] >= g.lim.MaxConcurrent {
		return false
	}
	g.inFlight[user]++
	return true
}

func (g *Gateway) leave(user string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight[user]--; g.inFlight[user] <= 0 {
		delete(g.inFlight, user)
	}
}

// failure turns a failed exchange into an error safe to show.
func (g *Gateway) failure(host string, err error, scrub *scrubber) error {
	var rr *redirectRefused
	var msg string
	switch {
	case errors.As(err, &rr):
		msg = fmt.Sprintf("Redirect to %s refused: %s is not approved for that host; nothing was sent there.", rr.host, rr.secret)
	case errors.Is(err, egress.ErrForbiddenAddress):
		msg = fmt.Sprintf("The request to %s was refused: the destination address is not on the public internet.", host)
	case errors.Is(err, egress.ErrScheme):
		msg = fmt.Sprintf("The request to %s was refused: a redirect left https.", host)
	case errors.Is(err, egress.ErrTooManyRedirects):
		msg = fmt.Sprintf("The request to %s was refused: more than %d redirects.", host, g.lim.MaxRedirects)
	case errors.Is(err, egress.ErrResponseTooLarge):
		msg = fmt.Sprintf("The response from %s is larger than %d bytes.", host, g.lim.MaxResponseBytes)
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		msg = fmt.Sprintf("The request to %s timed out after %s.", host, g.lim.Timeout)
	default:
		msg = fmt.Sprintf("The request to %s failed: no answer.", host)
	}
	return &capabilities.Error{Code: capabilities.CodeConflict, Message: scrub.string(msg), Err: errors.New(scrub.string(err.Error()))}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func (g *Gateway) audit(ctx context.Context, caller capabilities.Caller, result, secret, host, detail string) {
	if g.o.Audit == nil {
		return
	}
	_ = g.o.Audit.Record(ctx, audit.Event{
		Category: audit.CategoryOutbound, Action: "secret_use", Result: result,
		Reason:   fmt.Sprintf("secret=%s host=%s %s", secret, host, detail),
		UserHash: g.o.Audit.HashUser(caller.UserID),
	})
}

func (g *Gateway) auditAll(ctx context.Context, caller capabilities.Caller, us []used, result, host, detail string) {
	for _, u := range us {
		if strings.HasPrefix(u.key, "connection:") {
			g.auditConnection(ctx, caller, result, u.name, host, detail)
			continue
		}
		g.audit(ctx, caller, result, u.name, host, detail)
	}
}

// hasPlaceholder reports whether s holds the start of a placeholder.
func hasPlaceholder(s string) bool {
	return strings.Contains(s, "{{secret:") || strings.Contains(s, "{{connection:")
}

// connection opens the caller's connection called name for a request to
// host:port: only one of its provider's hosts may receive its token.
func (g *Gateway) connection(ctx context.Context, caller capabilities.Caller, owner storage.Owner, name, host, port string) (used, error) {
	if g.o.Connections == nil {
		return used{}, refuse("There is no connection named %q.", name)
	}
	c, err := g.o.Connections.Use(ctx, owner, name)
	switch {
	case errors.Is(err, integrations.ErrNotFound):
		return used{}, refuse("There is no connection named %q; connectionList shows yours.", name)
	case errors.Is(err, integrations.ErrExpired):
		g.auditConnection(ctx, caller, audit.ResultDenied, name, host, "expired")
		return used{}, refuse("Connection %q expired; its owner can connect it again on the account's Connections page.", name)
	case err != nil:
		return used{}, fmt.Errorf("outbound: %w", err)
	}
	if !secrets.HostAllowed(c.APIHosts, host, port) {
		g.auditConnection(ctx, caller, audit.ResultDenied, name, host, "host not approved")
		return used{}, refuse("Connection %q may only be used with its provider's hosts (%s), not %s; nothing was sent.", name, strings.Join(c.APIHosts, ", "), host)
	}
	return used{key: "connection:" + name, name: name, value: []byte("Bearer " + c.AccessToken), token: []byte(c.AccessToken), hosts: c.APIHosts}, nil
}

func (g *Gateway) auditConnection(ctx context.Context, caller capabilities.Caller, result, name, host, detail string) {
	if g.o.Audit == nil {
		return
	}
	_ = g.o.Audit.Record(ctx, audit.Event{
		Category: audit.CategoryOutbound, Action: "connection_use", Result: result,
		Reason:   fmt.Sprintf("connection=%s host=%s %s", name, host, detail),
		UserHash: g.o.Audit.HashUser(caller.UserID),
	})
}

// placeholders returns the secret names the request's headers and body
// use, sorted, and refuses a malformed placeholder.
func placeholders(req Request) ([]string, error) {
	seen := map[string]bool{}
	scan := func(where, s string) error {
		if strings.Count(s, "{{secret:")+strings.Count(s, "{{connection:") != len(placeholder.FindAllStringIndex(s, -1)) {
			return refuse("A placeholder in the %s is malformed; write {{secret:NAME}} with a secret's name or {{connection:NAME}} with a connection's.", where)
		}
		for _, m := range placeholder.FindAllStringSubmatch(s, -1) {
			seen[m[1]] = true
		}
		return nil
	}
	for name, v := range req.Headers {
		if strings.Contains(name, "{{") {
			return nil, refuse("Secret placeholders are not allowed in header names.")
		}
		if err := scan("header "+name, v); err != nil {
			return nil, err
		}
	}
	if err := scan("body", req.Body); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// filledLen is len(s) once every placeholder of us in it is filled in.
func filledLen(s string, us []used) int {
	n := len(s)
	for _, m := range placeholder.FindAllStringSubmatchIndex(s, -1) {
		key := s[m[2]:m[3]]
		for _, u := range us {
			if u.key == key {
				n += len(u.value) - (m[1] - m[0])
				break
			}
		}
	}
	return n
}

func unescape(s string) string {
	for range 3 {
		u, err := url.PathUnescape(s)
		if err != nil || u == s {
			break
		}
		s = u
	}
	return s
}

// scrubber replaces every form of each used secret's value with its
// placeholder, in one pass (a replacement is never scanned again, so a
// value that happens to occur inside a placeholder's text cannot corrupt
// it), preferring the longest form at each position.
type scrubber struct {
	r *strings.Replacer
}

func newScrubber(us []used) *scrubber {
	type form struct{ from, to string }
	var forms []form
	seen := map[string]bool{}
	for _, u := range us {
		cands := scrubForms(u.value)
		if len(u.token) > 0 {
			cands = append(cands, scrubForms(u.token)...)
		}
		to := "{{" + u.key + "}}"
		for _, c := range cands {
			if c == "" || seen[c] {
				continue
			}
			seen[c] = true
			forms = append(forms, form{from: c, to: to})
		}
	}
	if len(forms) == 0 {
		return &scrubber{}
	}
	// Longest first: at one position the Replacer takes the first pair
	// that matches, so a padded form beats its unpadded prefix.
	sort.SliceStable(forms, func(i, j int) bool { return len(forms[i].from) > len(forms[j].from) })
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f.from, f.to)
	}
	return &scrubber{r: strings.NewReplacer(pairs...)}
}

// scrubForms are v in its raw form and the encodings an echo commonly
// takes.
func scrubForms(v []byte) []string {
	js := jsonString(string(v), true)
	return []string{
		string(v),
		base64.StdEncoding.EncodeToString(v),
		base64.RawStdEncoding.EncodeToString(v),
		base64.URLEncoding.EncodeToString(v),
		base64.RawURLEncoding.EncodeToString(v),
		url.QueryEscape(string(v)),
		url.PathEscape(string(v)),
		lowerEscapes(url.QueryEscape(string(v))),
		lowerEscapes(url.PathEscape(string(v))),
		// JSON as servers write it: Go's (HTML characters escaped)
		// and without that, with "/" escaped (PHP's default), and
		// ASCII-only with \u escapes (Python's default).
		js,
		jsonString(string(v), false),
		strings.ReplaceAll(jsonString(string(v), false), "/", `\/`),
		asciiJSON(string(v)),
		hex.EncodeToString(v),
		strings.ToUpper(hex.EncodeToString(v)),
	}
}

// jsonString is s as the inside of a JSON string, with or without Go's
// escaping of <, > and &.
func jsonString(s string, escapeHTML bool) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	_ = enc.Encode(s)
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

// asciiJSON is s as the inside of a JSON string written ASCII-only: every
// other character as a lowercase \u escape (UTF-16 pairs above U+FFFF).
func asciiJSON(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r >= 0x7f && r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// lowerEscapes lowercases the hex digits of every %XX escape in s.
func lowerEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerHex(b[i+1]), lowerHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerHex(c byte) byte {
	if c >= 'A' && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// bounded scrubs b, giving up (ok false) once the result would pass max
// bytes: the replacer writes through capWriter, which stops it there.
func (s *scrubber) bounded(b []byte, max int64) (_ []byte, ok bool) {
	if s.r == nil {
		return b, int64(len(b)) <= max
	}
	w := &capWriter{left: max}
	if _, err := s.r.WriteString(w, string(b)); err != nil {
		return nil, false
	}
	return w.buf.Bytes(), true
}

var errScrubbedTooLarge = errors.New("outbound: scrubbed body too large")

type capWriter struct {
	buf  bytes.Buffer
	left int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > w.left {
		return 0, errScrubbedTooLarge
	}
	w.left -= int64(len(p))
	return w.buf.Write(p)
}

func (w *capWriter) WriteString(p string) (int, error) {
	if int64(len(p)) > w.left {
		return 0, errScrubbedTooLarge
	}
	w.left -= int64(len(p))
	return w.buf.WriteString(p)
}

func (s *scrubber) string(v string) string {
	if s.r == nil {
		return v
	}
	return s.r.Replace(v)
}
