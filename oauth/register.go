package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// ClientMetadata is an RFC 7591 registration request (the fields this
// server honours) and the metadata part of its response.
type ClientMetadata struct {
	RedirectURIs            []string `json:"redirect_uris"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	ClientName              string   `json:"client_name,omitempty"`
	ClientURI               string   `json:"client_uri,omitempty"`
	LogoURI                 string   `json:"logo_uri,omitempty"`
	Scope                   string   `json:"scope"`
	SoftwareID              string   `json:"software_id,omitempty"`
	SoftwareVersion         string   `json:"software_version,omitempty"`
	// JWKSURI and TokenEndpointAuthSigningAlg come only from a client
	// metadata document whose client uses private_key_jwt; registration
	// ignores them.
	JWKSURI                     string `json:"jwks_uri,omitempty"`
	TokenEndpointAuthSigningAlg string `json:"token_endpoint_auth_signing_alg,omitempty"`
}

// RegistrationResponse is the RFC 7591 client information response.
type RegistrationResponse struct {
	ClientID              string `json:"client_id"`
	ClientSecret          string `json:"client_secret,omitempty"`
	ClientIDIssuedAt      int64  `json:"client_id_issued_at"`
	ClientSecretExpiresAt *int64 `json:"client_secret_expires_at,omitempty"`
	ClientMetadata
}

// Registration limits.
const (
	maxRedirectURIs = 10
	maxMetadataText = 256
)

// registrationError is an RFC 7591 error.
type registrationError struct {
	code, description string
}

func (e *registrationError) Error() string { return "oauth: " + e.code + ": " + e.description }

func invalidMetadata(format string, args ...any) error {
	return &registrationError{"invalid_client_metadata", fmt.Sprintf(format, args...)}
}

func invalidRedirect(format string, args ...any) error {
	return &registrationError{"invalid_redirect_uri", fmt.Sprintf(format, args...)}
}

func (s *Server) serveRegister(w http.ResponseWriter, r *http.Request) {
	if !s.admitRegistration(w, r) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	var md ClientMetadata
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(&md); err != nil {
		writeJSON(w, http.StatusBadRequest, oauthError{Error: "invalid_client_metadata", Description: "The body must be a JSON object of client metadata."})
		return
	}
	resp, err := s.RegisterClient(r.Context(), md)
	var rerr *registrationError
	switch {
	case errors.As(err, &rerr):
		writeJSON(w, http.StatusBadRequest, oauthError{Error: rerr.code, Description: rerr.description})
	case err != nil:
		s.opts.Logger.ErrorContext(r.Context(), "oauth: register client", "err", err)
		writeJSON(w, http.StatusInternalServerError, oauthError{Error: "server_error", Description: "The server could not complete the request."})
	default:
		writeJSON(w, http.StatusCreated, resp)
	}
}

// RegisterClient registers a client (RFC 7591). Registering the metadata
// of a public client again within Options.ReregistrationWindow returns the
// existing client instead of a new one.
func (s *Server) RegisterClient(ctx context.Context, md ClientMetadata) (*RegistrationResponse, error) {
	if err := s.normalizeMetadata(&md); err != nil {
		return nil, err
	}
	canon, err := json.Marshal(md)
	if err != nil {
		return nil, fmt.Errorf("oauth: register: %w", err)
	}
	sum := sha256.Sum256(canon)
	hash := hex.EncodeToString(sum[:])
	now := s.opts.Now().UTC()
	public := md.TokenEndpointAuthMethod == "none"

	if public && s.opts.ReregistrationWindow > 0 {
		var existing clientRow
		err := s.store.db.Reader.NewSelect().Model(&existing).
			Where("metadata_hash = ? AND created_at > ? AND secret_hash IS NULL", hash, now.Add(-s.opts.ReregistrationWindow)).
			OrderExpr("created_at DESC").Limit(1).Scan(ctx)
		if err == nil {
			return &RegistrationResponse{ClientID: existing.ID, ClientIDIssuedAt: existing.CreatedAt.Unix(), ClientMetadata: md}, nil
		}
	}

	id, err := randomString(16)
	if err != nil {
		return nil, err
	}
	resp := &RegistrationResponse{ClientID: id, ClientIDIssuedAt: now.Unix(), ClientMetadata: md}
	row := &clientRow{
		ID:                      id,
		Name:                    md.ClientName,
		Scope:                   md.Scope,
		TokenEndpointAuthMethod: md.TokenEndpointAuthMethod,
		Metadata:                string(canon),
		MetadataHash:            hash,
		CreatedAt:               now,
		LastUsedAt:              now,
	}
	if !public {
		secret, err := randomString(32)
		if err != nil {
			return nil, err
		}
		row.SecretHash = hashSecret(secret)
		resp.ClientSecret = secret
		never := int64(0)
		resp.ClientSecretExpiresAt = &never
	}
	uris, _ := json.Marshal(md.RedirectURIs)
	grants, _ := json.Marshal(md.GrantTypes)
	responses, _ := json.Marshal(md.ResponseTypes)
	row.RedirectURIs, row.GrantTypes, row.ResponseTypes = string(uris), string(grants), string(responses)
	if _, err := s.store.db.DB.NewInsert().Model(row).Returning("NULL").Exec(ctx); err != nil {
		return nil, fmt.Errorf("oauth: register client: %w", err)
	}
	return resp, nil
}

// normalizeMetadata validates md and fills in defaults.
func (s *Server) normalizeMetadata(md *ClientMetadata) error {
	md.JWKSURI, md.TokenEndpointAuthSigningAlg = "", ""
	if len(md.RedirectURIs) == 0 {
		return invalidRedirect("At least one redirect_uri is required.")
	}
	if len(md.RedirectURIs) > maxRedirectURIs {
		return invalidRedirect("At most %d redirect_uris are allowed.", maxRedirectURIs)
	}
	for _, raw := range md.RedirectURIs {
		u, err := url.Parse(raw)
		if err != nil || !u.IsAbs() {
			return invalidRedirect("The redirect_uri %q is not an absolute URI.", raw)
		}
		if err := s.redirectURIAllowed(u); err != nil {
			return invalidRedirect("The redirect_uri %q is not allowed: %s", raw, err.Error())
		}
	}
	switch md.TokenEndpointAuthMethod {
	case "":
		md.TokenEndpointAuthMethod = "client_secret_basic"
	case "none", "client_secret_basic", "client_secret_post":
	default:
		return invalidMetadata("The token_endpoint_auth_method %q is not supported.", md.TokenEndpointAuthMethod)
	}
	if len(md.GrantTypes) == 0 {
		md.GrantTypes = []string{"authorization_code", "refresh_token"}
	}
	for _, g := range md.GrantTypes {
		if g != "authorization_code" && g != "refresh_token" && (g != GrantTypeJWTBearer || !s.enterpriseEnabled()) {
			return invalidMetadata("The grant type %q is not supported.", g)
		}
	}
	if !slices.Contains(md.GrantTypes, "authorization_code") {
		return invalidMetadata("The authorization_code grant type is required.")
	}
	md.GrantTypes = sortedUnique(md.GrantTypes)
	if len(md.ResponseTypes) == 0 {
		md.ResponseTypes = []string{"code"}
	}
	for _, rt := range md.ResponseTypes {
		if rt != "code" {
			return invalidMetadata("The response type %q is not supported.", rt)
		}
	}
	md.ResponseTypes = []string{"code"}
	if md.Scope == "" {
		md.Scope = strings.Join(s.opts.Scopes, " ")
	}
	scopes := strings.Fields(md.Scope)
	for _, sc := range scopes {
		if !slices.Contains(s.opts.Scopes, sc) {
			return invalidMetadata("The scope %q is not supported.", sc)
		}
	}
	md.Scope = strings.Join(sortedUnique(scopes), " ")
	for _, text := range []*string{&md.ClientName, &md.ClientURI, &md.LogoURI, &md.SoftwareID, &md.SoftwareVersion} {
		*text = strings.TrimSpace(*text)
		if len(*text) > maxMetadataText || !storable(*text) {
			return invalidMetadata("Client metadata text fields are limited to %d bytes of UTF-8, without NUL characters.", maxMetadataText)
		}
	}
	for _, link := range []string{md.ClientURI, md.LogoURI} {
		if link == "" {
			continue
		}
		if u, err := url.Parse(link); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return invalidMetadata("The URI %q must be an http(s) URL.", link)
		}
	}
	return nil
}

// redirectURIAllowed applies the redirect URI rules: https anywhere, http
// only on a loopback address (any port), or a private-use scheme on the
// operator's list; never a fragment or user info.
func (s *Server) redirectURIAllowed(u *url.URL) error {
	if u.Fragment != "" || u.User != nil {
		return errors.New("fragments and user info are not allowed")
	}
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme == "https":
		if u.Host == "" {
			return errors.New("https URIs need a host")
		}
		return nil
	case scheme == "http":
		if isLoopback(u.Hostname()) {
			return nil
		}
		return errors.New("http is only allowed on a loopback address")
	case slices.Contains(s.opts.PrivateURISchemes, scheme):
		return nil
	default:
		return fmt.Errorf("the scheme %q is not allowed", u.Scheme)
	}
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func sortedUnique(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

func randomString(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("oauth: random: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// admitRegistration counts r against its client network's registration
// bucket when Options.RegistrationLimiter is set. It answers the request
// itself (429 with Retry-After, or 503 when the count failed) and reports
// false when r must not go on.
func (s *Server) admitRegistration(w http.ResponseWriter, r *http.Request) bool {
	if s.opts.RegistrationLimiter == nil {
		return true
	}
	d, err := s.opts.RegistrationLimiter.Allow(r.Context(), "oauth-register:"+clientNetwork(s.opts.ClientAddr(r)), s.opts.RegistrationLimit)
	if err != nil {
		s.opts.Logger.ErrorContext(r.Context(), "oauth: registration rate limit", "err", err)
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusServiceUnavailable, oauthError{Error: "temporarily_unavailable", Description: "Try again shortly."})
		return false
	}
	if !d.Allowed {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.RetryAfter.Seconds()))))
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusTooManyRequests, oauthError{Error: "slow_down", Description: "Too many client registrations from this network; try again later."})
		return false
	}
	return true
}

// clientNetwork names a's bucket: an IPv4 address alone, an IPv6 address
// by its /64.
func clientNetwork(a netip.Addr) string {
	if a.Is6() && !a.Is4In6() {
		a = netip.PrefixFrom(a, 64).Masked().Addr()
	}
	return a.Unmap().String()
}

// peerAddr is the default Options.ClientAddr: the TCP peer of r.
func peerAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		a, _ := netip.ParseAddr(r.RemoteAddr)
		return a
	}
	return ap.Addr()
}
