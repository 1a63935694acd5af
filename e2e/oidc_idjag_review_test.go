package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/oauth"
)

// Review of #29 (ID-JAG). A trusted IdP vouches for the addresses of its
// own organisation only: an assertion carrying a verified email of a
// domain the operator did not give the IdP never links (and so never
// takes over) an existing account, the operator's admin included. An IdP
// configured with no email domains links by subject only.
func TestOIDCIDJAGReviewEmailDomainTakeover(t *testing.T) {
	idp := newIDJAGIdP(t)
	cfg := idjagConfig(idp)
	cfg.OAuth.Enterprise.IdPs[0].EmailDomains = nil // vouches for no domain
	s := enclavetest.Start(t, enclavetest.Options{Config: cfg})
	ctx := t.Context()
	admin := s.CreateUser(t, "olga") // olga@example.com, an admin
	if _, err := s.Accounts().GrantAdminAsOperator(ctx, admin.ID); err != nil {
		t.Fatal(err)
	}
	clientID := idjagRegister(t, s, "enterprise agent", "authorization_code", oauth.GrantTypeJWTBearer)
	jag := idp.mint(nil, idp.claims(idjagPerson{Sub: "00u-attacker", Email: admin.Email, Verified: true}, s.URL, s.URL+"/mcp", clientID, "mcp admin"))
	a := idjagRedeem(t, s, clientID, jag)
	if a.Status != http.StatusBadRequest || a.Error != "invalid_grant" || a.AccessToken != "" {
		t.Fatalf("an IdP vouching for no domain linked %s by email: %+v", admin.Email, a)
	}
	if !strings.Contains(a.Description, "domain") {
		t.Errorf("the refusal does not say the email's domain is not the IdP's: %q", a.Description)
	}
	if ids, _ := s.OAuth().EnterpriseIdentities(ctx, admin.ID); len(ids) != 0 {
		t.Fatalf("the admin account was linked to a foreign subject: %+v", ids)
	}

	// An IdP given another domain cannot vouch for example.com either,
	// nor for a look-alike (a subdomain or a suffix).
	for _, domains := range [][]string{{"corp.example"}, {"mple.com"}, {"sub.example.com"}} {
		cfg := idjagConfig(idp)
		cfg.OAuth.Enterprise.IdPs[0].EmailDomains = domains
		s := enclavetest.Start(t, enclavetest.Options{Config: cfg})
		victim := s.CreateUser(t, "victim")
		clientID := idjagRegister(t, s, "enterprise agent", "authorization_code", oauth.GrantTypeJWTBearer)
		a := idjagRedeem(t, s, clientID, idp.mint(nil, idp.claims(idjagPerson{Sub: "00u-x", Email: victim.Email, Verified: true}, s.URL, s.URL+"/mcp", clientID, "mcp")))
		if a.Status != http.StatusBadRequest || a.AccessToken != "" {
			t.Errorf("an IdP of %v linked %s: %+v", domains, victim.Email, a)
		}
	}

	// The IdP given example.com links it (case does not matter).
	cfg = idjagConfig(idp)
	cfg.OAuth.Enterprise.IdPs[0].EmailDomains = []string{"Example.COM"}
	s = enclavetest.Start(t, enclavetest.Options{Config: cfg})
	alice := s.CreateUser(t, "alice")
	clientID = idjagRegister(t, s, "enterprise agent", "authorization_code", oauth.GrantTypeJWTBearer)
	a = idjagRedeem(t, s, clientID, idp.mint(nil, idp.claims(idjagPerson{Sub: "00u-alice", Email: strings.ToUpper(alice.Email), Verified: true}, s.URL, s.URL+"/mcp", clientID, "mcp")))
	if a.Status != http.StatusOK || a.AccessToken == "" {
		t.Fatalf("an IdP of example.com could not link %s: %+v", alice.Email, a)
	}
}
