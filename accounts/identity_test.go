package accounts_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Credentials issued before an account was created are refused by it
// (design invariant 13): a session cookie and a password-setup or reset
// link minted at an earlier time for the same internal id cannot have been
// issued to this account.
func TestCredentialsIssuedBeforeTheAccountAreRefused(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, clk := newService(t, s, accounts.Config{})
		u := signup(t, svc, "late")

		clk.Advance(-time.Hour)
		rec := httptest.NewRecorder()
		if _, err := svc.Credentials.StartSession(rec, httptest.NewRequest("GET", "/", nil), u, true); err != nil {
			t.Fatal(err)
		}
		setup, err := svc.Credentials.NewPasswordSetupToken(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		reset, err := svc.Credentials.NewPasswordResetToken(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)

		cookie := rec.Result().Cookies()[0]
		if _, err := svc.Credentials.VerifySession(ctx, cookie.Value); !errors.Is(err, accounts.ErrNoSession) {
			t.Errorf("cookie issued before the account: %v, want ErrNoSession", err)
		}
		for name, token := range map[string]string{"setup": setup, "reset": reset} {
			if _, err := svc.Credentials.SetPasswordWithToken(ctx, token, "a brand new long password"); !errors.Is(err, accounts.ErrInvalidToken) {
				t.Errorf("%s link issued before the account: %v, want ErrInvalidToken", name, err)
			}
		}
		if err := svc.Credentials.CheckIssuedToAccount(ctx, u.ID, u.CreatedAt.Add(-time.Microsecond)); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Errorf("CheckIssuedToAccount before creation: %v", err)
		}
		if err := svc.Credentials.CheckIssuedToAccount(ctx, u.ID+1000, u.CreatedAt); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Errorf("CheckIssuedToAccount of no account: %v", err)
		}

		// Issued at or after creation, they work.
		rec = httptest.NewRecorder()
		if _, err := svc.Credentials.StartSession(rec, httptest.NewRequest("GET", "/", nil), u, false); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Credentials.VerifySession(ctx, rec.Result().Cookies()[0].Value); err != nil {
			t.Errorf("a cookie issued now: %v", err)
		}
		if err := svc.Credentials.CheckIssuedToAccount(ctx, u.ID, u.CreatedAt); err != nil {
			t.Errorf("CheckIssuedToAccount at creation: %v", err)
		}
		setup, err = svc.Credentials.NewPasswordSetupToken(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Credentials.SetPasswordWithToken(ctx, setup, "a brand new long password"); err != nil {
			t.Errorf("a setup link issued now: %v", err)
		}
	})
}

// A stable id that is taken or retired is never minted again, and an
// insert that would reuse a retired id (stable or internal) is refused by
// the database itself, whatever path it comes from.
func TestRetiredIDsAreNeverMinted(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		u := signup(t, svc, "gone")
		if _, err := s.DB.NewRaw("DELETE FROM users WHERE id = ?", u.ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		var retired struct {
			StableID   string `bun:"stable_id"`
			InternalID int64  `bun:"internal_id"`
		}
		if err := s.Reader.NewRaw("SELECT stable_id, internal_id FROM retired_user_ids").Scan(ctx, &retired); err != nil {
			t.Fatalf("no retired id recorded: %v", err)
		}
		if retired.StableID != u.StableID || retired.InternalID != u.ID {
			t.Fatalf("retired %+v, want %s/%d", retired, u.StableID, u.ID)
		}
		again := signup(t, svc, "gone")
		if again.StableID == u.StableID || again.ID <= u.ID {
			t.Fatalf("the new account reuses an id: %s/%d, deleted %s/%d", again.StableID, again.ID, u.StableID, u.ID)
		}
		now := time.Now().UTC()
		fresh := accounts.StableIDForEmail("x@example.com")
		if _, err := s.DB.NewRaw("INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, 'x@example.com', 'x', ?, ?)",
			u.StableID, now, now).Exec(ctx); err == nil {
			t.Error("an insert reusing the retired stable id was accepted")
		}
		if _, err := s.DB.NewRaw("INSERT INTO users (id, stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, 'x@example.com', 'x', ?, ?)",
			u.ID, fresh, now, now).Exec(ctx); err == nil {
			t.Error("an insert reusing the retired internal id was accepted")
		}
	})
}
