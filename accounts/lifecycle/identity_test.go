package lifecycle_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Identities are never reused (design invariant 13): sign up, keep a
// "remember me" cookie and a setup link, delete the account; a new account
// with the same email gets new ids (stable and internal), fresh email
// claims, and nothing issued to the deleted account works for it.
func TestDeletedIdentityIsNeverReused(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		victim, err := w.acc.Identity.Signup(ctx, accounts.SignupInput{Email: "victim@example.com", Username: "victim", Password: "correct horse battery victim"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.acc.Identity.MarkEmailVerified(ctx, victim.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := w.acc.Identity.ChangeEmail(ctx, victim.ID, "victim.new@example.com"); err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		if _, err := w.acc.Credentials.StartSession(rec, httptest.NewRequest("GET", "/", nil), victim, true); err != nil {
			t.Fatal(err)
		}
		cookie := rec.Result().Cookies()[0].Value
		setupLink, err := w.acc.Credentials.NewPasswordSetupToken(ctx, victim.ID)
		if err != nil {
			t.Fatal(err)
		}

		res, err := w.svc.Delete(ctx, storage.Owner{ID: victim.ID, StableID: victim.StableID})
		if err != nil || !res.Completed {
			t.Fatalf("delete: %+v, %v", res, err)
		}

		// The victim held two addresses; the new account holds only its own.
		// The victim was the newest account: SQLite would hand its rowid
		// to the next one.
		again, err := w.acc.Identity.Signup(ctx, accounts.SignupInput{Email: "victim@example.com", Username: "victim", Password: "another long password here"})
		if err != nil {
			t.Fatal(err)
		}
		if again.StableID == victim.StableID || again.ID == victim.ID {
			t.Fatalf("the new account has the deleted one's id: stable %v, internal %v", again.StableID == victim.StableID, again.ID == victim.ID)
		}
		claims, err := w.acc.Identity.EmailClaims(ctx, again.ID)
		if err != nil || !slices.Equal(claims, []string{"victim@example.com"}) {
			t.Errorf("claims of the new account: %v %v, want only its own email", claims, err)
		}

		if sess, err := w.acc.Credentials.VerifySession(ctx, cookie); !errors.Is(err, accounts.ErrNoSession) {
			t.Errorf("the deleted account's cookie: %+v, %v; want ErrNoSession", sess.User.Email, err)
		}
		if _, err := w.acc.Credentials.SetPasswordWithToken(ctx, setupLink, "a brand new long password"); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Errorf("the deleted account's setup link: %v, want ErrInvalidToken", err)
		}

		// Deleting the new account too retires its id: a third signup gets
		// yet another.
		if _, err := w.svc.Delete(ctx, storage.Owner{ID: again.ID, StableID: again.StableID}); err != nil {
			t.Fatal(err)
		}
		third, err := w.acc.Identity.Signup(ctx, accounts.SignupInput{Email: "victim@example.com", Username: "victim", Password: "yet another long password"})
		if err != nil {
			t.Fatal(err)
		}
		if third.StableID == victim.StableID || third.StableID == again.StableID || third.ID <= again.ID {
			t.Fatalf("third account reuses an id: %+v", third)
		}
	})
}
