package oauth

import (
	"slices"
	"time"

	"github.com/go-jose/go-jose/v3"
	"github.com/ory/fosite"
	"github.com/ory/fosite/token/jwt"
)

// Client is a registered OAuth client.
type Client struct {
	ID           string
	Name         string
	RedirectURIs []string
	GrantTypes   []string
	Scopes       []string
	// AuthMethod is the token endpoint auth method: none (public clients),
	// client_secret_basic or client_secret_post.
	AuthMethod string
	CreatedAt  time.Time
	LastUsedAt time.Time
	// MetadataHost is the host of the client's metadata document when
	// its ID is that document's URL (a person can tell who publishes
	// it); empty for a client from dynamic registration, whose name and
	// URIs nobody vouches for.
	MetadataHost string

	secretHash []byte
	audience   []string
	// jwksURI and signingAlg: a private_key_jwt client's keys and the
	// algorithm its assertions use (from its metadata document).
	jwksURI, signingAlg string
}

var (
	_ fosite.Client              = (*Client)(nil)
	_ fosite.OpenIDConnectClient = (*Client)(nil)
)

// GetID implements fosite.Client.
func (c *Client) GetID() string { return c.ID }

// GetHashedSecret implements fosite.Client.
func (c *Client) GetHashedSecret() []byte { return c.secretHash }

// GetRedirectURIs implements fosite.Client.
func (c *Client) GetRedirectURIs() []string { return c.RedirectURIs }

// GetGrantTypes implements fosite.Client.
func (c *Client) GetGrantTypes() fosite.Arguments { return c.GrantTypes }

// GetResponseTypes implements fosite.Client: only the code flow exists.
func (c *Client) GetResponseTypes() fosite.Arguments { return fosite.Arguments{"code"} }

// GetScopes implements fosite.Client: the scopes the client registered,
// and ScopeAdmin, which every client may ask for (clients registered
// before it existed included): a person decides whether to grant it; and
// the OpenID Connect scopes (openid, email), which every client may ask for.
func (c *Client) GetScopes() fosite.Arguments {
	scopes := slices.Clone(c.Scopes)
	for _, sc := range append([]string{ScopeAdmin}, openIDScopes...) {
		if !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	return scopes
}

// IsPublic implements fosite.Client.
func (c *Client) IsPublic() bool { return c.AuthMethod == "none" }

// GetAudience implements fosite.Client: the MCP resource.
func (c *Client) GetAudience() fosite.Arguments { return c.audience }

// GetRequestURIs implements fosite.OpenIDConnectClient (unused).
func (c *Client) GetRequestURIs() []string { return nil }

// GetJSONWebKeys implements fosite.OpenIDConnectClient (unused).
func (c *Client) GetJSONWebKeys() *jose.JSONWebKeySet { return nil }

// GetJSONWebKeysURI implements fosite.OpenIDConnectClient: where a
// private_key_jwt client publishes its keys.
func (c *Client) GetJSONWebKeysURI() string { return c.jwksURI }

// GetRequestObjectSigningAlgorithm implements fosite.OpenIDConnectClient (unused).
func (c *Client) GetRequestObjectSigningAlgorithm() string { return "" }

// GetTokenEndpointAuthMethod implements fosite.OpenIDConnectClient.
func (c *Client) GetTokenEndpointAuthMethod() string { return c.AuthMethod }

// GetTokenEndpointAuthSigningAlgorithm implements fosite.OpenIDConnectClient:
// the algorithm of a private_key_jwt client's assertions (its document's
// token_endpoint_auth_signing_alg, RS256 by default).
func (c *Client) GetTokenEndpointAuthSigningAlgorithm() string {
	if c.signingAlg == "" {
		return "RS256"
	}
	return c.signingAlg
}

// session is what fosite carries through a flow and what token rows keep:
// the internal and stable ids of the user who approved, and the expiry of
// each token.
type session struct {
	UserID    int64                          `json:"uid"`
	Subject   string                         `json:"sub"`
	ExpiresAt map[fosite.TokenType]time.Time `json:"exp,omitempty"`

	// The ID token being issued (openid.Session, oidc.go); never stored.
	idClaims  *jwt.IDTokenClaims
	idHeaders *jwt.Headers
}

var _ fosite.Session = (*session)(nil)

func (s *session) SetExpiresAt(key fosite.TokenType, exp time.Time) {
	if s.ExpiresAt == nil {
		s.ExpiresAt = make(map[fosite.TokenType]time.Time)
	}
	s.ExpiresAt[key] = exp
}

func (s *session) GetExpiresAt(key fosite.TokenType) time.Time { return s.ExpiresAt[key] }
func (s *session) GetUsername() string                         { return "" }
func (s *session) GetSubject() string                          { return s.Subject }

func (s *session) Clone() fosite.Session {
	if s == nil {
		return nil
	}
	c := *s
	c.idClaims, c.idHeaders = nil, nil
	c.ExpiresAt = make(map[fosite.TokenType]time.Time, len(s.ExpiresAt))
	for k, v := range s.ExpiresAt {
		c.ExpiresAt[k] = v
	}
	return &c
}
