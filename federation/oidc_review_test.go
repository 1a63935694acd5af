package federation

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
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
