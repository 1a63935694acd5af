package oauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v3"
)

// Review of #29 (ID-JAG): a key set the IdP can no longer confirm is used
// at most twice its age limit, however the refetches are spaced. Before
// the fix, once a refetch past that bound had failed, the refetch
// throttle served the stale set again to every assertion of the next
// idpJWKSRefetchIn, and so on for ever: a key the IdP rotated out (say,
// because it leaked) stayed trusted for as long as its key set endpoint
// could be kept failing.
func TestTrustedIdPKeyCacheReviewStaleSetBound(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var fail atomic.Bool
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
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
	if _, err := idps.keys(t.Context(), idp, "k1"); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	// Within twice the age, a failed refetch keeps the set (by design),
	// also while refetches are throttled.
	now = now.Add(idpJWKSCacheTTL + time.Second)
	for range 2 {
		if _, err := idps.keys(t.Context(), idp, "k1"); err != nil {
			t.Fatalf("within twice its age the last good set was dropped: %v", err)
		}
	}
	// Past twice the age, no assertion meets the stale set again: not the
	// one whose refetch failed, not those within the refetch interval
	// after it, not those after the next failed refetch.
	now = now.Add(idpJWKSCacheTTL)
	for i, step := range []time.Duration{0, time.Second, idpJWKSRefetchIn / 2, idpJWKSRefetchIn, time.Second, 10 * idpJWKSCacheTTL} {
		now = now.Add(step)
		if keys, err := idps.keys(t.Context(), idp, "k1"); err == nil {
			t.Fatalf("call %d, %s past twice the age limit: the stale set (%d keys) was used", i, now.Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))-2*idpJWKSCacheTTL, len(keys))
		}
	}
	// The IdP back, its set is used again.
	fail.Store(false)
	now = now.Add(idpJWKSRefetchIn)
	if _, err := idps.keys(t.Context(), idp, "k1"); err != nil {
		t.Fatalf("the IdP is back, yet: %v", err)
	}
}
