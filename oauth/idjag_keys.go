package oauth

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v3"

	"github.com/enclave-mcp/enclave/internal/egress"
)

// trustedIdPs holds the configured IdPs and their cached key sets.
type trustedIdPs struct {
	client *http.Client
	now    func() time.Time
	list   []*trustedIdP
}

type trustedIdP struct {
	cfg TrustedIdP

	mu        sync.Mutex // held while fetching: one fetch per IdP at a time
	keySet    []jose.JSONWebKey
	fetchedAt time.Time
	tried     time.Time // last fetch attempt, successful or not
	lastErr   error     // why the last attempt failed
}

func newTrustedIdPs(o EnterpriseOptions, now func() time.Time) *trustedIdPs {
	if len(o.IdPs) == 0 {
		return nil
	}
	t := &trustedIdPs{
		client: egress.NewClient(egress.Options{
			AllowPrivate:     o.AllowPrivate,
			TLSConfig:        o.TLSConfig,
			Timeout:          idpJWKSTimeout,
			MaxRedirects:     -1,
			MaxResponseBytes: idpJWKSMaxBytes,
		}),
		now: now,
	}
	for _, idp := range o.IdPs {
		t.list = append(t.list, &trustedIdP{cfg: idp})
	}
	return t
}

func (t *trustedIdPs) byIssuer(iss string) *trustedIdP {
	for _, idp := range t.list {
		if idp.cfg.Issuer == iss {
			return idp
		}
	}
	return nil
}

var errIdPKeys = errors.New("oauth: enterprise IdP key set unavailable")

// keys returns the IdP's signing keys: the cached set while it is fresh
// and knows kid; otherwise a fetch, at most one per IdP at a time and one
// per idpJWKSRefetchIn (an assertion naming an unknown kid cannot make
// this server hammer the IdP). A failed fetch keeps serving the last good
// set until it is twice its age limit.
func (t *trustedIdPs) keys(ctx context.Context, idp *trustedIdP, kid string) ([]jose.JSONWebKey, error) {
	idp.mu.Lock()
	defer idp.mu.Unlock()
	now := t.now()
	fresh := idp.keySet != nil && now.Sub(idp.fetchedAt) < idpJWKSCacheTTL
	if fresh && (kid == "" || hasKid(idp.keySet, kid)) {
		return idp.keySet, nil
	}
	// A set older than twice its age limit is never used: a key the IdP
	// rotated out must not stay trusted for as long as its key set
	// endpoint can be kept failing.
	if idp.keySet != nil && now.Sub(idp.fetchedAt) >= 2*idpJWKSCacheTTL {
		idp.keySet = nil
	}
	if !idp.tried.IsZero() && now.Sub(idp.tried) < idpJWKSRefetchIn {
		if idp.keySet != nil {
			return idp.keySet, nil
		}
		if idp.lastErr != nil {
			return nil, idp.lastErr // a failure is remembered as long
		}
	}
	idp.tried = now
	// The fetch is not cancelled with the request that caused it: a client
	// hanging up at once must not leave a failure for everyone else to
	// meet. The egress client bounds it (idpJWKSTimeout).
	body, err := getJSON(context.WithoutCancel(ctx), t.client, idp.cfg.JWKSURL)
	var set []jose.JSONWebKey
	if err == nil {
		set, err = parseJWKS(body)
	}
	if err != nil {
		idp.lastErr = errors.Join(errIdPKeys, err)
		if idp.keySet != nil && now.Sub(idp.fetchedAt) < 2*idpJWKSCacheTTL {
			return idp.keySet, nil
		}
		return nil, idp.lastErr
	}
	idp.keySet, idp.fetchedAt, idp.lastErr = set, now, nil
	return set, nil
}

func hasKid(set []jose.JSONWebKey, kid string) bool {
	for _, k := range set {
		if k.KeyID == kid {
			return true
		}
	}
	return false
}
