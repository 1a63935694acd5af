package oauth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v3"
	"github.com/go-jose/go-jose/v3/jwt"
	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/oauth2"
	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/internal/egress"
)

// Enterprise-managed authorization (the MCP extension of that name, on
// draft-ietf-oauth-identity-assertion-authz-grant): an organisation's
// identity provider, trusted by the operator, issues an Identity
// Assertion JWT Authorization Grant (ID-JAG) naming one of its people,
// a client and this server; the client redeems it here with the RFC 7523
// JWT bearer grant, without a browser or consent page, for an access token
// to the MCP resource. No refresh token is issued: the client asks its IdP
// for a fresh assertion, so the IdP stays in charge of who keeps access.

// GrantTypeJWTBearer is the RFC 7523 grant type that redeems an ID-JAG.
const GrantTypeJWTBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// IDJAGType is the JOSE typ header of an ID-JAG.
const IDJAGType = "oauth-id-jag+jwt"

// Bounds of an ID-JAG.
const (
	// IDJAGMaxLifetime bounds exp - iat: an assertion is short-lived.
	IDJAGMaxLifetime = 5 * time.Minute
	// IDJAGClockSkew is the leeway on exp, iat and nbf.
	IDJAGClockSkew = time.Minute
	// idjagMaxBytes bounds the assertion parameter.
	idjagMaxBytes = 16 << 10
	// IdP key sets: fetch limits and how long one is used.
	idpJWKSTimeout   = 5 * time.Second
	idpJWKSMaxBytes  = 64 << 10
	idpJWKSMaxKeys   = 32
	idpJWKSCacheTTL  = 10 * time.Minute
	idpJWKSRefetchIn = 30 * time.Second // an unknown kid refetches at most this often
)

// TrustedIdP is an enterprise identity provider whose ID-JAGs this server
// redeems.
type TrustedIdP struct {
	// Issuer is the IdP's issuer identifier, compared exactly with the
	// assertion's iss (required).
	Issuer string `json:"issuer"`
	// JWKSURL is the https URL of the IdP's signing keys (required).
	JWKSURL string `json:"jwksUrl"`
	// ClientIDs, when not empty, are the only clients (their client_id at
	// this server) that may redeem this IdP's assertions.
	ClientIDs []string `json:"clientIds,omitempty"`
	// EmailDomains are the email domains the IdP vouches for: a first
	// assertion links an account by its verified email only when the
	// address is of one of them (exact, case-insensitive; a subdomain
	// must be listed itself). Empty: the IdP links by subject only, never
	// by email, since any IdP can assert any address, and linking by an
	// address of a domain it does not own would hand it that account.
	EmailDomains []string `json:"emailDomains,omitempty"`
}

// vouchesFor reports whether email is of one of the IdP's email domains.
func (idp TrustedIdP) vouchesFor(email string) bool {
	at := strings.LastIndexByte(email, '@')
	if at <= 0 {
		return false
	}
	domain := email[at+1:]
	for _, d := range idp.EmailDomains {
		if strings.EqualFold(d, domain) {
			return true
		}
	}
	return false
}

// EnterpriseOptions configures enterprise-managed authorization. With no
// IdPs it is off: the JWT bearer grant is neither advertised nor accepted.
type EnterpriseOptions struct {
	// IdPs are the trusted identity providers.
	IdPs []TrustedIdP
	// AllowPrivate lets key sets be fetched from loopback and private
	// addresses (an IdP on the operator's own network; tests). https is
	// still required.
	AllowPrivate bool
	// TLSConfig replaces the TLS configuration of key set fetches (tests
	// trust an httptest server's certificate with it).
	TLSConfig *tls.Config
}

func (o EnterpriseOptions) check() error {
	seen := map[string]bool{}
	for _, idp := range o.IdPs {
		iu, err := url.Parse(idp.Issuer)
		if idp.Issuer == "" || err != nil || iu.Scheme != "https" || iu.Host == "" || iu.Fragment != "" || iu.RawQuery != "" {
			return fmt.Errorf("oauth: trusted IdP issuer %q: want an https URL without query or fragment", idp.Issuer)
		}
		if seen[idp.Issuer] {
			return fmt.Errorf("oauth: trusted IdP %q is configured twice", idp.Issuer)
		}
		seen[idp.Issuer] = true
		ju, err := url.Parse(idp.JWKSURL)
		if err != nil || ju.Scheme != "https" || ju.Host == "" || ju.Fragment != "" {
			return fmt.Errorf("oauth: trusted IdP %q: its JWKS URL %q must be an https URL", idp.Issuer, idp.JWKSURL)
		}
		for _, c := range idp.ClientIDs {
			if c == "" || !storable(c) {
				return fmt.Errorf("oauth: trusted IdP %q: empty or malformed client id", idp.Issuer)
			}
		}
		for _, d := range idp.EmailDomains {
			if d == "" || len(d) > 253 || strings.ContainsAny(d, "@/ \t") || !strings.Contains(d, ".") || !storable(d) {
				return fmt.Errorf("oauth: trusted IdP %q: email domain %q: want a domain name such as corp.example", idp.Issuer, d)
			}
		}
	}
	return nil
}

// ParseTrustedIdP reads a trusted IdP from its flag form:
// issuer=URL,jwks-url=URL[,client-ids=ID ID ...][,email-domains=D D ...].
func ParseTrustedIdP(v string) (TrustedIdP, error) {
	var idp TrustedIdP
	for _, part := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return idp, fmt.Errorf("%q: want key=value", part)
		}
		switch k {
		case "issuer":
			idp.Issuer = val
		case "jwks-url":
			idp.JWKSURL = val
		case "client-ids":
			idp.ClientIDs = strings.Fields(val)
		case "email-domains":
			idp.EmailDomains = strings.Fields(val)
		default:
			return idp, fmt.Errorf("unknown key %q: want issuer, jwks-url, client-ids or email-domains", k)
		}
	}
	if err := (EnterpriseOptions{IdPs: []TrustedIdP{idp}}).check(); err != nil {
		return idp, errors.New(strings.TrimPrefix(err.Error(), "oauth: "))
	}
	return idp, nil
}

// LoadTrustedIdPs reads a JSON array of trusted IdPs (issuer, jwksUrl,
// clientIds, emailDomains) from the file at path and checks them.
func LoadTrustedIdPs(path string) ([]TrustedIdP, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var idps []TrustedIdP
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&idps); err != nil {
		return nil, fmt.Errorf("%s: want a JSON array of {issuer, jwksUrl, clientIds, emailDomains}: %w", path, err)
	}
	if err := (EnterpriseOptions{IdPs: idps}).check(); err != nil {
		return nil, fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "oauth: "))
	}
	return idps, nil
}

// enterpriseEnabled reports whether the JWT bearer grant is on.
func (s *Server) enterpriseEnabled() bool { return s.idps != nil }

// idjagClaims are the claims of an ID-JAG this server reads.
type idjagClaims struct {
	jwt.Claims
	ClientID      string `json:"client_id"`
	Resource      any    `json:"resource"`
	Scope         string `json:"scope"`
	Email         string `json:"email"`
	EmailVerified any    `json:"email_verified"`
}

// resources is the resource claim, a string or an array of strings.
func (c *idjagClaims) resources() []string {
	switch v := c.Resource.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// emailVerified is email_verified true (a boolean, or the string "true"
// some IdPs send).
func (c *idjagClaims) emailVerified() bool {
	switch v := c.EmailVerified.(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

var idjagAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// idjagHandler is the RFC 7523 JWT bearer grant for ID-JAGs.
type idjagHandler struct {
	srv    *Server
	helper *oauth2.HandleHelper
}

var _ fosite.TokenEndpointHandler = (*idjagHandler)(nil)

func (h *idjagHandler) CanSkipClientAuth(context.Context, fosite.AccessRequester) bool { return false }

func (h *idjagHandler) CanHandleTokenEndpointRequest(_ context.Context, r fosite.AccessRequester) bool {
	return r.GetGrantTypes().ExactOne(GrantTypeJWTBearer)
}

// invalidGrant is the answer for an assertion that cannot be redeemed.
func invalidGrant(hint string) error {
	return fosite.ErrInvalidGrant.WithHint(hint)
}

func (h *idjagHandler) HandleTokenEndpointRequest(ctx context.Context, r fosite.AccessRequester) error {
	if !h.CanHandleTokenEndpointRequest(ctx, r) {
		return fosite.ErrUnknownRequest
	}
	s := h.srv
	client := r.GetClient()
	if !client.GetGrantTypes().Has(GrantTypeJWTBearer) {
		return fosite.ErrUnauthorizedClient.WithHint("The client is not registered for the JWT bearer grant: add " + GrantTypeJWTBearer + " to its grant_types.")
	}
	form := r.GetRequestForm()
	if len(form["assertion"]) != 1 || form.Get("assertion") == "" {
		return fosite.ErrInvalidRequest.WithHint("The request needs exactly one assertion parameter holding the ID-JAG.")
	}
	claims, idp, err := s.verifyIDJAG(ctx, form.Get("assertion"))
	if err != nil {
		return err
	}
	if claims.ClientID != client.GetID() {
		return invalidGrant("The assertion was issued to another client (its client_id is not the client that presented it).")
	}
	if len(idp.cfg.ClientIDs) > 0 && !slices.Contains(idp.cfg.ClientIDs, client.GetID()) {
		return invalidGrant("This client may not redeem assertions of this identity provider.")
	}
	// Single use: the insert decides, so of two redemptions racing exactly
	// one passes. The key is bound to the issuer (jti values are unique
	// per issuer only) and kept until the assertion could no longer pass.
	sum := sha256.Sum256([]byte(claims.Issuer + "\x00" + claims.ID))
	if err := s.store.SetClientAssertionJWT(ctx, "idjag:"+hex.EncodeToString(sum[:]), claims.Expiry.Time().Add(IDJAGClockSkew)); err != nil {
		if errors.Is(err, fosite.ErrJTIKnown) {
			return invalidGrant("The assertion was already used: ask the identity provider for a new one.")
		}
		return err
	}
	userID, err := s.linkEnterpriseIdentity(ctx, claims, idp.cfg)
	if err != nil {
		return err
	}
	if err := s.checkAccount(ctx, userID, time.Time{}); err != nil {
		return err
	}
	acct, err := s.loadAccount(ctx, s.store.db.Reader, userID)
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	scopes, err := s.idjagScopes(ctx, claims, form.Get("scope"), client, userID)
	if err != nil {
		return err
	}
	for _, sc := range scopes {
		r.GrantScope(sc)
	}
	r.GrantAudience(s.resource)
	sess, ok := r.GetSession().(*session)
	if !ok {
		return fosite.ErrServerError.WithDebug("unexpected session type")
	}
	sess.UserID, sess.Subject = userID, acct.StableID
	sess.SetExpiresAt(fosite.AccessToken, s.opts.Now().UTC().Add(s.opts.AccessTokenLifetime).Round(time.Second))
	return nil
}

func (h *idjagHandler) PopulateTokenEndpointResponse(ctx context.Context, r fosite.AccessRequester, resp fosite.AccessResponder) error {
	if !h.CanHandleTokenEndpointRequest(ctx, r) {
		return fosite.ErrUnknownRequest
	}
	if _, err := h.helper.IssueAccessToken(ctx, h.srv.opts.AccessTokenLifetime, r, resp); err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	return nil
}

// verifyIDJAG checks an assertion's form, issuer, signature, audience,
// resource and lifetime, and returns its claims and its IdP.
func (s *Server) verifyIDJAG(ctx context.Context, raw string) (*idjagClaims, *trustedIdP, error) {
	if len(raw) > idjagMaxBytes {
		return nil, nil, invalidGrant("The assertion is too large.")
	}
	// Only the compact serialization, whose headers are all signed: in the
	// JSON one an unprotected header could supply typ (or kid) to a JWT
	// the IdP signed for another purpose.
	if strings.Count(raw, ".") != 2 || strings.HasPrefix(strings.TrimSpace(raw), "{") {
		return nil, nil, invalidGrant("The assertion is not a signed JWT in compact serialization.")
	}
	tok, err := jwt.ParseSigned(raw)
	if err != nil || len(tok.Headers) != 1 {
		return nil, nil, invalidGrant("The assertion is not a signed JWT.")
	}
	hdr := tok.Headers[0]
	if typ, _ := hdr.ExtraHeaders[jose.HeaderType].(string); !strings.EqualFold(typ, IDJAGType) && !strings.EqualFold(typ, "application/"+IDJAGType) {
		return nil, nil, invalidGrant("The assertion is not an ID-JAG: its typ header must be " + IDJAGType + ".")
	}
	if !slices.Contains(idjagAlgs, hdr.Algorithm) {
		return nil, nil, invalidGrant("The assertion's signing algorithm is not accepted: use an RSA, ECDSA or EdDSA algorithm.")
	}
	var unverified idjagClaims
	if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return nil, nil, invalidGrant("The assertion's claims could not be read.")
	}
	idp := s.idps.byIssuer(unverified.Issuer)
	if idp == nil {
		return nil, nil, invalidGrant("The assertion's issuer is not a trusted identity provider of this server.")
	}
	keys, err := s.idps.keys(ctx, idp, hdr.KeyID)
	if err != nil {
		s.opts.Logger.WarnContext(ctx, "oauth: enterprise IdP keys unavailable", "issuer", idp.cfg.Issuer, "err", err)
		return nil, nil, fosite.ErrTemporarilyUnavailable.WithHint("The identity provider's signing keys could not be fetched; retry shortly.")
	}
	var claims *idjagClaims
	for _, k := range keys {
		if hdr.KeyID != "" && k.KeyID != hdr.KeyID {
			continue
		}
		if k.Algorithm != "" && k.Algorithm != hdr.Algorithm {
			continue
		}
		var c idjagClaims
		if tok.Claims(k.Key, &c) == nil {
			claims = &c
			break
		}
	}
	if claims == nil {
		return nil, nil, invalidGrant("The assertion's signature does not verify with the identity provider's keys.")
	}
	now := s.opts.Now()
	switch {
	case claims.Issuer != idp.cfg.Issuer:
		return nil, nil, invalidGrant("The assertion's issuer is not a trusted identity provider of this server.")
	case len(claims.Audience) != 1 || claims.Audience[0] != s.issuer:
		// One audience: an ID-JAG naming other servers too could be
		// redeemed here by any of them.
		return nil, nil, invalidGrant("The assertion's audience is not this authorization server (" + s.issuer + ") alone.")
	case claims.Expiry == nil || claims.IssuedAt == nil:
		return nil, nil, invalidGrant("The assertion must carry exp and iat.")
	case now.After(claims.Expiry.Time().Add(IDJAGClockSkew)):
		return nil, nil, invalidGrant("The assertion has expired: ask the identity provider for a new one.")
	case claims.IssuedAt.Time().After(now.Add(IDJAGClockSkew)) || (claims.NotBefore != nil && claims.NotBefore.Time().After(now.Add(IDJAGClockSkew))):
		return nil, nil, invalidGrant("The assertion is not valid yet (check the clocks).")
	case claims.Expiry.Time().Sub(claims.IssuedAt.Time()) > IDJAGMaxLifetime:
		return nil, nil, invalidGrant(fmt.Sprintf("The assertion lives too long: exp may be at most %d minutes after iat.", int(IDJAGMaxLifetime/time.Minute)))
	case claims.ID == "" || len(claims.ID) > 256 || !storable(claims.ID):
		return nil, nil, invalidGrant("The assertion needs a jti of at most 256 bytes.")
	case claims.Subject == "" || len(claims.Subject) > 255 || !storable(claims.Subject):
		return nil, nil, invalidGrant("The assertion needs a sub of at most 255 bytes.")
	case claims.ClientID == "":
		return nil, nil, invalidGrant("The assertion names no client_id.")
	}
	res := claims.resources()
	if len(res) == 0 {
		return nil, nil, invalidGrant("The assertion names no resource: it must name this server's MCP resource (" + s.resource + ").")
	}
	for _, r := range res {
		if _, ok := s.normalizeResource(r); !ok {
			return nil, nil, invalidGrant("The assertion's resource is not this server's MCP resource (" + s.resource + ").")
		}
	}
	return claims, idp, nil
}

// idjagScopes are the scopes a redeemed assertion gets: those it asserts
// (ScopeMCP when it asserts none), narrowed by the request's scope
// parameter when present, that this server knows, the client may ask
// for, and the account may hold (ScopeAdmin only for an admin).
func (s *Server) idjagScopes(ctx context.Context, claims *idjagClaims, requested string, client fosite.Client, userID int64) ([]string, error) {
	asserted := strings.Fields(claims.Scope)
	if len(asserted) == 0 {
		asserted = []string{ScopeMCP}
	}
	if req := strings.Fields(requested); len(req) > 0 {
		for _, sc := range req {
			if !slices.Contains(asserted, sc) {
				return nil, fosite.ErrInvalidScope.WithHint(fmt.Sprintf("The scope %q is not in the assertion.", sc))
			}
		}
		asserted = req
	}
	var out []string
	for _, sc := range asserted {
		if !slices.Contains(s.opts.Scopes, sc) || !client.GetScopes().Has(sc) || slices.Contains(out, sc) {
			continue
		}
		if sc == ScopeAdmin {
			admin, err := s.holdsRole(ctx, userID, capabilities.RoleAdmin)
			if err != nil {
				return nil, fosite.ErrServerError.WithWrap(err)
			}
			if !admin {
				continue
			}
		}
		out = append(out, sc)
	}
	if len(out) == 0 {
		return nil, fosite.ErrInvalidScope.WithHint("None of the assertion's scopes may be granted to this client and account.")
	}
	return out, nil
}

// enterpriseIdentityRow links an IdP's subject to an account.
type enterpriseIdentityRow struct {
	bun.BaseModel `bun:"table:oauth_enterprise_identities,alias:ei"`

	ID         string    `bun:"id,pk"`
	UserID     int64     `bun:"user_id"`
	Issuer     string    `bun:"issuer"`
	Subject    string    `bun:"subject"`
	CreatedAt  time.Time `bun:"created_at"`
	LastUsedAt time.Time `bun:"last_used_at"`
}

func enterpriseIdentityID(issuer, subject string) string {
	sum := sha256.Sum256([]byte(issuer + "\x00" + subject))
	return hex.EncodeToString(sum[:])
}

var errForeignEmailDomain = invalidGrant("No account is linked to this identity, and the assertion's email is not of a domain this server lets the identity provider vouch for.")

var errNoLinkedAccount = invalidGrant("No account is linked to this identity, and the assertion carries no verified email address of an account that could be linked.")

// linkEnterpriseIdentity finds the account of an assertion's subject: the
// (issuer, sub) identity linked before, else the account whose verified
// email is the assertion's verified email of a domain the IdP vouches for
// (TrustedIdP.EmailDomains), which it then links (unless
// that account is already linked to another subject of the same issuer:
// an email the IdP reassigned never moves an account to a new person).
// No account is created.
func (s *Server) linkEnterpriseIdentity(ctx context.Context, claims *idjagClaims, idp TrustedIdP) (int64, error) {
	id := enterpriseIdentityID(claims.Issuer, claims.Subject)
	now := s.opts.Now().UTC()
	var row enterpriseIdentityRow
	err := s.store.db.DB.NewSelect().Model(&row).Where("id = ?", id).Scan(ctx)
	if err == nil {
		if _, err := s.store.db.DB.NewUpdate().Model((*enterpriseIdentityRow)(nil)).
			Set("last_used_at = ?", now).Where("id = ? AND user_id = ?", id, row.UserID).Exec(ctx); err != nil {
			return 0, fosite.ErrServerError.WithWrap(err)
		}
		return row.UserID, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, fosite.ErrServerError.WithWrap(fmt.Errorf("oauth: read enterprise identity: %w", err))
	}
	email := strings.ToLower(strings.TrimSpace(claims.Email))
	if email == "" || !claims.emailVerified() {
		return 0, errNoLinkedAccount
	}
	if !idp.vouchesFor(email) {
		return 0, errForeignEmailDomain
	}
	var userID int64
	err = s.store.db.DB.NewSelect().Table("users").Column("id").
		Where("email = ? AND email_verified_at IS NOT NULL", email).
		Where("NOT EXISTS (SELECT 1 FROM oauth_enterprise_identities AS o WHERE o.user_id = users.id AND o.issuer = ?)", claims.Issuer).
		Scan(ctx, &userID)
	if errors.Is(err, sql.ErrNoRows) {
		// A redemption of the same subject racing this one may have just
		// linked it (and so hidden the account from the query above).
		if err := s.store.db.DB.NewSelect().Model(&row).Where("id = ?", id).Scan(ctx); err == nil {
			return row.UserID, nil
		}
		return 0, errNoLinkedAccount
	}
	if err != nil {
		return 0, fosite.ErrServerError.WithWrap(fmt.Errorf("oauth: find account by email: %w", err))
	}
	// Two first redemptions racing: one insert wins, both read it back.
	// The unique (user_id, issuer) index keeps a second subject of the
	// issuer from linking the same account at the same moment.
	if _, err := s.store.db.DB.NewInsert().Model(&enterpriseIdentityRow{
		ID: id, UserID: userID, Issuer: claims.Issuer, Subject: claims.Subject, CreatedAt: now, LastUsedAt: now,
	}).On("CONFLICT DO NOTHING").Returning("NULL").Exec(ctx); err != nil {
		return 0, fosite.ErrServerError.WithWrap(fmt.Errorf("oauth: link enterprise identity: %w", err))
	}
	err = s.store.db.DB.NewSelect().Model(&row).Where("id = ?", id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errNoLinkedAccount
	}
	if err != nil {
		return 0, fosite.ErrServerError.WithWrap(fmt.Errorf("oauth: read enterprise identity: %w", err))
	}
	s.opts.Logger.InfoContext(ctx, "oauth: enterprise identity linked by verified email", "issuer", claims.Issuer, "user", row.UserID)
	return row.UserID, nil
}

// EnterpriseIdentity is an IdP subject linked to an account.
type EnterpriseIdentity struct {
	Issuer     string    `json:"issuer"`
	Subject    string    `json:"subject"`
	CreatedAt  time.Time `json:"createdAt"`
	LastUsedAt time.Time `json:"lastUsedAt"`
}

// EnterpriseIdentities lists the IdP subjects linked to a user (internal
// id), oldest first.
func (s *Server) EnterpriseIdentities(ctx context.Context, userID int64) ([]EnterpriseIdentity, error) {
	var rows []enterpriseIdentityRow
	if err := s.store.db.Reader.NewSelect().Model(&rows).Where("user_id = ?", userID).
		OrderExpr("created_at, id").Scan(ctx); err != nil {
		return nil, fmt.Errorf("oauth: list enterprise identities: %w", err)
	}
	out := make([]EnterpriseIdentity, 0, len(rows))
	for _, r := range rows {
		out = append(out, EnterpriseIdentity{Issuer: r.Issuer, Subject: r.Subject, CreatedAt: r.CreatedAt, LastUsedAt: r.LastUsedAt})
	}
	return out, nil
}

// jwksResponse is a JSON Web Key Set, read key by key so one key of an
// unknown type does not hide the others.
type jwksResponse struct {
	Keys []json.RawMessage `json:"keys"`
}

func parseJWKS(body []byte) ([]jose.JSONWebKey, error) {
	var set jwksResponse
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	var out []jose.JSONWebKey
	for _, raw := range set.Keys {
		var k jose.JSONWebKey
		if k.UnmarshalJSON(raw) != nil || !k.Valid() || !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
			continue
		}
		out = append(out, k)
		if len(out) == idpJWKSMaxKeys {
			break
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the key set holds no public signing key")
	}
	return out, nil
}

// getJSON fetches url with client.
func getJSON(ctx context.Context, client *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	return egress.ReadAll(resp)
}
