package federation_test

import (
	"fmt"

	"github.com/enclave-mcp/enclave/federation"
)

// Providers are configured by the operator: a company's OpenID Connect
// provider by its issuer, and the named presets. The provider redirects
// back to BaseURL + CallbackPath(name), the redirect URI to register there.
func Example() {
	corp := federation.Provider{Name: "corp", Label: "Corp SSO", Kind: federation.KindOIDC,
		Issuer: "https://sso.corp.example", ClientID: "enclave", ClientSecret: "…", TrustMFA: true}
	for _, p := range []federation.Provider{
		corp,
		federation.Google("id.apps.googleusercontent.com", "…"),
		federation.Microsoft("contoso.onmicrosoft.com", "app-id", "…"),
		federation.GitHub("Iv1.abc", "…"),
	} {
		fmt.Printf("%-9s %-6s %s\n", p.Name, p.Kind, federation.CallbackPath(p.Name))
	}
	fmt.Println(federation.Microsoft("contoso.onmicrosoft.com", "", "").Issuer)
	// Output:
	// corp      oidc   /auth/external/corp/callback
	// google    oidc   /auth/external/google/callback
	// microsoft oidc   /auth/external/microsoft/callback
	// github    github /auth/external/github/callback
	// https://login.microsoftonline.com/contoso.onmicrosoft.com/v2.0
}
