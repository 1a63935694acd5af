package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/openid"
	"github.com/ory/fosite/token/jwt"
)

// OpenID Connect: with the openid scope, the code exchange also returns an
// ID token (fosite's explicit flow handler), signed RS256 with the key ring
// of oidc_keys.go; the discovery document, the JWKS and the userinfo
// endpoint let other applications offer "Sign in with <this server>".
const (
	PathOpenIDConfiguration = "/.well-known/openid-configuration"
	PathJWKS                = "/oauth/jwks"
	PathUserinfo            = "/oauth/userinfo"

	// ScopeOpenID asks for an ID token; ScopeEmail adds the account's
	// email and whether it is verified to the userinfo answer. Every
	// client may ask for both.
	ScopeOpenID = "openid"
	ScopeEmail  = "email"

	// DefaultIDTokenLifetime applies when Options.IDTokenLifetime is zero.
	DefaultIDTokenLifetime = time.Hour
)

// openIDScopes are the scopes every client may ask for besides its own.
var openIDScopes = []string{ScopeOpenID, ScopeEmail}

// IDTokenClaims implements openid.Session. The claims live as long as the
// session value (fosite sets at_hash on them, then signs them); they are
// never stored: a stored session rebuilds them from its subject.
func (s *session) IDTokenClaims() *jwt.IDTokenClaims {
	if s.idClaims == nil {
		s.idClaims = &jwt.IDTokenClaims{Subject: s.Subject}
	}
	return s.idClaims
}

// IDTokenHeaders implements openid.Session: the key id comes from the
// signing key itself.
func (s *session) IDTokenHeaders() *jwt.Headers {
	if s.idHeaders == nil {
		s.idHeaders = &jwt.Headers{}
	}
	return s.idHeaders
}

var _ openid.Session = (*session)(nil)

// openIDHandler returns fosite's OpenID Connect handler for the code flow,
// configured on cfg, with the signing keys of s.
func (s *Server) openIDHandler(cfg *fosite.Config) *openid.OpenIDConnectExplicitHandler {
	s.idKeys = &signingKeys{srv: s}
	cfg.IDTokenIssuer = s.issuer
	cfg.IDTokenLifespan = s.opts.IDTokenLifetime
	cfg.AllowedPromptValues = []string{"consent", "select_account"}
	// The code's row keeps the nonce for the ID token.
	cfg.SanitationWhiteList = append(slices.Clone(cfg.SanitationWhiteList), "nonce")
	signer := &jwt.DefaultSigner{GetPrivateKey: s.idKeys.current}
	return &openid.OpenIDConnectExplicitHandler{
		OpenIDConnectRequestStorage:   oidcStore{s},
		OpenIDConnectRequestValidator: openid.NewOpenIDConnectRequestValidator(signer, cfg),
		Config:                        cfg,
		IDTokenHandleHelper:           &openid.IDTokenHandleHelper{IDTokenStrategy: &openid.DefaultStrategy{Signer: signer, Config: cfg}},
	}
}

// oidcStore is fosite's OpenID Connect session storage. The session of an
// ID token is the authorization code's own row (its request keeps the
// nonce and the granted scopes), so there is nothing more to store: the
// code handler, which runs first at the token endpoint, has already made
// the code single-use.
type oidcStore struct{ srv *Server }

var _ openid.OpenIDConnectRequestStorage = oidcStore{}

func (o oidcStore) CreateOpenIDConnectSession(context.Context, string, fosite.Requester) error {
	return nil
}

func (o oidcStore) GetOpenIDConnectSession(ctx context.Context, code string, _ fosite.Requester) (fosite.Requester, error) {
	sig := o.srv.strategy.AuthorizeCodeSignature(ctx, code)
	req, _, err := o.srv.store.getSession(ctx, kindCode, sig, &session{})
	if errors.Is(err, fosite.ErrNotFound) {
		return nil, openid.ErrNoSessionFound
	}
	if err != nil {
		return nil, err
	}
	if !req.GetGrantedScopes().Has(ScopeOpenID) {
		// Not an OpenID Connect request: no ID token.
		return nil, openid.ErrNoSessionFound
	}
	return req, nil
}

func (o oidcStore) DeleteOpenIDConnectSession(context.Context, string) error { return nil }

// maxNonceLen bounds the nonce, which the code's row keeps and the ID
// token repeats.
const maxNonceLen = 512

// checkOpenIDParams refuses the OpenID Connect authorization parameters
// this server does not implement, before fosite reads them: request
// objects (fosite would fetch a request_uri itself, around the client
// resolution and the egress rules), and the prompt and max_age values
// that need a fresh sign-in the login page cannot promise.
func checkOpenIDParams(form url.Values) error {
	switch {
	case form.Get("request") != "":
		return fosite.ErrRequestNotSupported.WithHint("Request objects are not supported; send the parameters in the query.")
	case form.Get("request_uri") != "":
		return fosite.ErrRequestURINotSupported.WithHint("Request objects are not supported; send the parameters in the query.")
	case form.Get("max_age") != "":
		return fosite.ErrInvalidRequest.WithHint("The max_age parameter is not supported.")
	case len(form.Get("nonce")) > maxNonceLen:
		// Kept with the code and copied into the ID token.
		return fosite.ErrInvalidRequest.WithHintf("The nonce is longer than %d characters.", maxNonceLen)
	}
	for _, p := range strings.Fields(form.Get("prompt")) {
		if p == "none" || p == "login" {
			return fosite.ErrInvalidRequest.WithHintf("prompt=%s is not supported.", p)
		}
	}
	return nil
}

// promptsConsent reports whether the request asks for the consent page
// even when the person approved these scopes before (prompt=consent).
func promptsConsent(form url.Values) bool {
	return slices.Contains(strings.Fields(form.Get("prompt")), "consent")
}

// OpenIDConfiguration is the OpenID Connect discovery document.
type OpenIDConfiguration struct {
	ASMetadata
	JWKSURI                          string   `json:"jwks_uri"`
	UserinfoEndpoint                 string   `json:"userinfo_endpoint"`
	SubjectTypesSupported            []string `json:"subject_types_supported"`
	IDTokenSigningAlgValuesSupported []string `json:"id_token_signing_alg_values_supported"`
	ClaimsSupported                  []string `json:"claims_supported"`
	RequestParameterSupported        bool     `json:"request_parameter_supported"`
	RequestURIParameterSupported     bool     `json:"request_uri_parameter_supported"`
}

// OpenIDConfiguration returns the discovery document.
func (s *Server) OpenIDConfiguration() OpenIDConfiguration {
	md := s.Metadata()
	for _, sc := range openIDScopes {
		if !slices.Contains(md.ScopesSupported, sc) {
			md.ScopesSupported = append(slices.Clone(md.ScopesSupported), sc)
		}
	}
	return OpenIDConfiguration{
		ASMetadata:                       md,
		JWKSURI:                          s.issuer + PathJWKS,
		UserinfoEndpoint:                 s.issuer + PathUserinfo,
		SubjectTypesSupported:            []string{"public"},
		IDTokenSigningAlgValuesSupported: []string{"RS256"},
		ClaimsSupported:                  []string{"sub", "iss", "aud", "exp", "iat", "auth_time", "nonce", "at_hash", "email", "email_verified"},
	}
}

// signInOnly reports whether scopes are all OpenID Connect scopes.
func signInOnly(scopes []string) bool {
	for _, sc := range scopes {
		if !slices.Contains(openIDScopes, sc) {
			return false
		}
	}
	return len(scopes) > 0
}

// registerOpenID adds the discovery document, the JWKS and userinfo.
func (s *Server) registerOpenID(mux *http.ServeMux) {
	mux.HandleFunc("GET "+PathOpenIDConfiguration, func(w http.ResponseWriter, _ *http.Request) {
		writeMetadata(w, s.OpenIDConfiguration())
	})
	mux.HandleFunc("GET "+PathJWKS, s.serveJWKS)
	mux.HandleFunc("GET "+PathUserinfo, s.serveUserinfo)
	mux.HandleFunc("POST "+PathUserinfo, s.serveUserinfo)
}

func (s *Server) serveJWKS(w http.ResponseWriter, r *http.Request) {
	set, err := s.idKeys.jwks(r.Context())
	if err != nil {
		s.opts.Logger.ErrorContext(r.Context(), "oauth: load ID token keys", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, oauthError{Error: "server_error", Description: "The signing keys are temporarily unavailable; retry shortly."})
		return
	}
	// Short caching: a relying party sees a rotated key well before it
	// signs anything.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=30")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	_ = json.NewEncoder(w).Encode(set)
}

// Userinfo is the userinfo answer: the stable user id, and with the email
// scope the account's email and whether it is verified. Nothing else about
// the account leaves.
type Userinfo struct {
	Subject       string `json:"sub"`
	Email         string `json:"email,omitempty"`
	EmailVerified *bool  `json:"email_verified,omitempty"`
}

// serveUserinfo answers GET or POST with the access token as a bearer
// (RFC 6750 header, or access_token in a POST form). The token must carry
// the openid scope.
func (s *Server) serveUserinfo(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok && r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err == nil {
			token = r.PostForm.Get("access_token")
		}
	}
	token = strings.TrimSpace(token)
	challenge := func(code, desc string, status int) {
		w.Header().Set("WWW-Authenticate", `Bearer error="`+code+`", error_description="`+desc+`"`)
		writeJSON(w, status, oauthError{Error: code, Description: desc})
	}
	if token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer`)
		writeJSON(w, http.StatusUnauthorized, oauthError{Error: "invalid_request", Description: "Send the access token as a bearer token."})
		return
	}
	acc, err := s.verifyAccess(ctx, token, true)
	if errors.Is(err, ErrInvalidToken) {
		challenge("invalid_token", "The access token is not valid.", http.StatusUnauthorized)
		return
	}
	if err != nil {
		s.opts.Logger.ErrorContext(ctx, "oauth: userinfo", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, oauthError{Error: "server_error", Description: "The server is temporarily unavailable; retry shortly."})
		return
	}
	if !slices.Contains(acc.Scopes, ScopeOpenID) {
		challenge("insufficient_scope", "The access token was not granted the openid scope.", http.StatusForbidden)
		return
	}
	info := Userinfo{Subject: acc.StableUserID}
	if slices.Contains(acc.Scopes, ScopeEmail) {
		var row struct {
			Email      string     `bun:"email"`
			VerifiedAt *time.Time `bun:"email_verified_at"`
		}
		err := s.store.db.Reader.NewSelect().Table("users").Column("email", "email_verified_at").
			Where("id = ?", acc.UserID).Scan(ctx, &row)
		if err != nil {
			s.opts.Logger.ErrorContext(ctx, "oauth: userinfo email", "err", err)
			writeJSON(w, http.StatusServiceUnavailable, oauthError{Error: "server_error", Description: "The server is temporarily unavailable; retry shortly."})
			return
		}
		verified := row.VerifiedAt != nil
		info.Email, info.EmailVerified = row.Email, &verified
	}
	writeJSON(w, http.StatusOK, info)
}
