package oauth_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A grant, access token or refresh token issued before its account was
// created, or for another account, is refused: by the bearer check and by
// refresh. (Such rows cannot arise from the API, since identities are
// never reused and tokens go with their account; the checks are the last
// line should a row survive, for example from a restored backup.)
func TestCredentialsOfAnotherAccountAreRefused(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		ctx := context.Background()

		t.Run("issued before the account was created", func(t *testing.T) {
			conf, uid, tok := e.signIn()
			id := grantID(t, e, tok)
			// The account row now claims a later creation: as if the id had
			// been given to a new account after the grant was issued.
			e.setUser(uid, "created_at", time.Now().UTC().Add(time.Minute))
			if _, err := e.srv.VerifyAccessToken(ctx, tok.AccessToken); !errors.Is(err, oauth.ErrNotThisAccount) {
				t.Errorf("access token: %v, want ErrNotThisAccount", err)
			}
			if got := e.refresh(conf, tok.RefreshToken); got.Status != http.StatusBadRequest || got.Error != "invalid_grant" {
				t.Errorf("refresh: %+v", got)
			}
			if n, g := rowsOf(t, st, id); n != 0 || g != 0 {
				t.Errorf("the refused grant left %d token and %d grant rows", n, g)
			}
		})

		t.Run("grant of another account", func(t *testing.T) {
			conf, _, tok := e.signIn()
			other, _ := e.createUser(userState{})
			id := grantID(t, e, tok)
			if _, err := st.DB.NewRaw("UPDATE oauth_grants SET user_id = ?, created_at = ? WHERE id = ?", other, time.Now().UTC().Add(time.Second), id).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := e.srv.VerifyAccessToken(ctx, tok.AccessToken); !errors.Is(err, oauth.ErrTokenUnknown) {
				t.Errorf("access token: %v, want ErrTokenUnknown", err)
			}
			if got := e.refresh(conf, tok.RefreshToken); got.Status != http.StatusBadRequest || got.Error != "invalid_grant" {
				t.Errorf("refresh: %+v", got)
			}
			grants, err := e.srv.Grants(ctx, other)
			if err != nil || len(grants) != 0 {
				t.Errorf("the other account still holds the grant: %v %v", grants, err)
			}
		})

		t.Run("tokens moved to another account", func(t *testing.T) {
			conf, _, tok := e.signIn()
			other, _ := e.createUser(userState{})
			id := grantID(t, e, tok)
			if _, err := st.DB.NewRaw("UPDATE oauth_tokens SET user_id = ? WHERE request_id = ?", other, id).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := e.srv.VerifyAccessToken(ctx, tok.AccessToken); !errors.Is(err, oauth.ErrTokenUnknown) {
				t.Errorf("access token: %v, want ErrTokenUnknown", err)
			}
			if got := e.refresh(conf, tok.RefreshToken); got.Status != http.StatusBadRequest || got.Error != "invalid_grant" {
				t.Errorf("refresh: %+v", got)
			}
		})
	})
}

// Refresh refuses a grant issued before the account's last password change,
// even if a revocation missed it (design invariant 7).
func TestRefreshRefusesGrantOlderThanPassword(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf, uid, tok := e.signIn()
		id := grantID(t, e, tok)
		e.setUser(uid, "password_changed_at", time.Now().UTC())
		got := e.refresh(conf, tok.RefreshToken)
		if got.Status != http.StatusBadRequest || got.Error != "invalid_grant" {
			t.Fatalf("refresh after a password change: %+v", got)
		}
		if n, g := rowsOf(t, st, id); n != 0 || g != 0 {
			t.Errorf("the stale grant left %d token and %d grant rows", n, g)
		}
		// A grant issued after the change refreshes.
		conf2 := e.publicClient()
		var email string
		if err := st.Reader.NewSelect().Table("users").Column("email").Where("id = ?", uid).Scan(context.Background(), &email); err != nil {
			t.Fatal(err)
		}
		u := e.authorize(conf2, email, nil)
		fresh := e.exchange(conf2, u.Query().Get("code"), nil)
		if next := e.refresh(conf2, fresh.RefreshToken); next.Status != http.StatusOK {
			t.Fatalf("refresh of a grant issued after the change: %+v", next)
		}
	})
}

// grantID returns the grant of a working access token.
func grantID(t *testing.T, e *env, tok tokenResponse) string {
	t.Helper()
	a, err := e.srv.VerifyAccessToken(context.Background(), tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	return a.GrantID
}
