package oauth_test

import (
	"fmt"

	"github.com/enclave-mcp/enclave/oauth"
)

// An operator trusts an enterprise IdP from its flag form; embedders set
// Options.Enterprise with the same values.
func ExampleParseTrustedIdP() {
	idp, err := oauth.ParseTrustedIdP("issuer=https://corp.example,jwks-url=https://corp.example/oauth/keys,client-ids=agent-1 agent-2,email-domains=corp.example")
	if err != nil {
		fmt.Println(err)
		return
	}
	opts := oauth.Options{Enterprise: oauth.EnterpriseOptions{IdPs: []oauth.TrustedIdP{idp}}}
	fmt.Println(opts.Enterprise.IdPs[0].Issuer, opts.Enterprise.IdPs[0].ClientIDs, opts.Enterprise.IdPs[0].EmailDomains)

	_, err = oauth.ParseTrustedIdP("issuer=http://corp.example,jwks-url=https://corp.example/oauth/keys")
	fmt.Println(err)
	// Output:
	// https://corp.example [agent-1 agent-2] [corp.example]
	// trusted IdP issuer "http://corp.example": want an https URL without query or fragment
}
