package integrations_test

import (
	"fmt"

	"github.com/enclave-mcp/enclave/integrations"
)

// An operator's provider, as the --integration flag gives it: the
// endpoints, the client, the scopes asked for and the only host its
// tokens are sent to.
func ExampleParseProviderFlag() {
	p, err := integrations.ParseProviderFlag("github=auth-url=https://github.com/login/oauth/authorize," +
		"token-url=https://github.com/login/oauth/access_token,client-id=Iv1.abc," +
		"client-secret-file=/run/secrets/github,scopes=repo read:user,hosts=api.github.com")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Name, p.ClientID, p.Scopes, p.APIHosts)
	// Output: github Iv1.abc [repo read:user] [api.github.com]
}
