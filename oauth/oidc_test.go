package oauth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// oidcSignIn runs the code flow for email with the given scopes and
// nonce and returns the token endpoint's JSON answer.
func (e *env) oidcSignIn(conf *oauth2.Config, email, nonce string) map[string]any {
	e.t.Helper()
	u := e.authorize(conf, email, url.Values{"nonce": {nonce}})
	code := u.Query().Get("code")
	if code == "" {
		e.t.Fatalf("authorize: no code in %s", u)
	}
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"client_id":     {conf.ClientID},
		"redirect_uri":  {conf.RedirectURL},
		"code_verifier": {verifierOf(conf)},
		"resource":      {e.srv.Resource()},
	}
	resp := e.do(http.MethodPost, e.ts.URL+"/oauth/token", form)
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		e.t.Fatal(err)
	}
	out["status"] = float64(resp.StatusCode)
	return out
}

func stableIDOf(t *testing.T, st *storage.Store, uid int64) string {
	t.Helper()
	var sid string
	if err := st.Reader.NewSelect().Table("users").Column("stable_user_id").Where("id = ?", uid).Scan(context.Background(), &sid); err != nil {
		t.Fatal(err)
	}
	return sid
}

// An ID token from the code flow verifies with go-oidc against the
// discovery document and the JWKS: issuer, audience (the client id),
// signature, nonce and at_hash; userinfo returns the stable user id, and
// the email only with the email scope.
func TestOpenIDProvider(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		e := newEnv(t, st)
		provider, err := oidc.NewProvider(ctx, e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		var disco struct {
			JWKS     string   `json:"jwks_uri"`
			Userinfo string   `json:"userinfo_endpoint"`
			Algs     []string `json:"id_token_signing_alg_values_supported"`
			Scopes   []string `json:"scopes_supported"`
			Request  bool     `json:"request_uri_parameter_supported"`
		}
		if err := provider.Claims(&disco); err != nil {
			t.Fatal(err)
		}
		if disco.JWKS != e.ts.URL+oauth.PathJWKS || disco.Userinfo != e.ts.URL+oauth.PathUserinfo ||
			mustJSON(disco.Algs) != `["RS256"]` || !strings.Contains(mustJSON(disco.Scopes), `"openid"`) || disco.Request {
			t.Fatalf("discovery: %+v", disco)
		}

		conf := e.publicClient()
		conf.Scopes = []string{"openid", "email", "mcp"}
		uid, email := e.createUser(userState{})
		out := e.oidcSignIn(conf, email, "nonce-0123456789")
		raw, _ := out["id_token"].(string)
		if out["status"] != float64(200) || raw == "" {
			t.Fatalf("token response: %v", out)
		}
		idt, err := provider.Verifier(&oidc.Config{ClientID: conf.ClientID}).Verify(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		if idt.Nonce != "nonce-0123456789" || idt.Subject != stableIDOf(t, st, uid) || idt.Issuer != e.ts.URL {
			t.Errorf("ID token: nonce %q sub %q iss %q", idt.Nonce, idt.Subject, idt.Issuer)
		}
		at := out["access_token"].(string)
		if err := idt.VerifyAccessToken(at); err != nil || idt.AccessTokenHash == "" {
			t.Errorf("at_hash %q: %v", idt.AccessTokenHash, err)
		}
		var claims map[string]any
		_ = idt.Claims(&claims)
		if _, leaked := claims["email"]; leaked {
			t.Errorf("the ID token carries the email: %v", claims)
		}
		// The ID token is for this client only.
		if _, err := provider.Verifier(&oidc.Config{ClientID: "another-client"}).Verify(ctx, raw); err == nil {
			t.Error("an ID token verified for another audience")
		}

		info, err := provider.UserInfo(ctx, oauth2.StaticTokenSource(&oauth2.Token{AccessToken: at}))
		if err != nil {
			t.Fatal(err)
		}
		if info.Subject != idt.Subject || info.Email != email || !info.EmailVerified {
			t.Errorf("userinfo: %+v", info)
		}
		// POST with the token in the form works too.
		resp := e.do(http.MethodPost, e.ts.URL+oauth.PathUserinfo, url.Values{"access_token": {at}})
		if resp.StatusCode != http.StatusOK {
			t.Errorf("POST userinfo: %d", resp.StatusCode)
		}

		// Without the email scope: the subject only.
		conf2 := e.publicClient()
		conf2.Scopes = []string{"openid"}
		uid2, email2 := e.createUser(userState{})
		out = e.oidcSignIn(conf2, email2, "another-nonce-987654")
		var body map[string]any
		resp = e.do(http.MethodGet, e.ts.URL+oauth.PathUserinfo, nil)
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("userinfo without a token: %d", resp.StatusCode)
		}
		req, _ := http.NewRequest(http.MethodGet, e.ts.URL+oauth.PathUserinfo, nil)
		req.Header.Set("Authorization", "Bearer "+out["access_token"].(string))
		r2, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(r2.Body).Decode(&body)
		r2.Body.Close()
		if r2.StatusCode != http.StatusOK || body["sub"] != stableIDOf(t, st, uid2) || len(body) != 1 {
			t.Errorf("userinfo without the email scope: %d %v", r2.StatusCode, body)
		}
		// A sign-in token (openid alone) does not reach the MCP resource;
		// one that also carries mcp does.
		if got := e.mcpStatus(out["access_token"].(string)); got != http.StatusUnauthorized {
			t.Errorf("/mcp with a sign-in-only token: %d", got)
		}
		if got := e.mcpStatus(at); got != http.StatusOK {
			t.Errorf("/mcp with an openid+mcp token: %d", got)
		}

		// Without openid: no ID token, and userinfo refuses the token.
		conf3 := e.publicClient()
		_, email3 := e.createUser(userState{})
		out = e.oidcSignIn(conf3, email3, "third-nonce-0123456")
		if _, ok := out["id_token"]; ok || out["status"] != float64(200) {
			t.Errorf("token without openid: %v", out)
		}
		req.Header.Set("Authorization", "Bearer "+out["access_token"].(string))
		if r3, err := http.DefaultClient.Do(req); err != nil || r3.StatusCode != http.StatusForbidden {
			t.Errorf("userinfo with a token without openid: %v %v", r3, err)
		} else {
			r3.Body.Close()
		}
	})
}

// Each user's token reads their own userinfo, never another's.
func TestOpenIDUserinfoCrossUser(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		e := newEnv(t, st)
		provider, err := oidc.NewProvider(ctx, e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		conf := e.publicClient()
		conf.Scopes = []string{"openid", "email"}
		seen := map[string]string{}
		for range 2 {
			uid, email := e.createUser(userState{})
			out := e.oidcSignIn(conf, email, "nonce-cross-user-1")
			info, err := provider.UserInfo(ctx, oauth2.StaticTokenSource(&oauth2.Token{AccessToken: out["access_token"].(string)}))
			if err != nil {
				t.Fatal(err)
			}
			if info.Subject != stableIDOf(t, st, uid) || info.Email != email {
				t.Fatalf("user %d read %+v", uid, info)
			}
			seen[info.Subject] = info.Email
		}
		if len(seen) != 2 {
			t.Fatalf("two users, subjects %v", seen)
		}
	})
}

// After `keys rotate`, ID tokens signed with the previous key still
// verify against the JWKS until they can have expired; the new key signs
// only once every replica publishes it.
func TestOpenIDKeyRotation(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		e := newEnv(t, st)
		conf := e.publicClient()
		conf.Scopes = []string{"openid"}
		_, email := e.createUser(userState{})
		kidOf := func(raw string) string {
			t.Helper()
			parts := strings.Split(raw, ".")
			var h struct {
				Kid string `json:"kid"`
				Alg string `json:"alg"`
			}
			b, _ := base64.RawURLEncoding.DecodeString(parts[0])
			_ = json.Unmarshal(b, &h)
			if h.Alg != "RS256" || h.Kid == "" {
				t.Fatalf("ID token header %s", b)
			}
			return h.Kid
		}
		jwks := func() []string {
			t.Helper()
			resp := e.do(http.MethodGet, e.ts.URL+oauth.PathJWKS, nil)
			var set struct {
				Keys []struct {
					Kid string `json:"kid"`
					D   string `json:"d"`
				} `json:"keys"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&set)
			var kids []string
			for _, k := range set.Keys {
				if k.D != "" {
					t.Fatal("the JWKS publishes a private key")
				}
				kids = append(kids, k.Kid)
			}
			return kids
		}
		old := e.oidcSignIn(conf, email, "nonce-before-rotate")["id_token"].(string)
		oldKid := kidOf(old)

		if err := e.srv.RotateSigningKey(ctx); err != nil {
			t.Fatal(err)
		}
		if kids := jwks(); len(kids) != 2 {
			t.Fatalf("after rotation the JWKS has %v, want the old and the new key", kids)
		}
		// Within the first minute the old key still signs.
		if k := kidOf(e.oidcSignIn(conf, email, "nonce-right-after-1")["id_token"].(string)); k != oldKid {
			t.Errorf("a key signed before every replica could publish it")
		}
		e.clock.Advance(2 * time.Minute)
		fresh := e.oidcSignIn(conf, email, "nonce-after-rotate-1")["id_token"].(string)
		if kidOf(fresh) == oldKid {
			t.Fatal("the new key does not sign after the delay")
		}
		provider, err := oidc.NewProvider(ctx, e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		v := provider.Verifier(&oidc.Config{ClientID: conf.ClientID})
		for _, raw := range []string{old, fresh} {
			if _, err := v.Verify(ctx, raw); err != nil {
				t.Errorf("after rotation: %v", err)
			}
		}
		// Once the old key's ID tokens have expired it is withdrawn.
		e.clock.Advance(oauth.DefaultIDTokenLifetime)
		if kids := jwks(); len(kids) != 1 || kids[0] == oldKid {
			t.Fatalf("an hour later the JWKS has %v, want only the new key", kids)
		}
	})
}

// prompt=consent shows the consent page even when the person approved
// these scopes before.
func TestOpenIDPromptConsent(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf := e.publicClient()
		conf.Scopes = []string{"openid"}
		uid, email := e.createUser(userState{})
		e.authorize(conf, email, url.Values{"nonce": {"nonce-consent-01"}})
		me := &http.Cookie{Name: "test_user", Value: itoa(uid)}
		if resp := e.do(http.MethodGet, e.authURL(conf, nil), nil, me); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("remembered consent: %d", resp.StatusCode)
		}
		_, before := e.login.pages()
		if resp := e.do(http.MethodGet, e.authURL(conf, url.Values{"prompt": {"consent"}}), nil, me); resp.StatusCode != http.StatusOK {
			t.Fatalf("prompt=consent: %d, want the consent page", resp.StatusCode)
		}
		if _, after := e.login.pages(); after != before+1 {
			t.Errorf("consent pages %d -> %d", before, after)
		}
		if !strings.Contains(e.login.last.FormAction, "prompt=consent") {
			t.Errorf("the consent form drops prompt: %s", e.login.last.FormAction)
		}
	})
}

// A suspended account gets no ID token, and the OpenID parameters this
// server does not implement are refused before anything else.
func TestOpenIDRefusals(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf := e.publicClient()
		conf.Scopes = []string{"openid", "email"}
		uid, email := e.createUser(userState{})
		u := e.authorize(conf, email, url.Values{"nonce": {"nonce-suspended-1"}})
		e.setUser(uid, "suspended_at", time.Now().UTC())
		tok := e.exchange(conf, u.Query().Get("code"), nil)
		if tok.Status != http.StatusBadRequest || tok.Error != "invalid_grant" || tok.AccessToken != "" {
			t.Errorf("suspended account: %+v", tok)
		}
		// Suspended before: the authorization itself is refused.
		resp := e.do(http.MethodGet, e.authURL(conf, url.Values{"nonce": {"nonce-suspended-2"}}), nil, &http.Cookie{Name: "test_user", Value: itoa(uid)})
		if loc, _ := url.Parse(resp.Header.Get("Location")); resp.StatusCode != http.StatusSeeOther || loc.Query().Get("error") != "access_denied" {
			t.Errorf("suspended account at authorize: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}

		for param, value := range map[string]string{
			"request":     "eyJhbGciOiJub25lIn0.e30.",
			"request_uri": "https://attacker.example/req.jwt",
			"prompt":      "none",
			"max_age":     "0",
		} {
			resp := e.do(http.MethodGet, e.authURL(conf, url.Values{param: {value}}), nil)
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
				t.Errorf("%s: %d %s", param, resp.StatusCode, resp.Header.Get("Location"))
			}
		}
	})
}
