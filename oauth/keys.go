package oauth

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
)

type keyRow struct {
	bun.BaseModel `bun:"table:oauth_keys,alias:k"`

	ID         string    `bun:"id,pk"`
	Ciphertext string    `bun:"ciphertext"`
	CreatedAt  time.Time `bun:"created_at"`
}

// hmacKeyID names the token signing secret in oauth_keys.
const hmacKeyID = "hmac"

// loadSecret returns the token signing secret kept in SQL, sealed by the
// keeper, generating it on first use. Concurrent first starts agree: the
// first insert wins and everyone reads it back.
func loadSecret(ctx context.Context, st *storage.Store, now time.Time) ([]byte, error) {
	if st.Keeper == nil {
		return nil, errors.New("oauth: the store has no secrets keeper; set Options.HMACSecret")
	}
	read := func() ([]byte, error) {
		var row keyRow
		if err := st.DB.NewSelect().Model(&row).Where("id = ?", hmacKeyID).Scan(ctx); err != nil {
			return nil, err
		}
		sealed, err := base64.StdEncoding.DecodeString(row.Ciphertext)
		if err != nil {
			return nil, fmt.Errorf("oauth: signing secret: %w", err)
		}
		secret, err := st.Keeper.Decrypt(ctx, sealed)
		if err != nil {
			return nil, fmt.Errorf("oauth: unseal signing secret: %w", err)
		}
		return secret, nil
	}
	secret, err := read()
	if err == nil || !errors.Is(err, sql.ErrNoRows) {
		return secret, err
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("oauth: generate signing secret: %w", err)
	}
	sealed, err := st.Keeper.Encrypt(ctx, fresh)
	if err != nil {
		return nil, fmt.Errorf("oauth: seal signing secret: %w", err)
	}
	row := &keyRow{ID: hmacKeyID, Ciphertext: base64.StdEncoding.EncodeToString(sealed), CreatedAt: now.UTC()}
	if _, err := st.DB.NewInsert().Model(row).On("CONFLICT DO NOTHING").Returning("NULL").Exec(ctx); err != nil {
		return nil, fmt.Errorf("oauth: store signing secret: %w", err)
	}
	return read()
}
