package federation

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v3"
)

// Attacker review of the go-jose v3 relying party (#28).

// Google's ID tokens name their issuer with or without the scheme; both
// are accepted, and both are the same issuer: identities are keyed by
// issuer and subject, so a person whose token comes once without the
// scheme must not become a second identity (a second account, or one
// that must prove the first account to link).
func TestReviewGoogleIssuerIsOneIssuer(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "g1", Algorithm: "RS256", Use: "sig"}}})
	}))
	defer ts.Close()
	p := &openIDProvider{client: ts.Client(), md: discovery{Issuer: googleIssuer, JWKSURL: ts.URL}, algs: []string{"RS256"}}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "g1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, iss := range []string{googleIssuer, googleIssuerNoScheme, "accounts.google.com/", "http://accounts.google.com"} {
		payload, _ := json.Marshal(map[string]any{"iss": iss, "aud": "cid", "sub": "g-1", "exp": now.Add(time.Hour).Unix()})
		jws, err := signer.Sign(payload)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := jws.CompactSerialize()
		tok, err := p.verifyIDToken(context.Background(), raw, "cid", now)
		switch iss {
		case googleIssuer, googleIssuerNoScheme:
			if err != nil || tok.Issuer != googleIssuer {
				t.Errorf("iss %q: (%+v, %v), want the issuer %q", iss, tok, err, googleIssuer)
			}
		default:
			if err == nil {
				t.Errorf("iss %q accepted", iss)
			}
		}
	}
}

// An issuer reached over HTTPS keeps its keys, tokens and userinfo on
// HTTPS: a discovery document naming an http:// endpoint (whose key set
// anyone on the path could replace, forging any ID token) is refused,
// and so is a redirect from HTTPS to plain HTTP.
func TestReviewHTTPSIssuerKeepsHTTPS(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"keys":[]}`))
	}))
	defer plain.Close()
	var tlsURL string
	doc := map[string]string{}
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			m := map[string]string{"issuer": tlsURL, "authorization_endpoint": tlsURL + "/authorize",
				"token_endpoint": tlsURL + "/token", "jwks_uri": tlsURL + "/jwks", "userinfo_endpoint": tlsURL + "/userinfo"}
			for k, v := range doc {
				m[k] = v
			}
			_ = json.NewEncoder(w).Encode(m)
		case "/redirect":
			http.Redirect(w, r, plain.URL+"/jwks", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer ts.Close()
	tlsURL = ts.URL
	ctx := context.Background()
	if _, err := discover(ctx, ts.Client(), tlsURL); err != nil {
		t.Fatalf("an all-HTTPS provider: %v", err)
	}
	for _, k := range []string{"jwks_uri", "token_endpoint", "authorization_endpoint", "userinfo_endpoint"} {
		clear(doc)
		doc[k] = plain.URL + "/x"
		if _, err := discover(ctx, ts.Client(), tlsURL); err == nil {
			t.Errorf("%s over http:// accepted for an https issuer", k)
		}
	}
	if _, _, err := getBody(ctx, ts.Client(), tlsURL+"/redirect", "application/json"); err == nil || !strings.Contains(err.Error(), "https") {
		t.Errorf("a redirect from https to http followed (%v)", err)
	}
	// A plain-HTTP issuer (a test, a loopback provider) is unchanged.
	if _, _, err := getBody(ctx, plain.Client(), plain.URL+"/jwks", "application/json"); err != nil {
		t.Errorf("plain http issuer: %v", err)
	}
}

// Only a compact JWS with exactly one signature, by a key of the
// provider's key set under an accepted algorithm, verifies: not the JSON
// serialization (whose unprotected header is not signed), not several
// signatures, not a JWE, not plain JSON; a kid the key set lacks costs
// one fetch of the key set per token, never more, and several keys under
// one kid are each tried.
func TestReviewJOSEShapes(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	var fetches atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &other.PublicKey, KeyID: "dup", Algorithm: "RS256", Use: "sig"},
			{Key: &key.PublicKey, KeyID: "dup", Algorithm: "RS256", Use: "sig"},
			{Key: []byte("symmetric-secret-0123456789abcdef"), KeyID: "hmac", Algorithm: "HS256"},
		}})
	}))
	defer ts.Close()
	p := &openIDProvider{client: ts.Client(), md: discovery{Issuer: "https://idp.example", JWKSURL: ts.URL}, algs: []string{"RS256"}}
	now := time.Now()
	payload, _ := json.Marshal(map[string]any{"iss": "https://idp.example", "aud": "cid", "sub": "s", "exp": now.Add(time.Hour).Unix()})
	sign := func(alg jose.SignatureAlgorithm, k any, kid string) *jose.JSONWebSignature {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: k, KeyID: kid}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		jws, err := s.Sign(payload)
		if err != nil {
			t.Fatal(err)
		}
		return jws
	}
	compact := func(j *jose.JSONWebSignature) string { s, _ := j.CompactSerialize(); return s }
	multi, err := jose.NewMultiSigner([]jose.SigningKey{
		{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "dup"}},
		{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: other, KeyID: "dup"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mjws, _ := multi.Sign(payload)
	enc, _ := jose.NewEncrypter(jose.A128GCM, jose.Recipient{Algorithm: jose.RSA_OAEP, Key: &key.PublicKey}, nil)
	jwe, _ := enc.Encrypt(payload)
	jweCompact, _ := jwe.CompactSerialize()

	if _, err := p.verifyIDToken(context.Background(), compact(sign(jose.RS256, key, "dup")), "cid", now); err != nil {
		t.Fatalf("signed by the second of two keys under one kid: %v", err)
	}
	for name, raw := range map[string]string{
		"JSON serialization":          sign(jose.RS256, key, "dup").FullSerialize(),
		"two signatures":              mjws.FullSerialize(),
		"JWE":                         jweCompact,
		"unsigned JSON":               string(payload),
		"HS256 with the set's secret": compact(sign(jose.HS256, []byte("symmetric-secret-0123456789abcdef"), "hmac")),
		"unknown kid":                 compact(sign(jose.RS256, other, "nope")),
	} {
		before := fetches.Load()
		if _, err := p.verifyIDToken(context.Background(), raw, "cid", now); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if n := fetches.Load() - before; n > 1 {
			t.Errorf("%s: %d key set fetches for one token", name, n)
		}
	}
}
