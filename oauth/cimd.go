package oauth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/ory/fosite"
	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/internal/egress"
)

// Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document-00):
// a client whose client_id is an https URL with a path is described by the
// JSON document at that URL, which this server fetches (through package
// egress: public addresses only, https, every redirect re-checked), checks
// and caches as the client's row in oauth_clients.

// Limits of a client metadata document fetch.
const (
	MetadataFetchTimeout = 5 * time.Second
	MetadataMaxBytes     = 5 << 10
	// MetadataMinCache and MetadataMaxCache bound how long a fetched
	// document is used, whatever its Cache-Control says.
	MetadataMinCache = 5 * time.Minute
	MetadataMaxCache = 24 * time.Hour
	// metadataFailureCache is how long a failed fetch is remembered, so
	// that requests naming a broken or hostile URL do not each fetch it.
	metadataFailureCache  = 30 * time.Second
	maxFailuresRemembered = 1024
	maxMetadataRedirects  = 3
)

// MetadataError is why a client metadata document could not be used. Its
// Reason is a sentence safe to show the client and the person (it names no
// address, status of another server's internals or Go error).
type MetadataError struct {
	Reason string
	err    error // the cause, for the log
	// transient: the document was not even asked for (a rate limit);
	// the failure is not remembered for the URL.
	transient bool
}

func (e *MetadataError) Error() string {
	if e.err != nil {
		return "oauth: client metadata document: " + e.Reason + ": " + e.err.Error()
	}
	return "oauth: client metadata document: " + e.Reason
}

func (e *MetadataError) Unwrap() error { return e.err }

func metadataErr(reason string, cause error) error {
	return &MetadataError{Reason: reason, err: cause}
}

// clientDocument is a client ID metadata document: the RFC 7591 client
// metadata this server reads, plus the fields it must refuse.
type clientDocument struct {
	ClientID                    string          `json:"client_id"`
	ClientName                  string          `json:"client_name"`
	ClientURI                   string          `json:"client_uri"`
	LogoURI                     string          `json:"logo_uri"`
	RedirectURIs                []string        `json:"redirect_uris"`
	GrantTypes                  []string        `json:"grant_types"`
	ResponseTypes               []string        `json:"response_types"`
	TokenEndpointAuthMethod     string          `json:"token_endpoint_auth_method"`
	JWKSURI                     string          `json:"jwks_uri"`
	JWKS                        json.RawMessage `json:"jwks"`
	Scope                       string          `json:"scope"`
	SoftwareID                  string          `json:"software_id"`
	SoftwareVersion             string          `json:"software_version"`
	TokenEndpointAuthSigningAlg string          `json:"token_endpoint_auth_signing_alg"`
	ClientSecret                *string         `json:"client_secret"`
	ClientSecretExpiresAt       *json.Number    `json:"client_secret_expires_at"`
}

// IsClientMetadataURL reports whether id has the shape of a client ID
// metadata document URL: https, a host, a path other than "/", no
// fragment, no user info, no dot segments. Such an id is never looked up
// among registered clients: it is fetched.
func IsClientMetadataURL(id string) bool {
	_, err := parseMetadataURL(id)
	return err == nil
}

// metadataShaped reports whether id claims to be a metadata URL (it starts
// with https://), valid or not; ids from dynamic registration never do.
func metadataShaped(id string) bool {
	return len(id) > len("https://") && strings.EqualFold(id[:len("https://")], "https://")
}

func parseMetadataURL(id string) (*url.URL, error) {
	if len(id) > 2048 || !storable(id) {
		return nil, metadataErr("the client_id URL is too long or malformed", nil)
	}
	u, err := url.Parse(id)
	if err != nil {
		return nil, metadataErr("the client_id is not a valid URL", nil)
	}
	switch {
	case u.Scheme != "https":
		return nil, metadataErr("the client_id URL must use https", nil)
	case u.Host == "" || u.Hostname() == "":
		return nil, metadataErr("the client_id URL has no host", nil)
	case !asciiHost(u.Host):
		// A person reads the host on the consent page: a look-alike
		// Unicode name must arrive in its xn-- form.
		return nil, metadataErr("the client_id URL's host must be in ASCII (an internationalized name in its xn-- form)", nil)
	case u.User != nil:
		return nil, metadataErr("the client_id URL must not contain user info", nil)
	case u.Fragment != "" || strings.Contains(id, "#"):
		return nil, metadataErr("the client_id URL must not contain a fragment", nil)
	case u.Path == "" || u.Path == "/":
		return nil, metadataErr("the client_id URL must have a path", nil)
	case !canonicalHostPort(u):
		// Another spelling of a host (a trailing dot, a port with
		// leading zeros) reaches the same server but would match
		// neither a host block nor this server's own host.
		return nil, metadataErr("the client_id URL's host or port is not in its canonical form", nil)
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return nil, metadataErr("the client_id URL must not contain dot segments", nil)
		}
	}
	if u.String() != id {
		return nil, metadataErr("the client_id URL is not in its canonical form", nil)
	}
	return u, nil
}

// canonicalHostPort reports whether u's host has no trailing dot and its
// port, if any, is a decimal number from 1 to 65535 without leading zeros.
func canonicalHostPort(u *url.URL) bool {
	if strings.HasSuffix(u.Hostname(), ".") {
		return false
	}
	p := u.Port()
	if p == "" {
		return !strings.HasSuffix(u.Host, ":")
	}
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == p
}

func asciiHost(h string) bool {
	for i := 0; i < len(h); i++ {
		if h[i] < 0x21 || h[i] > 0x7e {
			return false
		}
	}
	return true
}

// metadataHost is the host a person sees for a metadata URL: lower case,
// without the default port.
func metadataHost(u *url.URL) string {
	h := strings.ToLower(u.Hostname())
	if p := u.Port(); p != "" && p != "443" {
		if strings.Contains(h, ":") {
			return "[" + h + "]:" + p
		}
		return h + ":" + p
	}
	return h
}

var errRedirectOtherHost = errors.New("oauth: client metadata document redirected to another host")

// bareHost is a metadataHost without its port (an IPv6 address without
// brackets), as NormalizeHost gives a host named without a port.
func bareHost(host string) string {
	if u, err := url.Parse("https://" + host + "/"); err == nil && u.Hostname() != "" {
		return strings.ToLower(u.Hostname())
	}
	return host
}

// metadataFetcher fetches and caches client metadata documents.
type metadataFetcher struct {
	client *http.Client

	mu       sync.Mutex
	inflight map[string]*fetchCall
	failed   map[string]failure
}

type fetchCall struct {
	done chan struct{}
	err  error
}

type failure struct {
	until time.Time
	err   error
}

func newMetadataFetcher(allowPrivate bool, tlsConfig *tls.Config) *metadataFetcher {
	return &metadataFetcher{
		client: egress.NewClient(egress.Options{
			AllowPrivate:     allowPrivate,
			TLSConfig:        tlsConfig,
			Timeout:          MetadataFetchTimeout,
			MaxRedirects:     maxMetadataRedirects,
			MaxResponseBytes: MetadataMaxBytes,
			// The consent page says "app from <the client_id's host>":
			// only that host may serve the document, so a redirect (an
			// open redirect on a well-known host, say) must stay on it.
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if metadataHost(req.URL) != metadataHost(via[0].URL) {
					return errRedirectOtherHost
				}
				return nil
			},
		}),
		inflight: map[string]*fetchCall{},
		failed:   map[string]failure{},
	}
}

// resolveClient makes sure a client whose id is a metadata URL has a fresh
// row: it refuses a blocked URL or host, and fetches the document when the
// cached one expired. Any other id is left to the store. Concurrent
// requests for one URL share a fetch, and a failure is remembered for a
// short while.
//
// A fetch is an outbound request any unauthenticated visitor can cause,
// like a registration: with Options.RegistrationLimiter set, each fetch
// (not a cache hit) counts against the requesting network's bucket
// ("oauth-cimd:" + network), with Options.RegistrationLimit.
func (s *Server) resolveClient(ctx context.Context, r *http.Request, id string) error {
	if s.metadata == nil || !metadataShaped(id) {
		return nil
	}
	u, err := parseMetadataURL(id)
	if err != nil {
		return err
	}
	host := metadataHost(u)
	if iss, err := url.Parse(s.issuer); err == nil && host == metadataHost(iss) {
		// The consent page would say "app from <this server>": content
		// people can publish here must never vouch for an app.
		return metadataErr("the client_id URL must not be on this server", nil)
	}
	if blocked, err := s.metadataBlocked(ctx, id, host); err != nil {
		return err
	} else if blocked {
		return fmt.Errorf("%w: %w", fosite.ErrNotFound, errClientBlocked)
	}
	now := s.opts.Now().UTC()
	var row clientRow
	err = s.store.db.Reader.NewSelect().Model(&row).Column("metadata_expires_at", "blocked_at").Where("id = ?", id).Scan(ctx)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("oauth: read client: %w: %w", errUnavailable, err)
	case row.BlockedAt != nil:
		return fmt.Errorf("%w: %w", fosite.ErrNotFound, errClientBlocked)
	case row.MetadataExpiresAt != nil && row.MetadataExpiresAt.After(now):
		return nil // fresh
	}

	f := s.metadata
	f.mu.Lock()
	if fl, ok := f.failed[id]; ok {
		if now.Before(fl.until) {
			f.mu.Unlock()
			return fl.err
		}
		delete(f.failed, id)
	}
	if c, ok := f.inflight[id]; ok {
		f.mu.Unlock()
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c := &fetchCall{done: make(chan struct{})}
	f.inflight[id] = c
	f.mu.Unlock()

	if s.opts.RegistrationLimiter != nil {
		d, err := s.opts.RegistrationLimiter.Allow(ctx, "oauth-cimd:"+clientNetwork(s.opts.ClientAddr(r)), s.opts.RegistrationLimit)
		switch {
		case err != nil:
			c.err = fmt.Errorf("oauth: client document rate limit: %w: %w", errUnavailable, err)
		case !d.Allowed:
			c.err = &MetadataError{Reason: "too many new client metadata documents were requested from your network; try again later", transient: true}
		}
		if c.err != nil {
			f.mu.Lock()
			delete(f.inflight, id)
			f.mu.Unlock()
			close(c.done)
			return c.err
		}
	}

	// The fetch must not end with the request that started it: others
	// wait on it.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MetadataFetchTimeout)
	c.err = s.fetchClientDocument(fctx, u, host)
	cancel()

	f.mu.Lock()
	delete(f.inflight, id)
	var me *MetadataError
	if errors.As(c.err, &me) && !me.transient {
		if len(f.failed) >= maxFailuresRemembered {
			clear(f.failed)
		}
		f.failed[id] = failure{until: s.opts.Now().UTC().Add(metadataFailureCache), err: c.err}
	}
	f.mu.Unlock()
	close(c.done)
	return c.err
}

// fetchClientDocument fetches, checks and stores the document at u.
func (s *Server) fetchClientDocument(ctx context.Context, u *url.URL, host string) error {
	id := u.String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	if err != nil {
		return metadataErr("the client_id is not a valid URL", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.metadata.client.Do(req)
	if err != nil {
		var dnsErr *net.DNSError
		switch {
		case errors.Is(err, egress.ErrForbiddenAddress), errors.As(err, &dnsErr):
			// A name that does not resolve reads like one that resolves
			// to a private address: otherwise the answer would tell
			// anyone which internal names the server's resolver knows.
			return metadataErr("the client_id URL does not lead to a public address", err)
		case errors.Is(err, egress.ErrScheme):
			return metadataErr("the client_id URL redirected to a URL that is not https", err)
		case errors.Is(err, errRedirectOtherHost):
			return metadataErr("the client_id URL redirected to another host (a document may only be served by the host in its URL)", err)
		case errors.Is(err, egress.ErrTooManyRedirects):
			return metadataErr("the client_id URL redirected too many times", err)
		case errors.Is(err, egress.ErrResponseTooLarge):
			return metadataErr(fmt.Sprintf("the client metadata document is larger than %d bytes", MetadataMaxBytes), err)
		case errors.Is(err, context.DeadlineExceeded):
			return metadataErr("the client metadata document did not arrive in time", err)
		}
		return metadataErr("the client metadata document could not be fetched", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return metadataErr(fmt.Sprintf("fetching the client metadata document answered HTTP %d", resp.StatusCode), nil)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return metadataErr("the client metadata document is not served as JSON", nil)
		}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MetadataMaxBytes+1))
	if err != nil {
		if errors.Is(err, egress.ErrResponseTooLarge) {
			return metadataErr(fmt.Sprintf("the client metadata document is larger than %d bytes", MetadataMaxBytes), err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return metadataErr("the client metadata document did not arrive in time", err)
		}
		return metadataErr("the client metadata document could not be read", err)
	}
	if len(body) > MetadataMaxBytes {
		return metadataErr(fmt.Sprintf("the client metadata document is larger than %d bytes", MetadataMaxBytes), nil)
	}
	md, err := s.checkClientDocument(id, body)
	if err != nil {
		return err
	}
	now := s.opts.Now().UTC()
	expires := now.Add(cacheLifetime(resp.Header))
	return s.storeClientDocument(ctx, id, host, md, expires, now)
}

// checkClientDocument parses and validates a document fetched from id.
func (s *Server) checkClientDocument(id string, body []byte) (*ClientMetadata, error) {
	var doc clientDocument
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, metadataErr("the client metadata document is not a JSON object of client metadata", err)
	}
	switch {
	case doc.ClientID != id:
		return nil, metadataErr("the document's client_id is not the URL it was fetched from", nil)
	case doc.ClientSecret != nil || doc.ClientSecretExpiresAt != nil:
		return nil, metadataErr("a client metadata document must not carry a client secret", nil)
	case len(doc.RedirectURIs) == 0:
		return nil, metadataErr("the document lists no redirect_uris", nil)
	}
	switch doc.TokenEndpointAuthMethod {
	case "", "none":
		doc.TokenEndpointAuthMethod = "none"
		if doc.JWKSURI != "" || len(doc.JWKS) > 0 {
			return nil, metadataErr("a client with token_endpoint_auth_method none must not publish keys", nil)
		}
	case "private_key_jwt":
		if len(doc.JWKS) > 0 {
			return nil, metadataErr("a private_key_jwt client must publish its keys at a jwks_uri, not inline", nil)
		}
		ju, err := url.Parse(doc.JWKSURI)
		if doc.JWKSURI == "" || err != nil || egress.CheckURL(ju) != nil || ju.Fragment != "" || len(doc.JWKSURI) > 2048 {
			return nil, metadataErr("a private_key_jwt client needs an https jwks_uri", nil)
		}
		switch doc.TokenEndpointAuthSigningAlg {
		case "", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512":
		default:
			return nil, metadataErr(fmt.Sprintf("token_endpoint_auth_signing_alg %q is not supported: use an RSA or ECDSA algorithm", doc.TokenEndpointAuthSigningAlg), nil)
		}
	default:
		return nil, metadataErr(fmt.Sprintf("token_endpoint_auth_method %q is not allowed: use none or private_key_jwt", doc.TokenEndpointAuthMethod), nil)
	}
	md := &ClientMetadata{
		RedirectURIs:            doc.RedirectURIs,
		TokenEndpointAuthMethod: doc.TokenEndpointAuthMethod,
		GrantTypes:              doc.GrantTypes,
		ResponseTypes:           doc.ResponseTypes,
		ClientName:              doc.ClientName,
		ClientURI:               doc.ClientURI,
		LogoURI:                 doc.LogoURI,
		SoftwareID:              doc.SoftwareID,
		SoftwareVersion:         doc.SoftwareVersion,
	}
	// The document's scope only describes what the client may ask for;
	// the request's scope is checked against this server's scopes.
	md.Scope = ""
	// Registration knows no private_key_jwt: check the rest as for a
	// public client, then put the method and its keys back.
	md.TokenEndpointAuthMethod = "none"
	if err := s.normalizeMetadata(md); err != nil {
		var rerr *registrationError
		if errors.As(err, &rerr) {
			return nil, metadataErr(strings.TrimSuffix(rerr.description, "."), nil)
		}
		return nil, metadataErr("the client metadata document is invalid", err)
	}
	md.TokenEndpointAuthMethod = doc.TokenEndpointAuthMethod
	if md.TokenEndpointAuthMethod == "private_key_jwt" {
		md.JWKSURI, md.TokenEndpointAuthSigningAlg = doc.JWKSURI, doc.TokenEndpointAuthSigningAlg
	}
	if md.ClientName == "" {
		md.ClientName = id
	}
	return md, nil
}

// cacheLifetime is how long a document may be used: its Cache-Control
// max-age (no-store and no-cache count as 0), bounded to
// [MetadataMinCache, MetadataMaxCache].
func cacheLifetime(h http.Header) time.Duration {
	ttl := time.Duration(0)
	for _, directive := range strings.Split(h.Get("Cache-Control"), ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(directive), "=")
		switch strings.ToLower(name) {
		case "no-store", "no-cache":
			return MetadataMinCache
		case "max-age":
			if n, err := strconv.ParseInt(strings.Trim(value, `"`), 10, 64); err == nil && n > 0 {
				if n > int64(MetadataMaxCache/time.Second) {
					n = int64(MetadataMaxCache / time.Second)
				}
				ttl = time.Duration(n) * time.Second
			}
		}
	}
	return min(max(ttl, MetadataMinCache), MetadataMaxCache)
}

// storeClientDocument writes the client row of a checked document,
// keeping its creation time and block.
func (s *Server) storeClientDocument(ctx context.Context, id, host string, md *ClientMetadata, expires, now time.Time) error {
	canon, err := json.Marshal(md)
	if err != nil {
		return fmt.Errorf("oauth: client document: %w", err)
	}
	sum := sha256.Sum256(canon)
	uris, _ := json.Marshal(md.RedirectURIs)
	grants, _ := json.Marshal(md.GrantTypes)
	responses, _ := json.Marshal(md.ResponseTypes)
	row := &clientRow{
		ID:                      id,
		Name:                    md.ClientName,
		RedirectURIs:            string(uris),
		GrantTypes:              string(grants),
		ResponseTypes:           string(responses),
		Scope:                   md.Scope,
		TokenEndpointAuthMethod: md.TokenEndpointAuthMethod,
		Metadata:                string(canon),
		// Not the registration hash: a document is never returned to a
		// registrant as an existing client.
		MetadataHash:      "cimd:" + hex.EncodeToString(sum[:]),
		MetadataHost:      &host,
		MetadataExpiresAt: &expires,
		CreatedAt:         now,
		LastUsedAt:        now,
	}
	_, err = s.store.db.DB.NewInsert().Model(row).
		On("CONFLICT (id) DO UPDATE").
		Set("name = EXCLUDED.name").
		Set("redirect_uris = EXCLUDED.redirect_uris").
		Set("grant_types = EXCLUDED.grant_types").
		Set("response_types = EXCLUDED.response_types").
		Set("scope = EXCLUDED.scope").
		Set("token_endpoint_auth_method = EXCLUDED.token_endpoint_auth_method").
		Set("metadata = EXCLUDED.metadata").
		Set("metadata_hash = EXCLUDED.metadata_hash").
		Set("metadata_host = EXCLUDED.metadata_host").
		Set("metadata_expires_at = EXCLUDED.metadata_expires_at").
		Set("last_used_at = EXCLUDED.last_used_at").
		Returning("NULL").Exec(ctx)
	if err != nil {
		return fmt.Errorf("oauth: store client document: %w: %w", errUnavailable, err)
	}
	return nil
}

// Kinds of oauth_client_blocks rows.
const (
	blockURL  = "url"
	blockHost = "host"
)

type clientBlockRow struct {
	bun.BaseModel `bun:"table:oauth_client_blocks,alias:b"`

	Kind      string    `bun:"kind,pk"`
	Value     string    `bun:"value,pk"`
	CreatedAt time.Time `bun:"created_at"`
}

// metadataBlocked reports whether an admin blocked the metadata URL id or
// its host: the host as shown (with its port) or the bare host, which
// covers every port of it (whoever runs a host can serve on any port).
func (s *Server) metadataBlocked(ctx context.Context, id, host string) (bool, error) {
	ok, err := s.store.db.Reader.NewSelect().TableExpr("oauth_client_blocks AS b").
		Where("(b.kind = ? AND b.value = ?) OR (b.kind = ? AND b.value IN (?, ?))", blockURL, id, blockHost, host, bareHost(host)).
		Exists(ctx)
	if err != nil {
		return false, fmt.Errorf("oauth: read client blocks: %w: %w", errUnavailable, err)
	}
	return ok, nil
}

// clientIDOf returns the client_id a token or revocation request names:
// as fosite does, its Basic credentials first, then its form. (Reading the
// form first would let a request name one client in the form and have
// fosite authenticate another, whose document was never resolved.)
func clientIDOf(r *http.Request) string {
	if id, _, ok := r.BasicAuth(); ok {
		if un, err := url.QueryUnescape(id); err == nil {
			return un
		}
		return id
	}
	if id := r.PostForm.Get("client_id"); id != "" {
		return id
	}
	if a := r.PostForm.Get("client_assertion"); a != "" {
		// Only to know which document to load: the assertion itself is
		// verified by fosite against that client's keys.
		return assertionSubject(a)
	}
	return ""
}

// resolveError is the OAuth error for a failed resolveClient: a client
// whose document could not be used, or that an admin blocked, is an
// invalid client; a store failure stays one (503).
func resolveError(err error) error {
	var me *MetadataError
	switch {
	case errors.Is(err, errUnavailable):
		return err
	case errors.As(err, &me):
		return fosite.ErrInvalidClient.WithHint("The client metadata document could not be used: " + me.Reason + ".").WithWrap(err)
	case errors.Is(err, errClientBlocked):
		return fosite.ErrInvalidClient.WithWrap(err)
	}
	return fosite.ErrServerError.WithWrap(err)
}

// NormalizeHost checks a host an admin names for a block: a DNS name or
// IP address, with a port when it is not 443, as it appears in metadata
// URLs (lower case).
func NormalizeHost(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", errors.New("host is required")
	}
	u, err := url.Parse("https://" + raw + "/")
	if err != nil || u.Host != raw || u.Hostname() == "" || u.User != nil || strings.ContainsAny(raw, "/?#@ ") {
		return "", fmt.Errorf("host %q is not a host name: give it as in the client's URL, such as app.example", raw)
	}
	return metadataHost(u), nil
}

// SetHostBlocked blocks or unblocks every client whose metadata document
// host publishes. It reports whether anything changed.
func (s *Server) SetHostBlocked(ctx context.Context, host string, blocked bool) (bool, error) {
	defer s.revoked(ctx, 0, "")
	return s.setMetadataBlock(ctx, blockHost, host, host, blocked)
}

// setMetadataBlock adds or removes the block (kind, value) and sets the
// blocked flag of the cached client rows it covers, which the bearer check
// reads: a URL block covers its client, a host block every client of the
// host. Unblocking leaves a row blocked while another block covers it.
func (s *Server) setMetadataBlock(ctx context.Context, kind, value, host string, blocked bool) (bool, error) {
	now := s.opts.Now().UTC()
	changed := false
	err := s.store.db.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var n int64
		if blocked {
			res, err := tx.NewInsert().Model(&clientBlockRow{Kind: kind, Value: value, CreatedAt: now}).
				On("CONFLICT DO NOTHING").Returning("NULL").Exec(ctx)
			if err != nil {
				return err
			}
			n, _ = res.RowsAffected()
		} else {
			res, err := tx.NewDelete().Model((*clientBlockRow)(nil)).Where("kind = ? AND value = ?", kind, value).Exec(ctx)
			if err != nil {
				return err
			}
			n, _ = res.RowsAffected()
		}
		changed = n > 0
		q := tx.NewUpdate().Model((*clientRow)(nil))
		if kind == blockURL {
			q = q.Where("id = ?", value)
		} else {
			// The host with its port, or any port of a bare host
			// ("h:" and, for IPv6, "[h]:" prefixes).
			q = q.Where("metadata_host = ? OR substr(metadata_host, 1, ?) = ? OR substr(metadata_host, 1, ?) = ?",
				value, len(value)+1, value+":", len(value)+3, "["+value+"]:")
		}
		if blocked {
			q = q.Set("blocked_at = ?", now).Where("blocked_at IS NULL")
		} else {
			q = q.Set("blocked_at = NULL").Where("blocked_at IS NOT NULL").
				Where("NOT EXISTS (SELECT 1 FROM oauth_client_blocks AS b WHERE (b.kind = ? AND b.value = c.id) OR (b.kind = ? AND ("+
					"b.value = c.metadata_host OR substr(c.metadata_host, 1, length(b.value) + 1) = b.value || ':' OR "+
					"substr(c.metadata_host, 1, length(b.value) + 3) = '[' || b.value || ']:')))", blockURL, blockHost)
		}
		res, err := q.Exec(ctx)
		if err != nil {
			return err
		}
		if m, _ := res.RowsAffected(); m > 0 {
			changed = true
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("oauth: block client: %w", err)
	}
	return changed, nil
}

// assertionSubject reads the sub claim of a JWT without verifying it.
func assertionSubject(jwt string) string {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 || len(parts[1]) > 8<<10 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	return claims.Sub
}

// jwksFetcher is fosite's JWKS fetcher for private_key_jwt clients, on
// the same egress client as documents (public https addresses only, 5 s,
// bounded size), without retries.
func jwksFetcher(client *http.Client) fosite.JWKSFetcherStrategy {
	rc := retryablehttp.NewClient()
	rc.HTTPClient = client
	rc.RetryMax = 0
	rc.Logger = nil
	return fosite.NewDefaultJWKSFetcherStrategy(fosite.JWKSFetcherWithHTTPClient(rc))
}
