package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v3"
)

// The IdP key set is fetched once and cached; an unknown kid refetches at
// most once per idpJWKSRefetchIn; a failure is remembered as long, and a
// failed refetch keeps the last good set; bodies past the bound fail.
func TestTrustedIdPKeyCache(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var fetches atomic.Int64
	var mode atomic.Value // "ok", "fail", "huge"
	mode.Store("ok")
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		switch mode.Load() {
		case "fail":
			http.Error(w, "down", http.StatusServiceUnavailable)
		case "huge":
			_, _ = w.Write([]byte(`{"keys":[],"pad":"` + strings.Repeat("x", idpJWKSMaxBytes) + `"}`))
		default:
			_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
				{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"},
				{Key: []byte("a symmetric key is never used"), KeyID: "hmac", Algorithm: "HS256"},
			}})
		}
	}))
	defer ts.Close()
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	idps := newTrustedIdPs(EnterpriseOptions{
		IdPs:         []TrustedIdP{{Issuer: "https://idp.example", JWKSURL: ts.URL + "/jwks"}},
		AllowPrivate: true,
		TLSConfig:    &tls.Config{RootCAs: pool},
	}, func() time.Time { return now })
	idp := idps.byIssuer("https://idp.example")
	if idp == nil || idps.byIssuer("https://idp.example/") != nil {
		t.Fatal("issuers are compared exactly")
	}
	get := func(kid string) ([]jose.JSONWebKey, error) { return idps.keys(t.Context(), idp, kid) }

	keys, err := get("k1")
	if err != nil || len(keys) != 1 || keys[0].KeyID != "k1" {
		t.Fatalf("keys %+v %v (the symmetric key must be dropped)", keys, err)
	}
	if _, err := get("k1"); err != nil || fetches.Load() != 1 {
		t.Fatalf("a cached kid refetched: %d fetches, %v", fetches.Load(), err)
	}
	_, _ = get("unknown") // the set was fetched just now: not again
	if n := fetches.Load(); n != 1 {
		t.Fatalf("an unknown kid right after a fetch: %d fetches, want 1", n)
	}
	now = now.Add(idpJWKSRefetchIn + time.Second)
	_, _ = get("unknown")
	_, _ = get("unknown")
	if n := fetches.Load(); n != 2 {
		t.Fatalf("an unknown kid fetched %d times in a row, want once more (2)", n)
	}
	now = now.Add(idpJWKSRefetchIn + time.Second)
	_, _ = get("unknown")
	if n := fetches.Load(); n != 3 {
		t.Fatalf("after the refetch interval: %d fetches, want 3", n)
	}

	// Past the cache age a failed fetch keeps the last good set.
	mode.Store("fail")
	now = now.Add(idpJWKSCacheTTL)
	if keys, err := get("k1"); err != nil || len(keys) != 1 {
		t.Fatalf("a failed refetch dropped the last good set: %v", err)
	}
	// Past twice the age, it fails, and the failure is remembered.
	now = now.Add(2 * idpJWKSCacheTTL)
	if _, err := get("k1"); err == nil {
		t.Fatal("a stale set was used past twice its age")
	}
	fresh := newTrustedIdPs(EnterpriseOptions{
		IdPs: []TrustedIdP{{Issuer: "https://idp.example", JWKSURL: ts.URL + "/jwks"}}, AllowPrivate: true, TLSConfig: &tls.Config{RootCAs: pool},
	}, func() time.Time { return now })
	fidp := fresh.byIssuer("https://idp.example")
	before := fetches.Load()
	for range 3 {
		if _, err := fresh.keys(t.Context(), fidp, "k1"); err == nil {
			t.Fatal("no keys, yet no error")
		}
	}
	if n := fetches.Load() - before; n != 1 {
		t.Fatalf("a failing IdP was fetched %d times within the refetch interval, want 1", n)
	}

	// A request that hung up does not cancel the fetch it caused.
	mode.Store("ok")
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	hungUp := newTrustedIdPs(EnterpriseOptions{
		IdPs: []TrustedIdP{{Issuer: "https://idp.example", JWKSURL: ts.URL + "/jwks"}}, AllowPrivate: true, TLSConfig: &tls.Config{RootCAs: pool},
	}, func() time.Time { return now })
	if _, err := hungUp.keys(gone, hungUp.byIssuer("https://idp.example"), "k1"); err != nil {
		t.Fatalf("a cancelled request's fetch failed: %v", err)
	}

	// An oversized key set is refused.
	mode.Store("huge")
	big := newTrustedIdPs(EnterpriseOptions{
		IdPs: []TrustedIdP{{Issuer: "https://idp.example", JWKSURL: ts.URL + "/jwks"}}, AllowPrivate: true, TLSConfig: &tls.Config{RootCAs: pool},
	}, func() time.Time { return now })
	if _, err := big.keys(t.Context(), big.byIssuer("https://idp.example"), ""); err == nil {
		t.Fatal("an oversized key set was accepted")
	}

	// Without AllowPrivate, loopback is refused before any request.
	strict := newTrustedIdPs(EnterpriseOptions{
		IdPs: []TrustedIdP{{Issuer: "https://idp.example", JWKSURL: ts.URL + "/jwks"}}, TLSConfig: &tls.Config{RootCAs: pool},
	}, func() time.Time { return now })
	before = fetches.Load()
	if _, err := strict.keys(t.Context(), strict.byIssuer("https://idp.example"), ""); err == nil || fetches.Load() != before {
		t.Fatalf("a loopback key set was fetched without AllowPrivate: %v", err)
	}
}
