package federation_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v3"

	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// signWith returns a mint that signs an ID token with key as kid.
func signWith(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string) func([]byte) string {
	return func(payload []byte) string {
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, nil)
		if err != nil {
			t.Errorf("signer: %v", err)
			return ""
		}
		jws, err := signer.Sign(payload)
		if err != nil {
			t.Errorf("sign: %v", err)
			return ""
		}
		s, err := jws.CompactSerialize()
		if err != nil {
			t.Errorf("serialize: %v", err)
		}
		return s
	}
}

// unsigned is an ID token with alg "none".
func unsigned(payload []byte) string {
	hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"k1"}`))
	return hdr + "." + base64.RawURLEncoding.EncodeToString(payload) + "."
}

// rawSignIn runs one sign-in with p's next ID token made of claims
// (added to a well-formed one: aud ours, sub, nonce, email) and returns
// Finish's answer.
func rawSignIn(t *testing.T, svc *federation.Service, p *rawIdP, claims map[string]any, mint func([]byte) string) (*federation.Result, error) {
	t.Helper()
	ctx := context.Background()
	binding := federation.NewBinding()
	authURL, err := svc.Begin(ctx, "raw", binding, "/", 0)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(authURL)
	all := map[string]any{"aud": "our-client", "sub": "s-1", "nonce": u.Query().Get("nonce"), "email": "a@example.com", "email_verified": true}
	for k, v := range claims {
		all[k] = v
	}
	p.mu.Lock()
	p.claims, p.mint = all, mint
	p.mu.Unlock()
	return svc.Finish(ctx, "raw", binding, url.Values{"state": {u.Query().Get("state")}, "code": {"c"}})
}

// An ID token signs someone in only when it is signed by the provider's
// key with an asymmetric algorithm, issued by the provider, to us, for
// this sign-in, and still valid: each way of getting one of these wrong
// is refused as the provider's answer not verifying.
func TestIDTokenVerification(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		p := newRawIdP(t)
		now := time.Now()
		svc, err := federation.New(federation.Config{Store: st, BaseURL: rpBase, Now: func() time.Time { return now }, Providers: []federation.Provider{{
			Name: "raw", Kind: federation.KindOIDC, Issuer: p.ts.URL, ClientID: "our-client", ClientSecret: "s"}}})
		if err != nil {
			t.Fatal(err)
		}
		other, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKIXPublicKey(&p.key.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
		pubJWK, err := json.Marshal(jose.JSONWebKey{Key: &p.key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"})
		if err != nil {
			t.Fatal(err)
		}

		for _, tc := range []struct {
			name   string
			claims map[string]any
			mint   func([]byte) string
			ok     bool
		}{
			{"well-formed", nil, nil, true},
			{"well-formed, expiring in a second", map[string]any{"exp": now.Add(time.Second).Unix()}, nil, true},
			{"nbf within the clock skew", map[string]any{"nbf": now.Add(time.Minute).Unix()}, nil, true},
			{"signed by another key under the provider's kid", nil, signWith(t, jose.RS256, other, "k1"), false},
			{"signed by another key without kid", nil, signWith(t, jose.RS256, other, ""), false},
			{"ES256 by a key the provider does not hold", nil, signWith(t, jose.ES256, ec, "k1"), false},
			{"alg none", nil, unsigned, false},
			{"HS256 keyed with the provider's public key (PEM)", nil, signWith(t, jose.HS256, pubPEM, "k1"), false},
			{"HS256 keyed with the provider's public key (JWK)", nil, signWith(t, jose.HS256, pubJWK, "k1"), false},
			{"HS256 keyed with the modulus", nil, signWith(t, jose.HS256, p.key.PublicKey.N.Bytes(), "k1"), false},
			{"another audience", map[string]any{"aud": "other"}, nil, false},
			{"no audience", map[string]any{"aud": nil}, nil, false},
			{"another issuer", map[string]any{"iss": "https://evil.example"}, nil, false},
			{"the issuer with a trailing slash", map[string]any{"iss": p.ts.URL + "/"}, nil, false},
			{"expired", map[string]any{"exp": now.Add(-time.Second).Unix()}, nil, false},
			{"no exp", map[string]any{"exp": nil}, nil, false},
			{"not valid yet", map[string]any{"nbf": now.Add(10 * time.Minute).Unix()}, nil, false},
			{"another sign-in's nonce", map[string]any{"nonce": "not-this-one"}, nil, false},
			{"no nonce", map[string]any{"nonce": nil}, nil, false},
			{"at_hash of another access token", map[string]any{"at_hash": "AAAAAAAAAAAAAAAAAAAAAA"}, nil, false},
			{"no subject", map[string]any{"sub": nil}, nil, false},
		} {
			res, err := rawSignIn(t, svc, p, tc.claims, tc.mint)
			switch {
			case tc.ok && err != nil:
				t.Errorf("%s: refused: %v", tc.name, err)
			case tc.ok && (res.Issuer != p.ts.URL || res.Subject != "s-1" || res.Email != "a@example.com" || !res.EmailVerified):
				t.Errorf("%s: result %+v", tc.name, res)
			case !tc.ok && !errors.Is(err, federation.ErrProvider):
				t.Errorf("%s: accepted (%+v, %v)", tc.name, res, err)
			}
		}
	})
}

// A provider that rotates its signing key is followed: a token signed
// with a key it did not publish when last asked makes the key set be
// fetched again, and a key it no longer publishes stops verifying.
func TestIDTokenKeyRotation(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		p := newRawIdP(t)
		svc, err := federation.New(federation.Config{Store: st, BaseURL: rpBase, Providers: []federation.Provider{{
			Name: "raw", Kind: federation.KindOIDC, Issuer: p.ts.URL, ClientID: "our-client", ClientSecret: "s"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rawSignIn(t, svc, p, nil, nil); err != nil {
			t.Fatalf("with the first key: %v", err)
		}
		next, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		p.jwks = &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &next.PublicKey, KeyID: "k2", Algorithm: "RS256", Use: "sig"}}}
		p.mu.Unlock()
		if _, err := rawSignIn(t, svc, p, nil, signWith(t, jose.RS256, next, "k2")); err != nil {
			t.Fatalf("with the rotated key: %v", err)
		}
		if res, err := rawSignIn(t, svc, p, nil, nil); !errors.Is(err, federation.ErrProvider) {
			t.Fatalf("with the retired key: (%+v, %v)", res, err)
		}
	})
}

// An ID token without an email is completed from the userinfo endpoint,
// but only when userinfo speaks of the same subject.
func TestIDTokenEmailFromUserinfo(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		p := newRawIdP(t)
		svc, err := federation.New(federation.Config{Store: st, BaseURL: rpBase, Providers: []federation.Provider{{
			Name: "raw", Kind: federation.KindOIDC, Issuer: p.ts.URL, ClientID: "our-client", ClientSecret: "s"}}})
		if err != nil {
			t.Fatal(err)
		}
		noEmail := map[string]any{"email": nil, "email_verified": nil}
		p.userinfo = map[string]any{"sub": "s-1", "email": "Info@Example.com", "email_verified": "true"}
		res, err := rawSignIn(t, svc, p, noEmail, nil)
		if err != nil || res.Email != "info@example.com" || !res.EmailVerified {
			t.Fatalf("from userinfo: (%+v, %v)", res, err)
		}
		p.mu.Lock()
		p.userinfo = map[string]any{"sub": "someone-else", "email": "info@example.com", "email_verified": true}
		p.mu.Unlock()
		res, err = rawSignIn(t, svc, p, noEmail, nil)
		if err != nil || res.Email != "" || res.EmailVerified {
			t.Fatalf("userinfo of another subject: (%+v, %v)", res, err)
		}
	})
}
