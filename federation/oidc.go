package federation

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v3"
	"github.com/go-jose/go-jose/v3/jwt"
	"golang.org/x/oauth2"
)

// OpenID Connect relying party: discovery, the provider's key set, and ID
// token verification, with go-jose v3 (the JOSE library fosite already
// links).

// scopeOpenID is the scope that makes an OAuth 2 request an OpenID
// Connect one.
const scopeOpenID = "openid"

// maxProviderBody bounds what is read from a provider's discovery,
// key set and userinfo answers.
const maxProviderBody = 1 << 20

// nbfLeeway is the clock skew allowed on an ID token's nbf.
const nbfLeeway = 5 * time.Minute

// signingAlgs are the ID token signing algorithms accepted: asymmetric
// only. "none" and the HMAC ones never verify here: an HMAC "signature"
// keyed with the provider's public key could be made by anyone.
var signingAlgs = []string{
	string(jose.RS256), string(jose.RS384), string(jose.RS512),
	string(jose.ES256), string(jose.ES384), string(jose.ES512),
	string(jose.PS256), string(jose.PS384), string(jose.PS512),
	string(jose.EdDSA),
}

// Google's ID tokens may name their issuer without the scheme.
const (
	googleIssuer         = "https://accounts.google.com"
	googleIssuerNoScheme = "accounts.google.com"
)

// discovery is the part of an OpenID provider's metadata used here.
type discovery struct {
	Issuer      string   `json:"issuer"`
	AuthURL     string   `json:"authorization_endpoint"`
	TokenURL    string   `json:"token_endpoint"`
	JWKSURL     string   `json:"jwks_uri"`
	UserInfoURL string   `json:"userinfo_endpoint"`
	Algs        []string `json:"id_token_signing_alg_values_supported"`
	// ISSParam: the provider's authorization responses carry iss (RFC 9207).
	ISSParam bool `json:"authorization_response_iss_parameter_supported"`
}

// openIDProvider is a discovered OpenID provider.
type openIDProvider struct {
	client *http.Client
	md     discovery
	algs   []string // ID token algorithms accepted from this provider

	mu   sync.Mutex // held while fetching: one fetch at a time
	keys []jose.JSONWebKey
}

// getBody GETs u with client and returns its body, bounded, when the
// answer is 200.
func getBody(ctx context.Context, client *http.Client, u, accept string) (string, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("Accept", accept)
	if req.URL.Scheme == "https" {
		// What was asked over HTTPS is answered over HTTPS: a redirect to
		// plain HTTP would let anyone on the path answer (a key set that
		// verifies any ID token they write).
		c := *client
		c.CheckRedirect = func(r *http.Request, via []*http.Request) error {
			if r.URL.Scheme != "https" {
				return fmt.Errorf("a redirect from https to %s", r.URL.Scheme)
			}
			if client.CheckRedirect != nil {
				return client.CheckRedirect(r, via)
			}
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return nil
		}
		client = &c
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProviderBody+1))
	if err != nil {
		return "", nil, err
	}
	if len(body) > maxProviderBody {
		return "", nil, fmt.Errorf("the answer of %s is over %d bytes", u, maxProviderBody)
	}
	if resp.StatusCode != http.StatusOK {
		return "", nil, fmt.Errorf("%s answered %d", u, resp.StatusCode)
	}
	return resp.Header.Get("Content-Type"), body, nil
}

// discover reads issuer's metadata, which must name issuer exactly.
func discover(ctx context.Context, client *http.Client, issuer string) (*openIDProvider, error) {
	_, body, err := getBody(ctx, client, strings.TrimSuffix(issuer, "/")+"/.well-known/openid-configuration", "application/json")
	if err != nil {
		return nil, err
	}
	var md discovery
	if err := json.Unmarshal(body, &md); err != nil {
		return nil, fmt.Errorf("the discovery document is not JSON: %w", err)
	}
	switch {
	case md.Issuer != issuer:
		return nil, fmt.Errorf("the discovery document names the issuer %q, not %q", md.Issuer, issuer)
	case md.AuthURL == "" || md.TokenURL == "" || md.JWKSURL == "":
		return nil, errors.New("the discovery document lacks the authorization, token or key set endpoint")
	}
	// An issuer on HTTPS keeps its endpoints on HTTPS: a key set fetched
	// over plain HTTP could be replaced by anyone on the path, and with
	// it every ID token forged (go-oidc did not check this either).
	if strings.HasPrefix(issuer, "https://") {
		for _, e := range []string{md.AuthURL, md.TokenURL, md.JWKSURL, md.UserInfoURL} {
			if u, err := url.Parse(e); e != "" && (err != nil || u.Scheme != "https" || u.Host == "") {
				return nil, fmt.Errorf("the discovery document names %q, not an https URL", e)
			}
		}
	}
	p := &openIDProvider{client: client, md: md}
	for _, a := range md.Algs {
		if slices.Contains(signingAlgs, a) && !slices.Contains(p.algs, a) {
			p.algs = append(p.algs, a)
		}
	}
	if len(p.algs) == 0 {
		p.algs = []string{string(jose.RS256)} // the one every provider must support
	}
	return p, nil
}

func (p *openIDProvider) endpoint() oauth2.Endpoint {
	return oauth2.Endpoint{AuthURL: p.md.AuthURL, TokenURL: p.md.TokenURL}
}

// fetchKeys reads the provider's key set: its public signing keys.
func (p *openIDProvider) fetchKeys(ctx context.Context) ([]jose.JSONWebKey, error) {
	_, body, err := getBody(ctx, p.client, p.md.JWKSURL, "application/json, application/jwk-set+json")
	if err != nil {
		return nil, err
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("the key set is not JSON: %w", err)
	}
	var out []jose.JSONWebKey
	for _, raw := range set.Keys {
		// Key by key: one of a type go-jose does not know hides no other.
		var k jose.JSONWebKey
		if k.UnmarshalJSON(raw) != nil || !k.Valid() || !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
			continue
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, errors.New("the key set holds no public signing key")
	}
	return out, nil
}

// verifySignature checks a compact JWS against the provider's keys,
// fetching them again once when none of those held verifies it (the
// provider rotated its keys), and returns its payload and algorithm.
func (p *openIDProvider) verifySignature(ctx context.Context, raw string) ([]byte, string, error) {
	// Only the compact serialization, whose headers are all signed.
	if strings.Count(raw, ".") != 2 || strings.HasPrefix(strings.TrimSpace(raw), "{") {
		return nil, "", errors.New("not a signed JWT in compact serialization")
	}
	jws, err := jose.ParseSigned(raw)
	if err != nil {
		return nil, "", fmt.Errorf("malformed JWT: %v", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, "", errors.New("a JWT needs exactly one signature")
	}
	hdr := jws.Signatures[0].Protected
	if !slices.Contains(p.algs, hdr.Algorithm) {
		return nil, "", fmt.Errorf("the signing algorithm %q is not accepted", hdr.Algorithm)
	}
	try := func(keys []jose.JSONWebKey) []byte {
		for _, k := range keys {
			if (hdr.KeyID != "" && k.KeyID != hdr.KeyID) || (k.Algorithm != "" && k.Algorithm != hdr.Algorithm) {
				continue
			}
			if payload, err := jws.Verify(k.Key); err == nil {
				return payload
			}
		}
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if payload := try(p.keys); payload != nil {
		return payload, hdr.Algorithm, nil
	}
	keys, err := p.fetchKeys(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("the provider's keys: %v", err)
	}
	p.keys = keys
	if payload := try(keys); payload != nil {
		return payload, hdr.Algorithm, nil
	}
	return nil, "", errors.New("the signature does not verify with the provider's keys")
}

// idToken is a verified ID token's claims.
type idToken struct {
	Issuer          string           `json:"iss"`
	Subject         string           `json:"sub"`
	Audience        jwt.Audience     `json:"aud"`
	Expiry          *jwt.NumericDate `json:"exp"`
	NotBefore       *jwt.NumericDate `json:"nbf"`
	Nonce           string           `json:"nonce"`
	AccessTokenHash string           `json:"at_hash"`
	AZP             *string          `json:"azp"`
	Email           string           `json:"email"`
	EmailVerified   any              `json:"email_verified"`
	AMR             []string         `json:"amr"`

	alg string
}

// verifyIDToken checks an ID token's signature, issuer, audience (that it
// includes clientID) and lifetime at now.
func (p *openIDProvider) verifyIDToken(ctx context.Context, raw, clientID string, now time.Time) (*idToken, error) {
	payload, alg, err := p.verifySignature(ctx, raw)
	if err != nil {
		return nil, err
	}
	var t idToken
	if err := json.Unmarshal(payload, &t); err != nil {
		return nil, fmt.Errorf("the ID token's claims could not be read: %v", err)
	}
	t.alg = alg
	switch {
	case t.Issuer != p.md.Issuer && !(p.md.Issuer == googleIssuer && t.Issuer == googleIssuerNoScheme):
		return nil, fmt.Errorf("the ID token was issued by %q, not %q", t.Issuer, p.md.Issuer)
	case !t.Audience.Contains(clientID):
		return nil, fmt.Errorf("the ID token's audience %q does not include this client", []string(t.Audience))
	case t.Expiry == nil || t.Expiry.Time().Before(now):
		return nil, errors.New("the ID token has expired")
	case t.NotBefore != nil && now.Add(nbfLeeway).Before(t.NotBefore.Time()):
		return nil, errors.New("the ID token is not valid yet")
	case t.Subject == "":
		return nil, errors.New("the ID token names no subject")
	}
	// One issuer, one name: identities are keyed by issuer and subject,
	// and Google's tokens name theirs with or without the scheme.
	t.Issuer = p.md.Issuer
	return &t, nil
}

// verifyAccessToken checks the ID token's at_hash against accessToken
// (OpenID Connect Core 3.1.3.8).
func (t *idToken) verifyAccessToken(accessToken string) error {
	var sum []byte
	switch jose.SignatureAlgorithm(t.alg) {
	case jose.RS256, jose.ES256, jose.PS256:
		s := sha256.Sum256([]byte(accessToken))
		sum = s[:]
	case jose.RS384, jose.ES384, jose.PS384:
		s := sha512.Sum384([]byte(accessToken))
		sum = s[:]
	case jose.RS512, jose.ES512, jose.PS512, jose.EdDSA:
		s := sha512.Sum512([]byte(accessToken))
		sum = s[:]
	default:
		return fmt.Errorf("no at_hash for the algorithm %q", t.alg)
	}
	if base64.RawURLEncoding.EncodeToString(sum[:len(sum)/2]) != t.AccessTokenHash {
		return errors.New("the ID token's at_hash does not match the access token")
	}
	return nil
}

// userInfo is what the userinfo endpoint says.
type userInfo struct {
	Subject       string `json:"sub"`
	Email         string `json:"email"`
	EmailVerified any    `json:"email_verified"`
}

// userInfo asks the provider's userinfo endpoint with tok; a signed
// (application/jwt) answer must verify with the provider's keys.
func (p *openIDProvider) userInfo(ctx context.Context, tok *oauth2.Token) (*userInfo, error) {
	if p.md.UserInfoURL == "" {
		return nil, errors.New("the provider has no userinfo endpoint")
	}
	client := oauth2.NewClient(ctx, oauth2.StaticTokenSource(tok))
	ct, body, err := getBody(ctx, client, p.md.UserInfoURL, "application/json, application/jwt")
	if err != nil {
		return nil, err
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/jwt" {
		if body, _, err = p.verifySignature(ctx, strings.TrimSpace(string(body))); err != nil {
			return nil, fmt.Errorf("userinfo: %v", err)
		}
	}
	var info userInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("userinfo is not JSON: %v", err)
	}
	return &info, nil
}
