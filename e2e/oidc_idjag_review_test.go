package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/go-jose/go-jose/v3"
	"github.com/go-jose/go-jose/v3/jwt"

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
	if _, err := s.Accounts().Roles.GrantAdminAsOperator(ctx, admin.ID); err != nil {
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

// Review of #29 (ID-JAG): explicit typing holds only if typ is signed.
// A JWT the IdP signed without typ (an ID token, say, or any other token
// of its own) re-wrapped in the JWS JSON serialization with an unprotected
// header typ oauth-id-jag+jwt must not pass as an ID-JAG: only the compact
// serialization, whose headers are all protected, is accepted.
func TestOIDCIDJAGReviewUnprotectedTyp(t *testing.T) {
	idp := newIDJAGIdP(t)
	s := enclavetest.Start(t, enclavetest.Options{Config: idjagConfig(idp)})
	alice := s.CreateUser(t, "alice")
	clientID := idjagRegister(t, s, "enterprise agent", "authorization_code", oauth.GrantTypeJWTBearer)
	claims := idp.claims(idjagPerson{Sub: "00u-alice", Email: alice.Email, Verified: true}, s.URL, s.URL+"/mcp", clientID, "mcp")

	// Signed by the IdP's key, with no typ in the protected header.
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: idp.key}, (&jose.SignerOptions{}).WithHeader("kid", idp.kid))
	if err != nil {
		t.Fatal(err)
	}
	compact, err := jwt.Signed(signer).Claims(claims).CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	if a := idjagRedeem(t, s, clientID, compact); a.Status != http.StatusBadRequest || a.AccessToken != "" {
		t.Fatalf("a JWT without typ redeemed: %+v", a)
	}
	parts := strings.Split(compact, ".")
	wrapped, _ := json.Marshal(map[string]any{
		"protected": parts[0],
		"header":    map[string]string{"typ": oauth.IDJAGType},
		"payload":   parts[1],
		"signature": parts[2],
	})
	a := idjagRedeem(t, s, clientID, string(wrapped))
	if a.Status != http.StatusBadRequest || a.Error != "invalid_grant" || a.AccessToken != "" {
		t.Fatalf("a JWT without a signed typ redeemed as an ID-JAG through the JSON serialization: %+v", a)
	}
	// The same claims as a proper ID-JAG redeem: the refusal was the typ.
	if a := idjagRedeem(t, s, clientID, idp.mint(nil, claims)); a.Status != http.StatusOK {
		t.Fatalf("the well-typed assertion was refused: %+v", a)
	}
}

// Review of #29 (ID-JAG): the single use of a jti holds across replicas
// (two servers on one database, as behind a load balancer), with
// redemptions of one assertion racing at both: exactly one wins, and a
// later one at either is a replay. The record is a conditional write in
// the shared database, not a per-process cache.
func TestOIDCIDJAGReviewReplayAcrossReplicas(t *testing.T) {
	idp := newIDJAGIdP(t)
	enclavetest.Each(t, enclavetest.Options{Config: idjagConfig(idp)}, func(t *testing.T, s *enclavetest.Server) {
		replica := s.Replica(t)
		alice := s.CreateUser(t, "alice")
		clientID := idjagRegister(t, s, "enterprise agent", "authorization_code", oauth.GrantTypeJWTBearer)
		for round := range 3 {
			jag := idp.mint(nil, idp.claims(idjagPerson{Sub: "00u-alice", Email: alice.Email, Verified: true}, s.URL, s.URL+"/mcp", clientID, "mcp"))
			const n = 8
			statuses := make([]int, n)
			var wg sync.WaitGroup
			for i := range n {
				at := s
				if i%2 == 1 {
					at = replica
				}
				wg.Go(func() { statuses[i] = idjagRedeem(t, at, clientID, jag).Status })
			}
			wg.Wait()
			wins := 0
			for _, st := range statuses {
				switch st {
				case http.StatusOK:
					wins++
				case http.StatusBadRequest:
				default:
					t.Errorf("round %d: a racing redemption answered %d", round, st)
				}
			}
			if wins != 1 {
				t.Fatalf("round %d: %d of %d redemptions of one assertion at two replicas won, want 1 (%v)", round, wins, n, statuses)
			}
			for _, at := range []*enclavetest.Server{s, replica} {
				if a := idjagRedeem(t, at, clientID, jag); a.Status != http.StatusBadRequest || !strings.Contains(a.Description, "already used") {
					t.Fatalf("round %d: a later replay: %+v", round, a)
				}
			}
		}
	})
}

// Review of #29 (ID-JAG): an ID-JAG is for one authorization server. One
// naming this server among others could be redeemed here by any of the
// others it was shown to (as the client: the client_id of a public
// client is no secret), so an aud of more than one value is refused; an
// array of just this server's issuer is fine.
func TestOIDCIDJAGReviewSingleAudience(t *testing.T) {
	idp := newIDJAGIdP(t)
	s := enclavetest.Start(t, enclavetest.Options{Config: idjagConfig(idp)})
	alice := s.CreateUser(t, "alice")
	clientID := idjagRegister(t, s, "enterprise agent", "authorization_code", oauth.GrantTypeJWTBearer)
	person := idjagPerson{Sub: "00u-alice", Email: alice.Email, Verified: true}

	multi := idp.claims(person, s.URL, s.URL+"/mcp", clientID, "mcp")
	multi["aud"] = []string{"https://other-as.example", s.URL}
	a := idjagRedeem(t, s, clientID, idp.mint(nil, multi))
	if a.Status != http.StatusBadRequest || a.Error != "invalid_grant" || !strings.Contains(a.Description, "audience") || a.AccessToken != "" {
		t.Fatalf("an ID-JAG for two authorization servers redeemed: %+v", a)
	}
	single := idp.claims(person, s.URL, s.URL+"/mcp", clientID, "mcp")
	single["aud"] = []string{s.URL}
	if a := idjagRedeem(t, s, clientID, idp.mint(nil, single)); a.Status != http.StatusOK {
		t.Fatalf("an aud array of this server alone was refused: %+v", a)
	}
}
