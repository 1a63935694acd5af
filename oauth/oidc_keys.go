package oauth

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v3"
)

// ID token signing keys. Each is an RSA key (RS256: every OpenID relying
// party supports it) kept in oauth_keys under the id "oidc:<kid>", its
// PKCS#8 form sealed by the store's keeper, like the HMAC secret.
//
// Rotation never breaks a token: a new key is published in the JWKS at
// once but signs only after signingKeyDelay, longer than any replica
// caches the key set, so no relying party meets a kid it cannot find. A
// key that stopped signing stays published until every ID token it
// signed has expired (its successor's first use + the ID token
// lifetime), then it is deleted by the next rotation.
const (
	oidcKeyPrefix   = "oidc:"
	signingKeyBits  = 2048
	signingKeyCache = 30 * time.Second
	signingKeyDelay = 2 * signingKeyCache
)

type signingKey struct {
	kid     string
	created time.Time
	priv    *rsa.PrivateKey
}

// signingKeys is the cached ring of ID token keys, shared by every
// replica through SQL.
type signingKeys struct {
	srv *Server

	mu       sync.Mutex
	keys     []signingKey // oldest first
	loadedAt time.Time
}

// load returns the keys, reloading them from SQL when the cache is stale
// and creating the first key when there is none.
func (k *signingKeys) load(ctx context.Context) ([]signingKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.srv.opts.Now()
	if k.keys != nil && now.Sub(k.loadedAt) < signingKeyCache && !now.Before(k.loadedAt) {
		return k.keys, nil
	}
	keys, err := k.read(ctx)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		if err := k.insert(ctx, now); err != nil {
			return nil, err
		}
		if keys, err = k.read(ctx); err != nil {
			return nil, err
		}
		if len(keys) == 0 {
			return nil, errors.New("oauth: no ID token signing key after creating one")
		}
	}
	k.keys, k.loadedAt = keys, now
	return keys, nil
}

func (k *signingKeys) read(ctx context.Context) ([]signingKey, error) {
	st := k.srv.opts.Store
	var rows []keyRow
	if err := st.DB.NewSelect().Model(&rows).Where("id LIKE ?", oidcKeyPrefix+"%").Scan(ctx); err != nil {
		return nil, fmt.Errorf("oauth: load ID token keys: %w", err)
	}
	keys := make([]signingKey, 0, len(rows))
	for _, row := range rows {
		sealed, err := base64.StdEncoding.DecodeString(row.Ciphertext)
		if err != nil {
			return nil, fmt.Errorf("oauth: ID token key %s: %w", row.ID, err)
		}
		der, err := st.Keeper.Decrypt(ctx, sealed)
		if err != nil {
			return nil, fmt.Errorf("oauth: unseal ID token key %s: %w", row.ID, err)
		}
		parsed, err := x509.ParsePKCS8PrivateKey(der)
		if err != nil {
			return nil, fmt.Errorf("oauth: ID token key %s: %w", row.ID, err)
		}
		priv, ok := parsed.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("oauth: ID token key %s is a %T, want RSA", row.ID, parsed)
		}
		keys = append(keys, signingKey{kid: strings.TrimPrefix(row.ID, oidcKeyPrefix), created: row.CreatedAt.UTC(), priv: priv})
	}
	sort.Slice(keys, func(i, j int) bool {
		if !keys[i].created.Equal(keys[j].created) {
			return keys[i].created.Before(keys[j].created)
		}
		return keys[i].kid < keys[j].kid
	})
	return keys, nil
}

// insert generates a key and stores it, sealed.
func (k *signingKeys) insert(ctx context.Context, now time.Time) error {
	st := k.srv.opts.Store
	if st.Keeper == nil {
		return errors.New("oauth: the store has no secrets keeper to seal ID token keys")
	}
	priv, err := rsa.GenerateKey(rand.Reader, signingKeyBits)
	if err != nil {
		return fmt.Errorf("oauth: generate ID token key: %w", err)
	}
	pub := jose.JSONWebKey{Key: &priv.PublicKey}
	thumb, err := pub.Thumbprint(crypto.SHA256)
	if err != nil {
		return fmt.Errorf("oauth: ID token key id: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return fmt.Errorf("oauth: encode ID token key: %w", err)
	}
	sealed, err := st.Keeper.Encrypt(ctx, der)
	if err != nil {
		return fmt.Errorf("oauth: seal ID token key: %w", err)
	}
	row := &keyRow{ID: oidcKeyPrefix + base64.RawURLEncoding.EncodeToString(thumb), Ciphertext: base64.StdEncoding.EncodeToString(sealed), CreatedAt: now.UTC()}
	if _, err := st.DB.NewInsert().Model(row).On("CONFLICT DO NOTHING").Returning("NULL").Exec(ctx); err != nil {
		return fmt.Errorf("oauth: store ID token key: %w", err)
	}
	return nil
}

// signer is the key that signs now: the newest key old enough that every
// replica publishes it, or the oldest when none is (the very first key).
func (k *signingKeys) signer(keys []signingKey, now time.Time) signingKey {
	cur := keys[0]
	for _, key := range keys[1:] {
		if !key.created.Add(signingKeyDelay).After(now) {
			cur = key
		}
	}
	return cur
}

// published returns the keys a verifier may meet at now: every key not
// yet signing, the signing key, and older keys until the ID tokens they
// signed have expired.
func (k *signingKeys) published(keys []signingKey, now time.Time) []signingKey {
	lifetime := k.srv.opts.IDTokenLifetime
	var out []signingKey
	for i, key := range keys {
		if i+1 < len(keys) {
			// key stopped signing when its successor started to.
			retired := keys[i+1].created.Add(signingKeyDelay)
			if !retired.Add(lifetime).After(now) && k.signer(keys, now).kid != key.kid {
				continue
			}
		}
		out = append(out, key)
	}
	return out
}

// current returns the signing key as fosite's signer wants it.
func (k *signingKeys) current(ctx context.Context) (any, error) {
	keys, err := k.load(ctx)
	if err != nil {
		return nil, err
	}
	key := k.signer(keys, k.srv.opts.Now())
	return &jose.JSONWebKey{Key: key.priv, KeyID: key.kid, Algorithm: string(jose.RS256), Use: "sig"}, nil
}

// jwks is the public key set.
func (k *signingKeys) jwks(ctx context.Context) (jose.JSONWebKeySet, error) {
	keys, err := k.load(ctx)
	if err != nil {
		return jose.JSONWebKeySet{}, err
	}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	for _, key := range k.published(keys, k.srv.opts.Now()) {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &key.priv.PublicKey, KeyID: key.kid, Algorithm: string(jose.RS256), Use: "sig"})
	}
	return set, nil
}

// RotateSigningKey makes a new ID token signing key. It is published at
// once and signs from a minute later (every replica has reloaded the key
// set by then); the previous key stays published until the ID tokens it
// signed have expired. Keys no longer published are deleted. The
// `keys rotate` command calls it.
func (s *Server) RotateSigningKey(ctx context.Context) error {
	k := s.idKeys
	now := s.opts.Now()
	if err := k.insert(ctx, now); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	keys, err := k.read(ctx)
	if err != nil {
		return err
	}
	keep := k.published(keys, now)
	for _, key := range keys {
		if !containsKid(keep, key.kid) {
			if _, err := s.opts.Store.DB.NewDelete().Model((*keyRow)(nil)).Where("id = ?", oidcKeyPrefix+key.kid).Exec(ctx); err != nil {
				return fmt.Errorf("oauth: delete retired ID token key: %w", err)
			}
		}
	}
	k.keys, k.loadedAt = keep, now
	return nil
}

func containsKid(keys []signingKey, kid string) bool {
	for _, k := range keys {
		if k.kid == kid {
			return true
		}
	}
	return false
}
