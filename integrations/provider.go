package integrations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/capabilities/secrets"
)

// Provider is an OAuth authorization server a person may connect an
// account at, as the operator configured it.
type Provider struct {
	// Name identifies the provider: 1-32 lowercase letters, digits, '-'
	// or '_', starting with a letter. It is also the default name of a
	// connection to it.
	Name string `json:"name"`
	// Issuer, when set, is the provider's issuer URL: the endpoints not
	// given below are discovered from its OpenID Connect or RFC 8414
	// metadata the first time they are needed.
	Issuer string `json:"issuer,omitempty"`
	// AuthURL and TokenURL are the authorization and token endpoints;
	// RevokeURL the RFC 7009 revocation endpoint (optional).
	AuthURL   string `json:"authUrl,omitempty"`
	TokenURL  string `json:"tokenUrl,omitempty"`
	RevokeURL string `json:"revokeUrl,omitempty"`
	// ClientID is enclave's client at the provider; ClientSecret its
	// secret, read from ClientSecretFile when that is set (a public
	// client has neither secret nor file).
	ClientID         string `json:"clientId"`
	ClientSecret     string `json:"-"`
	ClientSecretFile string `json:"clientSecretFile,omitempty"`
	// Scopes are asked for at every connection.
	Scopes []string `json:"scopes,omitempty"`
	// APIHosts are the only hosts a connection's token is ever sent to
	// (patterns as secrets.NormalizeHost reads them: "api.example.com",
	// "*.example.com", a port after ':'). Without any, the token is sent
	// nowhere.
	APIHosts []string `json:"apiHosts,omitempty"`
}

var providerName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// ParseProviderFlag reads one --integration flag value:
//
//	NAME=key=value,key=value,...
//
// with the keys issuer, auth-url, token-url, revoke-url, client-id,
// client-secret-file, scopes and hosts; scopes and hosts hold
// space-separated lists. For example
//
//	github=auth-url=https://github.com/login/oauth/authorize,token-url=https://github.com/login/oauth/access_token,client-id=Iv1.abc,client-secret-file=/run/secrets/github,scopes=repo read:user,hosts=api.github.com
func ParseProviderFlag(v string) (Provider, error) {
	name, rest, ok := strings.Cut(v, "=")
	if !ok {
		return Provider{}, fmt.Errorf("integrations: --integration %q: want NAME=key=value,...", v)
	}
	p := Provider{Name: strings.TrimSpace(name)}
	for kv := range strings.SplitSeq(rest, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return Provider{}, fmt.Errorf("integrations: --integration %s: %q is not key=value", p.Name, kv)
		}
		val = strings.TrimSpace(val)
		switch strings.TrimSpace(k) {
		case "issuer":
			p.Issuer = val
		case "auth-url":
			p.AuthURL = val
		case "token-url":
			p.TokenURL = val
		case "revoke-url":
			p.RevokeURL = val
		case "client-id":
			p.ClientID = val
		case "client-secret-file":
			p.ClientSecretFile = val
		case "scopes":
			p.Scopes = strings.Fields(val)
		case "hosts":
			p.APIHosts = strings.Fields(val)
		default:
			return Provider{}, fmt.Errorf("integrations: --integration %s: unknown key %q (want issuer, auth-url, token-url, revoke-url, client-id, client-secret-file, scopes or hosts)", p.Name, k)
		}
	}
	return p, nil
}

// LoadProviders reads a JSON file holding an array of providers (the
// fields of Provider, camelCase).
func LoadProviders(path string) ([]Provider, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("integrations: %w", err)
	}
	var ps []Provider
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ps); err != nil {
		return nil, fmt.Errorf("integrations: %s: %w", path, err)
	}
	return ps, nil
}

// prepare checks p, reads its client secret file and normalizes its hosts.
func (p Provider) prepare() (Provider, error) {
	if !providerName.MatchString(p.Name) {
		return p, fmt.Errorf("integrations: provider name %q: want 1-32 lowercase letters, digits, '-' or '_', starting with a letter", p.Name)
	}
	if p.ClientID == "" {
		return p, fmt.Errorf("integrations: provider %s: a client id is required", p.Name)
	}
	if p.Issuer == "" && (p.AuthURL == "" || p.TokenURL == "") {
		return p, fmt.Errorf("integrations: provider %s: give an issuer, or both the authorization and the token URL", p.Name)
	}
	for _, u := range []string{p.Issuer, p.AuthURL, p.TokenURL, p.RevokeURL} {
		if u == "" {
			continue
		}
		if err := endpointURL(u); err != nil {
			return p, fmt.Errorf("integrations: provider %s: %w", p.Name, err)
		}
	}
	if p.ClientSecretFile != "" {
		b, err := os.ReadFile(p.ClientSecretFile)
		if err != nil {
			return p, fmt.Errorf("integrations: provider %s: client secret: %w", p.Name, err)
		}
		p.ClientSecret = strings.TrimSpace(string(b))
	}
	hosts, err := secrets.NormalizeHosts(p.APIHosts)
	if err != nil {
		return p, fmt.Errorf("integrations: provider %s: hosts: %w", p.Name, err)
	}
	p.APIHosts = hosts
	p.Scopes = slices.Clone(p.Scopes)
	return p, nil
}

// endpointURL accepts an https URL, or http to a loopback host (a
// provider on the operator's own machine).
func endpointURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("endpoint %q is not an absolute URL without user info or fragment", raw)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopback(u.Hostname()) {
			return nil
		}
	}
	return fmt.Errorf("endpoint %q must be https (http only to a loopback host)", raw)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// endpoints are a provider's resolved endpoints.
type endpoints struct {
	auth, token, revoke string
}

// providerState is a configured provider and its discovered endpoints.
type providerState struct {
	Provider
	// hc talks to the provider: the operator's client for configured
	// providers, the egress client for a person's own app.
	hc *http.Client
	// appID is the row of a person's own app (0: the operator's).
	appID int64
	mu    sync.Mutex
	eps   *endpoints
}

// MaxMetadataBytes bounds a discovery document and a token response.
const MaxMetadataBytes = 256 << 10

// resolve returns the provider's endpoints, discovering what is missing
// from its issuer's metadata the first time.
func (p *providerState) resolve(ctx context.Context, client *http.Client) (endpoints, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.eps != nil {
		return *p.eps, nil
	}
	eps := endpoints{auth: p.AuthURL, token: p.TokenURL, revoke: p.RevokeURL}
	if p.Issuer != "" && (eps.auth == "" || eps.token == "" || eps.revoke == "") {
		md, err := discover(ctx, client, p.Issuer)
		if err != nil {
			if eps.auth == "" || eps.token == "" {
				return endpoints{}, err
			}
		} else {
			eps.auth = cmpOr(eps.auth, md.AuthorizationEndpoint)
			eps.token = cmpOr(eps.token, md.TokenEndpoint)
			eps.revoke = cmpOr(eps.revoke, md.RevocationEndpoint)
		}
	}
	for _, u := range []string{eps.auth, eps.token} {
		if err := endpointURL(u); err != nil {
			return endpoints{}, fmt.Errorf("integrations: provider %s: %w", p.Name, err)
		}
	}
	if eps.revoke != "" && endpointURL(eps.revoke) != nil {
		eps.revoke = "" // a revocation endpoint we will not call
	}
	p.eps = &eps
	return eps, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

type metadata struct {
	Issuer                string `json:"issuer"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
	RevocationEndpoint    string `json:"revocation_endpoint"`
}

// discover reads the issuer's OpenID Connect metadata, else its RFC 8414
// metadata, and checks it names the same issuer.
func discover(ctx context.Context, client *http.Client, issuer string) (metadata, error) {
	base := strings.TrimSuffix(issuer, "/")
	var last error
	for _, path := range []string{"/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"} {
		var md metadata
		if err := getJSON(ctx, client, base+path, &md); err != nil {
			last = err
			continue
		}
		if strings.TrimSuffix(md.Issuer, "/") != base {
			last = fmt.Errorf("the metadata at %s names another issuer", base+path)
			continue
		}
		return md, nil
	}
	return metadata{}, fmt.Errorf("integrations: discover %s: %w", issuer, last)
}

func getJSON(ctx context.Context, client *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxMetadataBytes+1))
	if err != nil {
		return err
	}
	if len(b) > MaxMetadataBytes {
		return errors.New("metadata too large")
	}
	return json.Unmarshal(b, v)
}

// config is the oauth2 configuration of p for the given callback.
func (p *providerState) config(eps endpoints, redirect string) *oauth2.Config {
	style := oauth2.AuthStyleInHeader
	if p.ClientSecret == "" {
		style = oauth2.AuthStyleInParams
	}
	return &oauth2.Config{
		ClientID: p.ClientID, ClientSecret: p.ClientSecret, RedirectURL: redirect, Scopes: p.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: eps.auth, TokenURL: eps.token, AuthStyle: style},
	}
}

// DefaultHTTPTimeout bounds every exchange with a provider.
const DefaultHTTPTimeout = 15 * time.Second

// boundedTransport caps response bodies from providers.
type boundedTransport struct{ next http.RoundTripper }

func (t boundedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: MaxMetadataBytes}
	return resp, nil
}

type limitedBody struct {
	io.ReadCloser
	left int64
}

var errBodyTooLarge = errors.New("integrations: the provider's answer is too large")

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, err := b.ReadCloser.Read(one[:]); n == 0 && err != nil {
			return 0, err // the body ended exactly at the bound
		}
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
