package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v3"
	"github.com/go-jose/go-jose/v3/jwt"
	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/oauth"
)

// idjagPerson is someone the test IdP knows, by the ID token it issued
// them.
type idjagPerson struct {
	Sub      string
	Email    string
	Verified bool
}

// idjagIdP is a small enterprise identity provider on loopback https: its
// own signing key, a JWKS endpoint, RFC 8414 metadata and a token
// endpoint doing the RFC 8693 exchange of an ID token for an ID-JAG.
type idjagIdP struct {
	ts  *httptest.Server
	key *ecdsa.PrivateKey
	kid string

	mu       sync.Mutex
	people   map[string]idjagPerson // ID token -> person
	clientID string                 // the client's id at the MCP server (the ID-JAG's client_id)

	exchanges  atomic.Int64
	jwksserved atomic.Int64
}

func newIDJAGIdP(t *testing.T) *idjagIdP {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := &idjagIdP{key: key, kid: "idp-key-1", people: map[string]idjagPerson{}}
	p.ts = httptest.NewTLSServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.ts.Close)
	return p
}

func (p *idjagIdP) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/.well-known/oauth-authorization-server":
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer":                           p.ts.URL,
			"authorization_endpoint":           p.ts.URL + "/authorize",
			"token_endpoint":                   p.ts.URL + "/token",
			"jwks_uri":                         p.ts.URL + "/jwks",
			"response_types_supported":         []string{"code"},
			"grant_types_supported":            []string{"authorization_code", "urn:ietf:params:oauth:grant-type:token-exchange"},
			"code_challenge_methods_supported": []string{"S256"},
		})
	case "/jwks":
		p.jwksserved.Add(1)
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &p.key.PublicKey, KeyID: p.kid, Algorithm: "ES256", Use: "sig"}}})
	case "/token":
		_ = r.ParseForm()
		f := r.PostForm
		p.mu.Lock()
		person, ok := p.people[f.Get("subject_token")]
		clientID := p.clientID
		p.mu.Unlock()
		switch {
		case f.Get("grant_type") != oauthex.GrantTypeTokenExchange || f.Get("requested_token_type") != oauthex.TokenTypeIDJAG ||
			f.Get("subject_token_type") != oauthex.TokenTypeIDToken || f.Get("client_id") != "agent-at-idp":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":"invalid_request"}`)
			return
		case !ok:
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":"invalid_grant"}`)
			return
		}
		p.exchanges.Add(1)
		jag := p.mint(nil, p.claims(person, f.Get("audience"), f.Get("resource"), clientID, f.Get("scope")))
		_ = json.NewEncoder(w).Encode(map[string]any{
			"access_token":      jag,
			"issued_token_type": oauthex.TokenTypeIDJAG,
			"token_type":        "N_A",
			"expires_in":        300,
		})
	default:
		http.NotFound(w, r)
	}
}

// claims are the claims of a well-formed ID-JAG for person.
func (p *idjagIdP) claims(person idjagPerson, aud, resource, clientID, scope string) map[string]any {
	now := time.Now()
	c := map[string]any{
		"iss":       p.ts.URL,
		"sub":       person.Sub,
		"aud":       aud,
		"resource":  resource,
		"client_id": clientID,
		"jti":       rand.Text(),
		"iat":       now.Unix(),
		"exp":       now.Add(5 * time.Minute).Unix(),
	}
	if scope != "" {
		c["scope"] = scope
	}
	if person.Email != "" {
		c["email"] = person.Email
		c["email_verified"] = person.Verified
	}
	return c
}

// mint signs claims as an ID-JAG with key (nil: the IdP's key).
func (p *idjagIdP) mint(key *ecdsa.PrivateKey, claims map[string]any) string {
	return idjagSign(key, p.key, p.kid, "oauth-id-jag+jwt", claims)
}

func idjagSign(key, fallback *ecdsa.PrivateKey, kid, typ string, claims map[string]any) string {
	if key == nil {
		key = fallback
	}
	opts := (&jose.SignerOptions{}).WithType(jose.ContentType(typ)).WithHeader("kid", kid)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, opts)
	if err != nil {
		panic(err)
	}
	out, err := jwt.Signed(signer).Claims(claims).CompactSerialize()
	if err != nil {
		panic(err)
	}
	return out
}

// idjagConfig trusts idp (on loopback, over its test certificate) to
// vouch for addresses of example.com (enclavetest's users).
func idjagConfig(idp *idjagIdP, clientIDs ...string) enclave.Config {
	pool := x509.NewCertPool()
	pool.AddCert(idp.ts.Certificate())
	var cfg enclave.Config
	cfg.OAuth.Enterprise = oauth.EnterpriseOptions{
		IdPs:         []oauth.TrustedIdP{{Issuer: idp.ts.URL, JWKSURL: idp.ts.URL + "/jwks", ClientIDs: clientIDs, EmailDomains: []string{"example.com"}}},
		AllowPrivate: true,
		TLSConfig:    &tls.Config{RootCAs: pool},
	}
	return cfg
}

// idjagRegister registers a public client with grants at s and returns
// its id.
func idjagRegister(t *testing.T, s *enclavetest.Server, name string, grants ...string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"client_name":                name,
		"redirect_uris":              []string{"http://127.0.0.1:9/callback"},
		"grant_types":                grants,
		"token_endpoint_auth_method": "none",
	})
	resp, err := http.Post(s.URL+"/oauth/register", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		ClientID string `json:"client_id"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(raw, &out) != nil || out.ClientID == "" {
		t.Fatalf("register %s: %d %s", name, resp.StatusCode, raw)
	}
	return out.ClientID
}

// idjagAnswer is a token endpoint answer.
type idjagAnswer struct {
	Status       int
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	Scope        string `json:"scope"`
	Error        string `json:"error"`
	Description  string `json:"error_description"`
	raw          string
}

// idjagRedeem presents assertion at s's token endpoint as clientID, with
// the form the Go SDK sends.
func idjagRedeem(t *testing.T, s *enclavetest.Server, clientID, assertion string) idjagAnswer {
	t.Helper()
	resp, err := http.PostForm(s.URL+"/oauth/token", url.Values{
		"grant_type": {oauth.GrantTypeJWTBearer},
		"assertion":  {assertion},
		"client_id":  {clientID},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := idjagAnswer{Status: resp.StatusCode, raw: string(raw)}
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("token endpoint answered %d, not JSON: %s", resp.StatusCode, raw)
	}
	return a
}

// idjagMCPStatus is the status of an MCP initialize with token.
func idjagMCPStatus(t *testing.T, s *enclavetest.Server, token string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+enclavetest.ProtocolVersion+`","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The official Go SDK's enterprise client: it gets an ID token from the
// IdP (the fetcher plays the person's sign-in), exchanges it at the IdP
// for an ID-JAG, redeems that here with the JWT bearer grant, and the
// token calls a tool over MCP, as the account the IdP's subject is linked
// to (by verified email the first time, by subject afterwards).
func TestOIDCIDJAGGoSDK(t *testing.T) {
	idp := newIDJAGIdP(t)
	enclavetest.Each(t, enclavetest.Options{Config: idjagConfig(idp)}, func(t *testing.T, s *enclavetest.Server) {
		idp.exchanges.Store(0)
		idp.jwksserved.Store(0)
		ctx := t.Context()
		alice := s.CreateUser(t, "alice")
		bob := s.CreateUser(t, "bob")
		md := s.OAuth().Metadata()
		if !strings.Contains(strings.Join(md.GrantTypesSupported, " "), oauth.GrantTypeJWTBearer) {
			t.Fatalf("the metadata does not advertise the JWT bearer grant: %v", md.GrantTypesSupported)
		}
		clientID := idjagRegister(t, s, "enterprise agent", "authorization_code", oauth.GrantTypeJWTBearer)
		idp.mu.Lock()
		idp.clientID = clientID
		idp.people["alice-id-token"] = idjagPerson{Sub: "00u-alice", Email: alice.Email, Verified: true}
		idp.mu.Unlock()

		connect := func(idToken string) (*mcp.ClientSession, *extauth.EnterpriseHandler) {
			t.Helper()
			h, err := extauth.NewEnterpriseHandler(&extauth.EnterpriseHandlerConfig{
				IdPIssuerURL:     idp.ts.URL,
				IdPCredentials:   &oauthex.ClientCredentials{ClientID: "agent-at-idp"},
				MCPAuthServerURL: s.URL,
				MCPResourceURI:   s.URL + "/mcp",
				MCPCredentials:   &oauthex.ClientCredentials{ClientID: clientID},
				MCPScopes:        []string{"mcp"},
				IDTokenFetcher: func(context.Context) (*oauth2.Token, error) {
					return (&oauth2.Token{AccessToken: "idp-access"}).WithExtra(map[string]any{"id_token": idToken}), nil
				},
				HTTPClient: idp.ts.Client(),
			})
			if err != nil {
				t.Fatal(err)
			}
			client := mcp.NewClient(&mcp.Implementation{Name: "idjag-e2e", Version: "1.0.0"}, nil)
			session, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL + "/mcp", OAuthHandler: h}, nil)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			return session, h
		}
		whoami := func(session *mcp.ClientSession) string {
			t.Helper()
			res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
			if err != nil || res.IsError {
				t.Fatalf("whoami: %v %+v", err, res)
			}
			out, _ := json.Marshal(res.StructuredContent)
			return string(out)
		}

		session, h := connect("alice-id-token")
		if out := whoami(session); !strings.Contains(out, alice.StableID) && !strings.Contains(out, alice.Username) {
			t.Errorf("whoami answered %s, want alice", out)
		}
		session.Close()
		ts, _ := h.TokenSource(ctx)
		tok, err := ts.Token()
		if err != nil {
			t.Fatal(err)
		}
		if tok.RefreshToken != "" {
			t.Errorf("a refresh token was issued for an ID-JAG: the client must come back with a new assertion")
		}
		if n := idp.exchanges.Load(); n != 1 {
			t.Errorf("the IdP saw %d token exchanges, want 1", n)
		}
		ids, err := s.OAuth().EnterpriseIdentities(ctx, alice.ID)
		if err != nil || len(ids) != 1 || ids[0].Issuer != idp.ts.URL || ids[0].Subject != "00u-alice" {
			t.Fatalf("alice's enterprise identities: %+v %v", ids, err)
		}
		// Cross-user: bob sees none of alice's identities.
		if ids, err := s.OAuth().EnterpriseIdentities(ctx, bob.ID); err != nil || len(ids) != 0 {
			t.Fatalf("bob's enterprise identities: %+v %v", ids, err)
		}
		// The grant is alice's, listed and revocable like any other.
		grants, err := s.OAuth().Grants(ctx, alice.ID)
		if err != nil || len(grants) != 1 || grants[0].ClientID != clientID {
			t.Fatalf("alice's grants: %+v %v", grants, err)
		}

		// Linked now: the subject alone finds the account, even when the
		// IdP no longer sends an email.
		idp.mu.Lock()
		idp.people["alice-id-token-2"] = idjagPerson{Sub: "00u-alice"}
		idp.mu.Unlock()
		session, _ = connect("alice-id-token-2")
		if out := whoami(session); !strings.Contains(out, alice.StableID) && !strings.Contains(out, alice.Username) {
			t.Errorf("whoami answered %s after the link, want alice", out)
		}
		session.Close()
		if n := idp.jwksserved.Load(); n < 1 || n > 2 {
			t.Errorf("the IdP's key set was fetched %d times for two assertions, want it cached", n)
		}

		// The export holds the link (issuer and subject); bob's does not;
		// deleting alice removes it, and the subject no longer redeems.
		var export bytes.Buffer
		if err := s.Lifecycle().WriteExport(ctx, alice.Owner(), &export); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(export.String(), "oauth_enterprise_identities") || !strings.Contains(export.String(), "00u-alice") {
			t.Errorf("alice's export lacks her enterprise identity")
		}
		export.Reset()
		if err := s.Lifecycle().WriteExport(ctx, bob.Owner(), &export); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(export.String(), "00u-alice") {
			t.Errorf("bob's export holds alice's enterprise identity")
		}
		if _, err := s.Lifecycle().Delete(ctx, alice.Owner()); err != nil {
			t.Fatal(err)
		}
		var left int
		if err := s.Store().DB.NewSelect().Table("oauth_enterprise_identities").ColumnExpr("count(*)").Scan(ctx, &left); err != nil || left != 0 {
			t.Errorf("after alice's deletion %d enterprise identities are left (%v)", left, err)
		}
		a := idjagRedeem(t, s, clientID, idp.mint(nil, idp.claims(idjagPerson{Sub: "00u-alice"}, s.URL, s.URL+"/mcp", clientID, "mcp")))
		if a.Status != http.StatusBadRequest || a.Error != "invalid_grant" {
			t.Errorf("alice's subject after her deletion: %+v", a)
		}
	})
}

// Every assertion that must not redeem is refused with invalid_grant (or
// the grant's own error) and a description that says why, and issues no
// token.
func TestOIDCIDJAGRefusals(t *testing.T) {
	idp := newIDJAGIdP(t)
	other := newIDJAGIdP(t) // an IdP this server does not trust
	enclavetest.Each(t, enclavetest.Options{Config: idjagConfig(idp)}, func(t *testing.T, s *enclavetest.Server) {
		ctx := t.Context()
		alice := s.CreateUser(t, "alice")
		bob := s.CreateUser(t, "bob")
		carol := s.CreateUser(t, "carol")
		clientID := idjagRegister(t, s, "enterprise agent", "authorization_code", oauth.GrantTypeJWTBearer)
		otherClient := idjagRegister(t, s, "another agent", "authorization_code", oauth.GrantTypeJWTBearer)
		codeOnly := idjagRegister(t, s, "code-only app", "authorization_code")
		aud, resource := s.URL, s.URL+"/mcp"
		alicePerson := idjagPerson{Sub: "00u-alice", Email: alice.Email, Verified: true}
		good := func() map[string]any { return idp.claims(alicePerson, aud, resource, clientID, "mcp") }

		// The baseline redeems, and the token works at /mcp.
		a := idjagRedeem(t, s, clientID, idp.mint(nil, good()))
		if a.Status != http.StatusOK || a.AccessToken == "" || a.RefreshToken != "" || a.Scope != "mcp" {
			t.Fatalf("a good assertion: %+v", a)
		}
		if st := idjagMCPStatus(t, s, a.AccessToken); st != http.StatusOK {
			t.Fatalf("the token from an ID-JAG: /mcp answered %d", st)
		}

		refuse := func(name, clientID, assertion, wantErr, wantDesc string) {
			t.Helper()
			a := idjagRedeem(t, s, clientID, assertion)
			if a.Status != http.StatusBadRequest || a.Error != wantErr || !strings.Contains(a.Description, wantDesc) || a.AccessToken != "" {
				t.Errorf("%s: got %d %s, want 400 %s with %q", name, a.Status, a.raw, wantErr, wantDesc)
			}
			for _, leak := range []string{"sql", "SELECT", "go-jose", "square/", "panic"} {
				if strings.Contains(a.raw, leak) {
					t.Errorf("%s: the answer leaks %q: %s", name, leak, a.raw)
				}
			}
		}
		with := func(edit func(c map[string]any)) string {
			c := good()
			edit(c)
			return idp.mint(nil, c)
		}
		now := time.Now()
		refuse("wrong audience", clientID, with(func(c map[string]any) { c["aud"] = "https://elsewhere.example" }), "invalid_grant", "audience")
		refuse("expired", clientID, with(func(c map[string]any) {
			c["iat"], c["exp"] = now.Add(-10*time.Minute).Unix(), now.Add(-6*time.Minute).Unix()
		}), "invalid_grant", "expired")
		refuse("too long-lived", clientID, with(func(c map[string]any) { c["exp"] = now.Add(time.Hour).Unix() }), "invalid_grant", "too long")
		refuse("no exp", clientID, with(func(c map[string]any) { delete(c, "exp") }), "invalid_grant", "exp")
		refuse("wrong resource", clientID, with(func(c map[string]any) { c["resource"] = "https://elsewhere.example/mcp" }), "invalid_grant", "resource")
		refuse("no resource", clientID, with(func(c map[string]any) { delete(c, "resource") }), "invalid_grant", "resource")
		refuse("wrong client", otherClient, idp.mint(nil, good()), "invalid_grant", "another client")
		refuse("client without the grant", codeOnly, idp.mint(nil, idp.claims(alicePerson, aud, resource, codeOnly, "mcp")), "unauthorized_client", "grant_types")
		refuse("untrusted issuer", clientID, other.mint(nil, other.claims(alicePerson, aud, resource, clientID, "mcp")), "invalid_grant", "not a trusted identity provider")
		refuse("trusted issuer, foreign key", clientID, idp.mint(other.key, good()), "invalid_grant", "signature")
		refuse("not an ID-JAG", clientID, idjagSign(nil, idp.key, idp.kid, "JWT", good()), "invalid_grant", "typ")
		refuse("not a JWT", clientID, "not.a.jwt", "invalid_grant", "signed JWT")
		unsigned := func(alg string) string {
			h, _ := json.Marshal(map[string]any{"alg": alg, "typ": "oauth-id-jag+jwt", "kid": idp.kid})
			c, _ := json.Marshal(good())
			return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c) + "."
		}
		refuse("alg none", clientID, unsigned("none"), "invalid_grant", "")
		hs, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte("a secret the attacker chose, 32+ bytes")},
			(&jose.SignerOptions{}).WithType("oauth-id-jag+jwt").WithHeader("kid", idp.kid))
		hsTok, _ := jwt.Signed(hs).Claims(good()).CompactSerialize()
		refuse("HS256", clientID, hsTok, "invalid_grant", "algorithm")

		// Replay: the same assertion redeems once.
		once := idp.mint(nil, good())
		if a := idjagRedeem(t, s, clientID, once); a.Status != http.StatusOK {
			t.Fatalf("first redemption: %+v", a)
		}
		refuse("replayed jti", clientID, once, "invalid_grant", "already used")
		// A new assertion carrying a used jti is a replay too.
		refuse("reused jti", clientID, with(func(c map[string]any) {
			var used struct {
				ID string `json:"jti"`
			}
			tok, _ := jwt.ParseSigned(once)
			_ = tok.UnsafeClaimsWithoutVerification(&used)
			c["jti"] = used.ID
		}), "invalid_grant", "already used")

		// Two redemptions racing: exactly one wins.
		race := idp.mint(nil, good())
		const n = 6
		var wg sync.WaitGroup
		statuses := make([]int, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i] = idjagRedeem(t, s, clientID, race).Status
			}()
		}
		wg.Wait()
		wins := 0
		for _, st := range statuses {
			if st == http.StatusOK {
				wins++
			} else if st != http.StatusBadRequest {
				t.Errorf("a racing redemption answered %d", st)
			}
		}
		if wins != 1 {
			t.Errorf("%d of %d concurrent redemptions of one assertion won, want exactly 1 (%v)", wins, n, statuses)
		}

		// Unverified email never links; nothing is linked by trying.
		refuse("unverified email", clientID, idp.mint(nil, idp.claims(idjagPerson{Sub: "00u-bob", Email: bob.Email, Verified: false}, aud, resource, clientID, "mcp")), "invalid_grant", "No account is linked")
		refuse("no email", clientID, idp.mint(nil, idp.claims(idjagPerson{Sub: "00u-bob"}, aud, resource, clientID, "mcp")), "invalid_grant", "No account is linked")
		if ids, _ := s.OAuth().EnterpriseIdentities(ctx, bob.ID); len(ids) != 0 {
			t.Errorf("an unverified email linked bob: %+v", ids)
		}
		// An account whose own address is unverified is not linked either.
		if _, _, err := s.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "dave@example.com", Username: "dave", Password: "dave's long password", Verified: false}); err != nil {
			t.Fatal(err)
		}
		refuse("account address unverified", clientID, idp.mint(nil, idp.claims(idjagPerson{Sub: "00u-dave", Email: "dave@example.com", Verified: true}, aud, resource, clientID, "mcp")), "invalid_grant", "No account is linked")
		// An account already linked to a subject of this IdP is not taken
		// over by another subject claiming its email.
		refuse("second subject for a linked account", clientID, idp.mint(nil, idp.claims(idjagPerson{Sub: "00u-impostor", Email: alice.Email, Verified: true}, aud, resource, clientID, "mcp")), "invalid_grant", "No account is linked")

		// A suspended account is refused, though its identity is linked.
		carolPerson := idjagPerson{Sub: "00u-carol", Email: carol.Email, Verified: true}
		if a := idjagRedeem(t, s, clientID, idp.mint(nil, idp.claims(carolPerson, aud, resource, clientID, "mcp"))); a.Status != http.StatusOK {
			t.Fatalf("carol before suspension: %+v", a)
		}
		if _, err := s.Accounts().Lifecycle.Suspend(ctx, carol.ID); err != nil {
			t.Fatal(err)
		}
		refuse("suspended account", clientID, idp.mint(nil, idp.claims(carolPerson, aud, resource, clientID, "mcp")), "invalid_grant", "suspended")

		// Scopes: what the assertion asserts, as far as the account may:
		// admin is dropped for a non-admin.
		if a := idjagRedeem(t, s, clientID, idp.mint(nil, idp.claims(alicePerson, aud, resource, clientID, "mcp admin"))); a.Status != http.StatusOK || a.Scope != "mcp" {
			t.Errorf("mcp admin asserted for a non-admin: %+v", a)
		}
		refuse("only unknown scopes", clientID, idp.mint(nil, idp.claims(alicePerson, aud, resource, clientID, "payroll")), "invalid_scope", "None of the assertion's scopes")
	})
}

// An IdP may be restricted to some clients: any other is refused.
func TestOIDCIDJAGAllowedClients(t *testing.T) {
	idp := newIDJAGIdP(t)
	s := enclavetest.Start(t, enclavetest.Options{Config: idjagConfig(idp, "no-such-client")})
	alice := s.CreateUser(t, "alice")
	clientID := idjagRegister(t, s, "enterprise agent", "authorization_code", oauth.GrantTypeJWTBearer)
	a := idjagRedeem(t, s, clientID, idp.mint(nil, idp.claims(idjagPerson{Sub: "00u-alice", Email: alice.Email, Verified: true}, s.URL, s.URL+"/mcp", clientID, "")))
	if a.Status != http.StatusBadRequest || a.Error != "invalid_grant" || !strings.Contains(a.Description, "may not redeem") {
		t.Fatalf("a client outside the IdP's list: %+v", a)
	}
}

// First redemptions racing: several assertions of one new subject all
// redeem as the account and link it once; two subjects racing for one
// account's email: exactly one is linked, the other refused.
func TestOIDCIDJAGConcurrentLinking(t *testing.T) {
	idp := newIDJAGIdP(t)
	enclavetest.Each(t, enclavetest.Options{Config: idjagConfig(idp)}, func(t *testing.T, s *enclavetest.Server) {
		ctx := t.Context()
		alice := s.CreateUser(t, "alice")
		bob := s.CreateUser(t, "bob")
		clientID := idjagRegister(t, s, "enterprise agent", "authorization_code", oauth.GrantTypeJWTBearer)
		aud, resource := s.URL, s.URL+"/mcp"
		race := func(people []idjagPerson) []int {
			statuses := make([]int, len(people))
			var wg sync.WaitGroup
			for i, p := range people {
				jag := idp.mint(nil, idp.claims(p, aud, resource, clientID, "mcp"))
				wg.Add(1)
				go func() {
					defer wg.Done()
					statuses[i] = idjagRedeem(t, s, clientID, jag).Status
				}()
			}
			wg.Wait()
			return statuses
		}
		same := idjagPerson{Sub: "00u-alice", Email: alice.Email, Verified: true}
		for i, st := range race([]idjagPerson{same, same, same, same}) {
			if st != http.StatusOK {
				t.Errorf("redemption %d of alice's subject answered %d", i, st)
			}
		}
		if ids, err := s.OAuth().EnterpriseIdentities(ctx, alice.ID); err != nil || len(ids) != 1 {
			t.Errorf("alice's identities after racing first redemptions: %+v %v", ids, err)
		}

		ok := 0
		for _, st := range race([]idjagPerson{
			{Sub: "00u-bob-1", Email: bob.Email, Verified: true},
			{Sub: "00u-bob-2", Email: bob.Email, Verified: true},
			{Sub: "00u-bob-3", Email: bob.Email, Verified: true},
		}) {
			if st == http.StatusOK {
				ok++
			}
		}
		ids, err := s.OAuth().EnterpriseIdentities(ctx, bob.ID)
		if err != nil || len(ids) != 1 || ok != 1 {
			t.Errorf("three subjects racing for bob's email: %d redeemed, identities %+v %v; want exactly one", ok, ids, err)
		}
	})
}
