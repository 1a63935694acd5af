package federation_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v3"

	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// rawIdP is an OpenID Provider whose ID tokens the test writes claim by
// claim (enclave's own provider only issues well-formed ones).
type rawIdP struct {
	ts  *httptest.Server
	key *rsa.PrivateKey
	// issParam: the discovery document says authorization responses
	// carry iss (RFC 9207).
	issParam bool

	mu     sync.Mutex
	claims map[string]any // of the next ID token; iss, exp, iat and at_hash added
	// mint, when set, signs the next ID token instead of key as k1.
	mint func(payload []byte) string
	// jwks, when set, is the key set served instead of key's as k1.
	jwks *jose.JSONWebKeySet
	// userinfo, when set, is the userinfo endpoint's JSON answer.
	userinfo map[string]any
}

const rawAccessToken = "raw-access-token"

func newRawIdP(t *testing.T) *rawIdP {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p := &rawIdP{key: key}
	mux := http.NewServeMux()
	p.ts = httptest.NewServer(mux)
	t.Cleanup(p.ts.Close)
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": p.ts.URL, "authorization_endpoint": p.ts.URL + "/authorize",
			"token_endpoint": p.ts.URL + "/token", "jwks_uri": p.ts.URL + "/jwks", "id_token_signing_alg_values_supported": []string{"RS256"},
			"userinfo_endpoint": p.ts.URL + "/userinfo",
			"authorization_response_iss_parameter_supported": p.issParam})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.jwks != nil {
			_ = json.NewEncoder(w).Encode(p.jwks)
			return
		}
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("GET /userinfo", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.userinfo == nil || r.Header.Get("Authorization") != "Bearer "+rawAccessToken {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.userinfo)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		claims := map[string]any{"iss": p.ts.URL, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
		sum := sha256.Sum256([]byte(rawAccessToken))
		claims["at_hash"] = base64.RawURLEncoding.EncodeToString(sum[:16])
		for k, v := range p.claims {
			if v == nil {
				delete(claims, k)
			} else {
				claims[k] = v
			}
		}
		mint := p.mint
		p.mu.Unlock()
		if mint != nil {
			payload, _ := json.Marshal(claims)
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"access_token": rawAccessToken, "token_type": "Bearer", "id_token": mint(payload)})
			return
		}
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, nil)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		payload, _ := json.Marshal(claims)
		jws, err := signer.Sign(payload)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		idt, _ := jws.CompactSerialize()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": rawAccessToken, "token_type": "Bearer", "id_token": idt})
	})
	return p
}

// An ID token issued to several parties, or authorized for another
// party (azp), was minted for someone else: it must not sign anyone in
// here, whether or not it carries at_hash (OpenID Connect Core 3.1.3.7,
// steps 3 to 5).
func TestReviewIDTokenAuthorizedParty(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		p := newRawIdP(t)
		svc, err := federation.New(federation.Config{Store: st, BaseURL: rpBase, Providers: []federation.Provider{{
			Name: "raw", Kind: federation.KindOIDC, Issuer: p.ts.URL, ClientID: "our-client", ClientSecret: "s"}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name   string
			claims map[string]any
			ok     bool
		}{
			{"ours", map[string]any{"aud": "our-client"}, true},
			{"ours, azp ours", map[string]any{"aud": "our-client", "azp": "our-client"}, true},
			{"several audiences, azp ours", map[string]any{"aud": []string{"our-client", "other"}, "azp": "our-client"}, true},
			{"several audiences, azp another", map[string]any{"aud": []string{"our-client", "other"}, "azp": "other"}, false},
			{"several audiences, no azp", map[string]any{"aud": []string{"our-client", "other"}}, false},
			{"one audience, azp another", map[string]any{"aud": "our-client", "azp": "other"}, false},
			{"another audience", map[string]any{"aud": "other"}, false},
		} {
			binding := federation.NewBinding()
			authURL, err := svc.Begin(ctx, "raw", binding, "/", 0)
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(authURL)
			claims := map[string]any{"sub": "s-1", "nonce": u.Query().Get("nonce"), "email": "a@example.com", "email_verified": true}
			for k, v := range tc.claims {
				claims[k] = v
			}
			p.mu.Lock()
			p.claims = claims
			p.mu.Unlock()
			res, err := svc.Finish(ctx, "raw", binding, url.Values{"state": {u.Query().Get("state")}, "code": {"c"}})
			switch {
			case tc.ok && err != nil:
				t.Errorf("%s: refused: %v", tc.name, err)
			case !tc.ok && !errors.Is(err, federation.ErrProvider):
				t.Errorf("%s: accepted (%+v, %v)", tc.name, res, err)
			}
		}
	})
}

// A GitHub Enterprise server numbers its users independently of
// github.com: its user 4242 is not github.com's user 4242, so configured
// by its own endpoints without an explicit issuer it must not share
// github.com's issuer (that would sign the one in to the other's account).
func TestReviewGitHubEnterpriseIsNotGitHub(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/login/oauth/access_token":
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"access_token":"ghe_x","token_type":"bearer"}`))
			case "/api/v3/user":
				_, _ = w.Write([]byte(`{"id":4242,"login":"someone-else"}`))
			case "/api/v3/user/emails":
				_, _ = w.Write([]byte(`[{"email":"else@corp.example","primary":true,"verified":true}]`))
			default:
				http.NotFound(w, r)
			}
		}))
		defer api.Close()
		ghe := federation.GitHub("ghe-id", "ghe-secret")
		ghe.Name = "ghe"
		ghe.AuthURL, ghe.TokenURL, ghe.APIURL = api.URL+"/login/oauth/authorize", api.URL+"/login/oauth/access_token", api.URL+"/api/v3"
		svc, err := federation.New(federation.Config{Store: st, BaseURL: rpBase,
			Providers: []federation.Provider{federation.GitHub("gh-id", "gh-secret"), ghe}})
		if err != nil {
			t.Fatal(err)
		}
		victim := addUser(t, st, "victim@example.com", true, true)
		if err := svc.Link(ctx, victim, &federation.Result{Provider: "github", Issuer: federation.GitHubIssuer, Subject: "4242"}); err != nil {
			t.Fatal(err)
		}
		binding := federation.NewBinding()
		authURL, err := svc.Begin(ctx, "ghe", binding, "/", 0)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(authURL)
		res, err := svc.Finish(ctx, "ghe", binding, url.Values{"state": {u.Query().Get("state")}, "code": {"c"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Issuer == federation.GitHubIssuer {
			t.Errorf("a GitHub Enterprise identity recorded with github.com's issuer")
		}
		if d, err := svc.Resolve(ctx, res); err == nil && d.UserID == victim {
			t.Fatalf("GitHub Enterprise user 4242 signs in to github.com user 4242's account: %+v", d)
		}
		// Two providers of different kinds cannot claim one issuer.
		_, err = federation.New(federation.Config{Store: st, BaseURL: rpBase, Providers: []federation.Provider{
			federation.GitHub("gh-id", "gh-secret"),
			{Name: "fake", Kind: federation.KindOIDC, Issuer: federation.GitHubIssuer, ClientID: "x"}}})
		if err == nil {
			t.Errorf("an OpenID provider sharing GitHub's issuer was accepted")
		}
	})
}

// Two removals at once of an account's only two identities (no password,
// no passkey) must not both succeed: that would leave the account with no
// way to sign in, which Unlink exists to prevent.
func TestReviewConcurrentUnlinkKeepsOneSignIn(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		svc, err := federation.New(federation.Config{Store: st, BaseURL: rpBase})
		if err != nil {
			t.Fatal(err)
		}
		for round := range 50 {
			user := addUser(t, st, fmt.Sprintf("only-ext-%d@example.com", round), true, false)
			for _, sub := range []string{"a", "b"} {
				if err := svc.Link(ctx, user, &federation.Result{Provider: "corp", Issuer: "https://idp.example", Subject: fmt.Sprint(round, sub)}); err != nil {
					t.Fatal(err)
				}
			}
			ids, err := svc.Identities(ctx, user)
			if err != nil || len(ids) != 2 {
				t.Fatalf("identities: %v %v", ids, err)
			}
			var wg sync.WaitGroup
			start := make(chan struct{})
			for _, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_ = svc.Unlink(ctx, user, id.ID)
				}()
			}
			close(start)
			wg.Wait()
			if left, err := svc.Identities(ctx, user); err != nil || len(left) == 0 {
				t.Fatalf("round %d: concurrent removals left the account no way to sign in (%v)", round, err)
			}
		}
	})
}

// A provider that announces RFC 9207 puts iss in every authorization
// response: an answer without it, or naming another issuer, is a mix-up
// (another provider's response replayed at this callback) and refused.
func TestReviewAuthorizationResponseIssuer(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		p := newRawIdP(t)
		p.issParam = true
		svc, err := federation.New(federation.Config{Store: st, BaseURL: rpBase, Providers: []federation.Provider{{
			Name: "raw", Kind: federation.KindOIDC, Issuer: p.ts.URL, ClientID: "our-client", ClientSecret: "s"}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			iss  []string
			ok   bool
		}{
			{"its issuer", []string{p.ts.URL}, true},
			{"no iss", nil, false},
			{"another issuer", []string{"https://evil.example"}, false},
		} {
			binding := federation.NewBinding()
			authURL, err := svc.Begin(ctx, "raw", binding, "/", 0)
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(authURL)
			p.mu.Lock()
			p.claims = map[string]any{"aud": "our-client", "sub": "s-1", "nonce": u.Query().Get("nonce")}
			p.mu.Unlock()
			q := url.Values{"state": {u.Query().Get("state")}, "code": {"c"}}
			if tc.iss != nil {
				q["iss"] = tc.iss
			}
			res, err := svc.Finish(ctx, "raw", binding, q)
			switch {
			case tc.ok && err != nil:
				t.Errorf("%s: refused: %v", tc.name, err)
			case !tc.ok && !errors.Is(err, federation.ErrProvider):
				t.Errorf("%s: accepted (%+v, %v)", tc.name, res, err)
			}
		}
	})
}
