package oauth

import (
	"encoding/json"
	"net/http"
	"slices"
)

// ASMetadata is the RFC 8414 authorization server metadata document.
type ASMetadata struct {
	Issuer                                 string   `json:"issuer"`
	AuthorizationEndpoint                  string   `json:"authorization_endpoint"`
	TokenEndpoint                          string   `json:"token_endpoint"`
	RegistrationEndpoint                   string   `json:"registration_endpoint"`
	RevocationEndpoint                     string   `json:"revocation_endpoint"`
	ResponseTypesSupported                 []string `json:"response_types_supported"`
	ResponseModesSupported                 []string `json:"response_modes_supported"`
	GrantTypesSupported                    []string `json:"grant_types_supported"`
	CodeChallengeMethodsSupported          []string `json:"code_challenge_methods_supported"`
	TokenEndpointAuthMethodsSupported      []string `json:"token_endpoint_auth_methods_supported"`
	RevocationEndpointAuthMethodsSupported []string `json:"revocation_endpoint_auth_methods_supported"`
	ScopesSupported                        []string `json:"scopes_supported"`
	AuthorizationResponseISSSupported      bool     `json:"authorization_response_iss_parameter_supported"`
	// TokenEndpointAuthSigningAlgValuesSupported: the algorithms of
	// private_key_jwt assertions (clients with a metadata document).
	TokenEndpointAuthSigningAlgValuesSupported []string `json:"token_endpoint_auth_signing_alg_values_supported,omitempty"`
	// ClientIDMetadataDocumentSupported: a client_id may be the https URL
	// of the client's metadata document.
	ClientIDMetadataDocumentSupported bool `json:"client_id_metadata_document_supported,omitempty"`
}

// ResourceMetadata is the RFC 9728 protected resource metadata document.
type ResourceMetadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	ScopesSupported        []string `json:"scopes_supported"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
}

var authMethods = []string{"none", "client_secret_basic", "client_secret_post"}

// Metadata returns the authorization server metadata.
func (s *Server) Metadata() ASMetadata {
	methods := authMethods
	var algs []string
	if s.metadata != nil {
		// Only a client with a metadata document may use private_key_jwt.
		methods = append(slices.Clone(authMethods), "private_key_jwt")
		algs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}
	}
	grants := []string{"authorization_code", "refresh_token"}
	if s.enterpriseEnabled() {
		grants = append(grants, GrantTypeJWTBearer)
	}
	return ASMetadata{
		Issuer:                                     s.issuer,
		AuthorizationEndpoint:                      s.issuer + PathAuthorize,
		TokenEndpoint:                              s.issuer + PathToken,
		RegistrationEndpoint:                       s.issuer + PathRegister,
		RevocationEndpoint:                         s.issuer + PathRevoke,
		ResponseTypesSupported:                     []string{"code"},
		ResponseModesSupported:                     []string{"query"},
		GrantTypesSupported:                        grants,
		CodeChallengeMethodsSupported:              []string{"S256"},
		TokenEndpointAuthMethodsSupported:          methods,
		RevocationEndpointAuthMethodsSupported:     methods,
		TokenEndpointAuthSigningAlgValuesSupported: algs,
		ScopesSupported:                            s.opts.Scopes,
		AuthorizationResponseISSSupported:          true,
		ClientIDMetadataDocumentSupported:          s.metadata != nil,
	}
}

// ResourceMetadata returns the MCP resource's metadata.
func (s *Server) ResourceMetadata() ResourceMetadata {
	return ResourceMetadata{
		Resource:               s.resource,
		AuthorizationServers:   []string{s.issuer},
		ScopesSupported:        s.opts.Scopes,
		BearerMethodsSupported: []string{"header"},
	}
}

// ResourceMetadataURL is the URL a WWW-Authenticate challenge from /mcp
// points to (RFC 9728 resource_metadata).
func (s *Server) ResourceMetadataURL() string {
	return s.issuer + PathResourceMetadata + ResourcePath
}

// writeMetadata serves a public, cacheable JSON document that browser-based
// clients may read from any origin.
func writeMetadata(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) serveASMetadata(w http.ResponseWriter, _ *http.Request) {
	writeMetadata(w, s.Metadata())
}

func (s *Server) serveResourceMetadata(w http.ResponseWriter, _ *http.Request) {
	writeMetadata(w, s.ResourceMetadata())
}
