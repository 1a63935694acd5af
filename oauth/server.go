package oauth

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/oauth2"
	"github.com/ory/fosite/handler/pkce"
	"github.com/ory/fosite/token/hmac"
)

// Endpoint paths, relative to BaseURL.
const (
	PathASMetadata       = "/.well-known/oauth-authorization-server"
	PathResourceMetadata = "/.well-known/oauth-protected-resource"
	PathAuthorize        = "/oauth/authorize"
	PathToken            = "/oauth/token"
	PathRevoke           = "/oauth/revoke"
	PathRegister         = "/oauth/register"
)

// Server is the authorization server and the resource server's token check.
// It is safe for concurrent use.
type Server struct {
	opts     Options
	store    *store
	provider *fosite.Fosite
	strategy *oauth2.HMACSHAStrategy
	issuer   string
	resource string
	metadata *metadataFetcher // nil: client metadata documents are off
	idps     *trustedIdPs     // nil: enterprise-managed authorization is off
	idKeys   *signingKeys     // ID token keys (oidc_keys.go)

	stmtMu sync.Mutex
	stmt   *sql.Stmt // the bearer check, prepared on first use
	// stmtRuns counts executions of stmt: it runs outside bun, so tests
	// that count queries through bun's hooks add it (see export_test.go).
	stmtRuns atomic.Int64

	hookMu      sync.Mutex
	revokeHooks []RevokeHook
}

// New returns a Server on opts.Store, whose schema must be migrated.
func New(ctx context.Context, opts Options) (*Server, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	secret := opts.HMACSecret
	if secret == nil {
		if secret, err = loadSecret(ctx, opts.Store, opts.Now()); err != nil {
			return nil, err
		}
	}
	s := &Server{
		opts:     opts,
		issuer:   opts.BaseURL,
		resource: opts.BaseURL + ResourcePath,
	}
	s.store = &store{db: opts.Store, now: opts.Now, clientTT: opts.ClientIdleTTL, audience: []string{s.resource}, noDocuments: opts.DisableClientMetadataDocuments}
	s.idps = newTrustedIdPs(opts.Enterprise, opts.Now)
	if !opts.DisableClientMetadataDocuments {
		s.metadata = newMetadataFetcher(opts.MetadataAllowPrivate, opts.MetadataTLSConfig)
	}

	cfg := &fosite.Config{
		AccessTokenLifespan:            opts.AccessTokenLifetime,
		RefreshTokenLifespan:           opts.RefreshTokenLifetime,
		AuthorizeCodeLifespan:          AuthorizationCodeLifetime,
		ScopeStrategy:                  fosite.ExactScopeStrategy,
		AudienceMatchingStrategy:       fosite.ExactAudienceMatchingStrategy,
		EnforcePKCE:                    true,
		EnforcePKCEForPublicClients:    true,
		EnablePKCEPlainChallengeMethod: false,
		MinParameterEntropy:            fosite.MinParameterEntropy,
		TokenURL:                       s.issuer + PathToken,
		RedirectSecureChecker:          func(_ context.Context, u *url.URL) bool { return s.redirectURIAllowed(u) == nil },
		ClientSecretsHasher:            secretHasher{},
		GlobalSecret:                   secret,
		OmitRedirectScopeParam:         true,
		SanitationWhiteList:            []string{"redirect_uri", "resource"},
		RefreshTokenScopes:             []string{}, // every grant gets a refresh token
	}
	if s.metadata != nil {
		cfg.JWKSFetcherStrategy = jwksFetcher(s.metadata.client)
	}
	// fosite hands some client assertion failures back as bare JWT
	// validation errors (an expired assertion): they are the client's
	// fault, not the server's.
	cfg.ClientAuthenticationStrategy = func(ctx context.Context, r *http.Request, form url.Values) (fosite.Client, error) {
		c, err := s.provider.DefaultClientAuthenticationStrategy(ctx, r, form)
		var rfc *fosite.RFC6749Error
		if errors.Is(err, fosite.ErrJTIKnown) {
			return nil, fosite.ErrInvalidClient.WithHint("The client_assertion's jti was already used.").WithWrap(err)
		}
		if err != nil && !errors.As(err, &rfc) && !errors.Is(err, errUnavailable) {
			return nil, fosite.ErrInvalidClient.WithHint("The client_assertion is expired, not yet valid or malformed.").WithWrap(err)
		}
		return c, err
	}
	s.strategy = oauth2.NewHMACSHAStrategy(&hmac.HMACStrategy{Config: cfg}, cfg)
	explicit := &oauth2.AuthorizeExplicitGrantHandler{
		AccessTokenStrategy:    s.strategy,
		RefreshTokenStrategy:   s.strategy,
		AuthorizeCodeStrategy:  s.strategy,
		CoreStorage:            s.store,
		TokenRevocationStorage: s.store,
		Config:                 cfg,
	}
	code := &codeHandler{AuthorizeExplicitGrantHandler: explicit, srv: s}
	challenge := &pkce.Handler{AuthorizeCodeStrategy: s.strategy, Storage: s.store, Config: cfg}
	refresh := &refreshHandler{srv: s}
	revoke := &oauth2.TokenRevocationHandler{
		TokenRevocationStorage: revocationStore{s.store},
		AccessTokenStrategy:    s.strategy,
		RefreshTokenStrategy:   s.strategy,
	}
	oidc := s.openIDHandler(cfg) // after the code handler: it reads the code's row
	cfg.AuthorizeEndpointHandlers = fosite.AuthorizeEndpointHandlers{code, challenge, oidc}
	cfg.TokenEndpointHandlers = fosite.TokenEndpointHandlers{code, refresh, challenge, oidc}
	if s.idps != nil {
		cfg.TokenEndpointHandlers = append(cfg.TokenEndpointHandlers, &idjagHandler{srv: s, helper: &oauth2.HandleHelper{AccessTokenStrategy: s.strategy, AccessTokenStorage: s.store, Config: cfg}})
	}
	cfg.RevocationHandlers = fosite.RevocationHandlers{revoke}
	s.provider = fosite.NewOAuth2Provider(s.store, cfg)
	return s, nil
}

// Issuer is the authorization server's issuer identifier (BaseURL).
func (s *Server) Issuer() string { return s.issuer }

// Resource is the protected MCP resource (BaseURL + "/mcp"), the audience
// of every token.
func (s *Server) Resource() string { return s.resource }

// Register adds the OAuth endpoints and metadata documents to mux:
// the two well-known metadata paths (and the MCP-specific protected
// resource path), /oauth/authorize, /oauth/token, /oauth/revoke and
// /oauth/register, and OpenID Connect's discovery document, JWKS and
// userinfo (oidc.go).
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET "+PathASMetadata, s.serveASMetadata)
	mux.HandleFunc("GET "+PathResourceMetadata, s.serveResourceMetadata)
	mux.HandleFunc("GET "+PathResourceMetadata+ResourcePath, s.serveResourceMetadata)
	mux.HandleFunc("GET "+PathAuthorize, s.serveAuthorize)
	mux.HandleFunc("POST "+PathAuthorize, s.serveAuthorize)
	mux.HandleFunc("POST "+PathToken, s.serveToken)
	mux.HandleFunc("POST "+PathRevoke, s.serveRevoke)
	mux.HandleFunc("POST "+PathRegister, s.serveRegister)
	s.registerOpenID(mux)
}

// Handler returns a handler serving only the OAuth endpoints (404 for
// anything else).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.Register(mux)
	return mux
}

// normalizeResource maps a resource indicator to this server's MCP
// resource, accepting a trailing slash. ok is false for any other value.
func (s *Server) normalizeResource(raw string) (string, bool) {
	if raw == s.resource || raw == s.resource+"/" {
		return s.resource, true
	}
	return "", false
}

// checkResources validates the resource parameters of a request (RFC 8707):
// every one must name the MCP resource.
func (s *Server) checkResources(form url.Values) error {
	for _, r := range form["resource"] {
		if _, ok := s.normalizeResource(r); !ok {
			return errInvalidTarget
		}
	}
	return nil
}

// errInvalidTarget is RFC 8707's error for a resource this server does not
// serve.
var errInvalidTarget = &fosite.RFC6749Error{
	ErrorField:       "invalid_target",
	DescriptionField: "The requested resource is not served by this authorization server.",
	CodeField:        http.StatusBadRequest,
}

// oauthError is an RFC 6749 error body.
type oauthError struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

// writeJSON writes v with no-store caching.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// errUnavailable marks a store failure (as opposed to a missing record)
// that fosite would otherwise report as the client's fault.
var errUnavailable = errors.New("oauth: store unavailable")

// writeError writes err as an RFC 6749 JSON error. Only the error code and
// its public description leave; hints and debug text stay here.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errUnavailable) {
		// The store failed (the database is down): whatever error fosite
		// wrapped it in, the client's registration and grant are fine.
		s.opts.Logger.WarnContext(r.Context(), "oauth: store unavailable", "path", r.URL.Path, "err", describe(err))
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, oauthError{Error: "server_error", Description: "The server is temporarily unavailable; retry shortly."})
		return
	}
	rfc := fosite.ErrorToRFC6749Error(err)
	if rfc.CodeField >= 500 {
		s.opts.Logger.ErrorContext(r.Context(), "oauth: request failed", "path", r.URL.Path, "err", describe(err))
	}
	if rfc.ErrorField == fosite.ErrInvalidClient.ErrorField {
		w.Header().Set("WWW-Authenticate", `Basic realm="oauth"`)
	}
	writeJSON(w, rfc.CodeField, oauthError{Error: rfc.ErrorField, Description: publicDescription(rfc)})
}

// publicDescription is the description of rfc with its hint, which fosite
// writes for clients, but never its debug text.
func publicDescription(rfc *fosite.RFC6749Error) string {
	if rfc.CodeField >= 500 {
		return "The server could not complete the request."
	}
	d := rfc.DescriptionField
	if rfc.HintField != "" {
		d = strings.TrimSpace(d + " " + rfc.HintField)
	}
	return d
}

// describe renders an error with fosite's debug text for the log.
func describe(err error) string {
	var rfc *fosite.RFC6749Error
	if errors.As(err, &rfc) && rfc.DebugField != "" {
		return err.Error() + ": " + rfc.DebugField
	}
	return err.Error()
}
