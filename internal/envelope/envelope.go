// Package envelope seals small values with AES-256-GCM under data keys that
// the secrets keeper wraps. Data keys live in SQL (table data_keys) only in
// wrapped form; a process unwraps each once and keeps it in memory.
//
// A sealed value is "v1.<nonce>.<ciphertext>" (unpadded base64url parts).
// Every Seal names additional data — what the value is and whose — and Open
// must name the same, so a ciphertext copied into another row or another
// user's account fails to open.
package envelope

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"
	"gocloud.dev/secrets"
)

// ErrOpen reports a value that cannot be opened: wrong additional data,
// tampering, an unknown key, or a malformed ciphertext. It says no more, on
// purpose.
var ErrOpen = errors.New("envelope: cannot open sealed value")

const version = "v1"

type dataKey struct {
	bun.BaseModel `bun:"table:data_keys"`
	ID            int64      `bun:"id,pk,autoincrement"`
	WrappedKey    string     `bun:"wrapped_key,notnull"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	RetiredAt     *time.Time `bun:"retired_at"`
}

// Ring holds the data keys. It is safe for concurrent use.
type Ring struct {
	db     *bun.DB
	keeper *secrets.Keeper

	mu       sync.RWMutex
	aeads    map[int64]cipher.AEAD
	current  int64
	announce func(id int64) // set by Follow
}

// Open loads the data keys, creating the first one if there is none.
func Open(ctx context.Context, db *bun.DB, keeper *secrets.Keeper) (*Ring, error) {
	r := &Ring{db: db, keeper: keeper, aeads: map[int64]cipher.AEAD{}}
	if err := r.load(ctx); err != nil {
		return nil, err
	}
	if r.current == 0 {
		if _, err := r.Rotate(ctx); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// load unwraps every data key not yet in memory; the newest unretired one
// becomes current.
func (r *Ring) load(ctx context.Context) error {
	var keys []dataKey
	if err := r.db.NewSelect().Model(&keys).Order("id").Scan(ctx); err != nil {
		return fmt.Errorf("envelope: load data keys: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if _, ok := r.aeads[k.ID]; !ok {
			aead, err := r.unwrap(ctx, k.WrappedKey)
			if err != nil {
				return fmt.Errorf("envelope: data key %d: %w", k.ID, err)
			}
			r.aeads[k.ID] = aead
		}
		if k.RetiredAt == nil {
			r.current = k.ID
		}
	}
	return nil
}

func (r *Ring) unwrap(ctx context.Context, wrapped string) (cipher.AEAD, error) {
	raw, err := base64.StdEncoding.DecodeString(wrapped)
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	key, err := r.keeper.Decrypt(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("unwrap with the keeper (is this the keeper that wrapped it?): %w", err)
	}
	return newAEAD(key)
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("data key is %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Rotate creates a new data key, wrapped by the keeper, makes it current and
// retires the others (they still open what they sealed).
func (r *Ring) Rotate(ctx context.Context) (int64, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return 0, fmt.Errorf("envelope: new data key: %w", err)
	}
	wrapped, err := r.keeper.Encrypt(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("envelope: wrap data key: %w", err)
	}
	aead, err := newAEAD(key)
	if err != nil {
		return 0, fmt.Errorf("envelope: %w", err)
	}
	now := time.Now().UTC()
	k := &dataKey{WrappedKey: base64.StdEncoding.EncodeToString(wrapped), CreatedAt: now}
	err = r.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewUpdate().Model((*dataKey)(nil)).Set("retired_at = ?", now).Where("retired_at IS NULL").Exec(ctx); err != nil {
			return err
		}
		_, err := tx.NewInsert().Model(k).Returning("id").Exec(ctx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("envelope: store data key: %w", err)
	}
	r.mu.Lock()
	r.aeads[k.ID] = aead
	r.current = k.ID
	announce := r.announce
	r.mu.Unlock()
	if announce != nil {
		announce(k.ID)
	}
	return k.ID, nil
}

// Current returns the id of the key Seal uses.
func (r *Ring) Current() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.current
}

// Seal encrypts plaintext under the current data key, bound to ad.
func (r *Ring) Seal(ad string, plaintext []byte) (keyID int64, sealed string, err error) {
	r.mu.RLock()
	keyID, aead := r.current, r.aeads[r.current]
	r.mu.RUnlock()
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return 0, "", fmt.Errorf("envelope: nonce: %w", err)
	}
	ct := aead.Seal(nil, nonce, plaintext, []byte(ad))
	enc := base64.RawURLEncoding
	return keyID, version + "." + enc.EncodeToString(nonce) + "." + enc.EncodeToString(ct), nil
}

// Open decrypts sealed with data key keyID, checking it was sealed for ad.
// A key created by another process since this ring loaded is fetched.
func (r *Ring) Open(ctx context.Context, keyID int64, sealed, ad string) ([]byte, error) {
	r.mu.RLock()
	aead, ok := r.aeads[keyID]
	r.mu.RUnlock()
	if !ok {
		if err := r.load(ctx); err != nil {
			return nil, err
		}
		r.mu.RLock()
		aead, ok = r.aeads[keyID]
		r.mu.RUnlock()
		if !ok {
			return nil, ErrOpen
		}
	}
	parts := strings.Split(sealed, ".")
	if len(parts) != 3 || parts[0] != version {
		return nil, ErrOpen
	}
	nonce, err1 := base64.RawURLEncoding.DecodeString(parts[1])
	ct, err2 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || len(nonce) != aead.NonceSize() {
		return nil, ErrOpen
	}
	plain, err := aead.Open(nil, nonce, ct, []byte(ad))
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}

type platformKey struct {
	bun.BaseModel `bun:"table:platform_keys"`
	Name          string    `bun:"name,pk"`
	KeyID         int64     `bun:"key_id,notnull"`
	Ciphertext    string    `bun:"ciphertext,notnull"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
}

// NamedKey returns the 32-byte platform key called name, creating it on
// first use. Every replica gets the same key: the first to insert wins and
// the others read its row.
func (r *Ring) NamedKey(ctx context.Context, name string) ([]byte, error) {
	ad := "platform-key:" + name
	read := func() ([]byte, error) {
		var k platformKey
		if err := r.db.NewSelect().Model(&k).Where("name = ?", name).Scan(ctx); err != nil {
			return nil, err
		}
		return r.Open(ctx, k.KeyID, k.Ciphertext, ad)
	}
	if key, err := read(); err == nil {
		return key, nil
	} else if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("envelope: platform key %s: %w", name, err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("envelope: platform key %s: %w", name, err)
	}
	keyID, sealed, err := r.Seal(ad, key)
	if err != nil {
		return nil, err
	}
	k := &platformKey{Name: name, KeyID: keyID, Ciphertext: sealed, CreatedAt: time.Now().UTC()}
	if _, err := r.db.NewInsert().Model(k).On("CONFLICT (name) DO NOTHING").Returning("NULL").Exec(ctx); err != nil {
		return nil, fmt.Errorf("envelope: platform key %s: %w", name, err)
	}
	key, err = read()
	if err != nil {
		return nil, fmt.Errorf("envelope: platform key %s: %w", name, err)
	}
	return key, nil
}
