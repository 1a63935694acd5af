package oauth

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/internal/ratelimit"
	"github.com/enclave-mcp/enclave/storage"
)

// Default lifetimes and windows. Each applies when its Options field is zero.
const (
	DefaultAccessTokenLifetime  = time.Hour
	DefaultRefreshTokenLifetime = 30 * 24 * time.Hour
	DefaultRefreshGracePeriod   = 30 * time.Second
	DefaultClientIdleTTL        = 90 * 24 * time.Hour
	DefaultReregistrationWindow = 10 * time.Minute
	// AuthorizationCodeLifetime is fixed: codes are single-use and short.
	AuthorizationCodeLifetime = 10 * time.Minute
)

// ScopeMCP is the scope every client may ask for and every grant carries by
// default.
const ScopeMCP = "mcp"

// ScopeAdmin is the scope of the admin capabilities (capabilities.ScopeAdmin):
// a token without it lists and runs only what a user's would, even for an
// admin. Every client may ask for it, whatever scope it registered, but it
// is granted only to an account holding the admin role, and only when the
// person ticks it on the consent page (see ScopedConsent). For any other
// account it is dropped from the request silently: the grant carries the
// rest, and the token response's scope says so.
const ScopeAdmin = capabilities.ScopeAdmin

// ResourcePath is the path of the protected MCP resource below BaseURL.
const ResourcePath = "/mcp"

// Options configures a Server. Zero values are the documented defaults.
type Options struct {
	// Store holds the SQL database (required). Its Keeper seals the token
	// signing secret when HMACSecret is empty.
	Store *storage.Store

	// BaseURL is the public origin of this server, such as
	// https://enclave.example (required). The issuer is BaseURL without a
	// trailing slash; the MCP resource, and so every token's audience, is
	// BaseURL + "/mcp".
	BaseURL string

	// LoginConsent signs users in and asks for their consent on the
	// authorization endpoint (required to serve /oauth/authorize).
	LoginConsent LoginConsent

	// Scopes are extra scopes embedders declare, besides "mcp" and "admin".
	Scopes []string

	// HMACSecret signs tokens (at least 32 bytes). Empty: a random secret is
	// generated once, sealed by Store.Keeper and kept in the database, so
	// every replica shares it.
	HMACSecret []byte

	// Token lifetimes. Defaults: access 1 h, refresh 30 days.
	AccessTokenLifetime  time.Duration
	RefreshTokenLifetime time.Duration

	// IDTokenLifetime is how long an OpenID Connect ID token is valid
	// (default 1 h); a rotated signing key stays published that long
	// after it stopped signing.
	IDTokenLifetime time.Duration

	// RefreshGracePeriod is how long after a refresh token was rotated a
	// duplicate exchange of it returns the same new pair instead of revoking
	// the grant. Default 30 s; negative disables the window.
	RefreshGracePeriod time.Duration

	// ClientIdleTTL is how long a registered client may go unused before
	// ReapClients removes it. Default 90 days.
	ClientIdleTTL time.Duration

	// ReregistrationWindow is how long registering identical public-client
	// metadata again returns the existing client. Default 10 minutes;
	// negative disables it.
	ReregistrationWindow time.Duration

	// PrivateURISchemes lists the private-use redirect URI schemes accepted
	// at registration (for example "cursor"), besides https and loopback
	// http.
	PrivateURISchemes []string

	// DisableClientMetadataDocuments turns client ID metadata documents
	// off: a client_id that is an https URL is then an unknown client, and
	// the metadata no longer advertises them. Default: on.
	DisableClientMetadataDocuments bool

	// MetadataAllowPrivate lets client metadata documents be fetched from
	// loopback and private addresses (tests; a closed network). Never set
	// it on a server the internet can reach: anyone could make it fetch
	// from its own network.
	MetadataAllowPrivate bool

	// MetadataTLSConfig replaces the TLS configuration of document fetches
	// (tests trust an httptest server's certificate with it).
	MetadataTLSConfig *tls.Config

	// Enterprise configures enterprise-managed authorization: the
	// identity providers whose ID-JAGs the token endpoint redeems with the
	// JWT bearer grant. Default: none (the grant is off).
	Enterprise EnterpriseOptions

	// AllowUnverifiedEmail lets accounts without a verified email use OAuth.
	// By default they get no tokens and their bearers are refused.
	AllowUnverifiedEmail bool

	// RegistrationLimiter, when set, counts each POST /oauth/register
	// against its client network's bucket (the IPv4 address, or the IPv6
	// /64) in SQL, so replicas share it; a full bucket is answered 429 with
	// Retry-After in the OAuth error format. Nil: no limit.
	RegistrationLimiter *ratelimit.Limiter

	// RegistrationLimit bounds registrations per client network when
	// RegistrationLimiter is set. Zero fields take ratelimit's defaults.
	RegistrationLimit ratelimit.Limit

	// ClientAddr returns a request's client address. Pass the function the
	// web shell uses (web.ClientIP.Addr under the same trusted proxies) so
	// both transports agree on who the client is. Default: the TCP peer.
	ClientAddr func(*http.Request) netip.Addr

	// Logger receives server-side errors. Default slog.Default().
	Logger *slog.Logger

	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() (Options, error) {
	if o.Store == nil {
		return o, errors.New("oauth: Options.Store is required")
	}
	base, err := url.Parse(strings.TrimRight(o.BaseURL, "/"))
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" || base.RawQuery != "" || base.Fragment != "" {
		return o, fmt.Errorf("oauth: Options.BaseURL %q: want an absolute http(s) URL without query or fragment", o.BaseURL)
	}
	o.BaseURL = base.String()
	if o.HMACSecret != nil && len(o.HMACSecret) < 32 {
		return o, errors.New("oauth: Options.HMACSecret must be at least 32 bytes")
	}
	if o.AccessTokenLifetime == 0 {
		o.AccessTokenLifetime = DefaultAccessTokenLifetime
	}
	if o.RefreshTokenLifetime == 0 {
		o.RefreshTokenLifetime = DefaultRefreshTokenLifetime
	}
	if o.IDTokenLifetime == 0 {
		o.IDTokenLifetime = DefaultIDTokenLifetime
	}
	if o.AccessTokenLifetime < 0 || o.RefreshTokenLifetime < 0 || o.IDTokenLifetime < 0 {
		return o, errors.New("oauth: token lifetimes must be positive")
	}
	if o.RefreshGracePeriod == 0 {
		o.RefreshGracePeriod = DefaultRefreshGracePeriod
	}
	if o.ClientIdleTTL <= 0 {
		o.ClientIdleTTL = DefaultClientIdleTTL
	}
	if o.ReregistrationWindow == 0 {
		o.ReregistrationWindow = DefaultReregistrationWindow
	}
	scopes := []string{ScopeMCP, ScopeAdmin}
	for _, s := range o.Scopes {
		if !validScopeToken(s) {
			return o, fmt.Errorf("oauth: scope %q: want a non-empty token without spaces or quotes", s)
		}
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	o.Scopes = scopes
	schemes := make([]string, 0, len(o.PrivateURISchemes))
	for _, raw := range o.PrivateURISchemes {
		s := strings.ToLower(strings.TrimSuffix(raw, ":"))
		if s == "" || s == "http" || s == "https" || s == "javascript" || s == "data" || s == "file" || s == "vbscript" {
			return o, fmt.Errorf("oauth: private URI scheme %q is not allowed", raw)
		}
		schemes = append(schemes, s)
	}
	o.PrivateURISchemes = schemes
	if err := o.Enterprise.check(); err != nil {
		return o, err
	}
	if o.ClientAddr == nil {
		o.ClientAddr = peerAddr
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// validScopeToken reports whether s is a scope-token of RFC 6749 §3.3.
func validScopeToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e || r == '"' || r == '\\' {
			return false
		}
	}
	return true
}
