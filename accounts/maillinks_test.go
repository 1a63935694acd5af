package accounts_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// refusal returns why err refused a link, failing t when err is not a
// *LinkError that also matches ErrInvalidToken.
func refusal(t *testing.T, err error) accounts.LinkRefusal {
	t.Helper()
	var le *accounts.LinkError
	if !errors.As(err, &le) || !errors.Is(err, accounts.ErrInvalidToken) {
		t.Fatalf("want a link refusal, got %v", err)
	}
	return le.Refusal
}

// The rules about mail links live in accounts: each refusal is typed, and
// Peek applies the same rules as Take without using the link up.
func TestMailLinkRules(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, clock := newService(t, s, accounts.Config{})
		ann := signup(t, svc, "ann")
		issue := func(u accounts.User, purpose, email string, ttl time.Duration) string {
			t.Helper()
			tok, err := svc.Identity.IssueMailToken(ctx, u.ID, purpose, email, "", ttl, nil)
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}

		// A good link: peek leaves it, take uses it up.
		tok := issue(ann, accounts.PurposeVerifyEmail, ann.Email, time.Hour)
		if row, err := svc.Identity.PeekMailLink(ctx, tok, accounts.PurposeVerifyEmail); err != nil || row.UserID != ann.ID {
			t.Fatalf("peek: %+v %v", row, err)
		}
		if row, err := svc.Identity.TakeMailLink(ctx, tok, accounts.PurposeVerifyEmail); err != nil || row.UserID != ann.ID {
			t.Fatalf("take: %+v %v", row, err)
		}
		_, err := svc.Identity.TakeMailLink(ctx, tok, accounts.PurposeVerifyEmail)
		if r := refusal(t, err); r != accounts.LinkUnknown {
			t.Fatalf("second take: refusal %d", r)
		}

		// Expired.
		tok = issue(ann, accounts.PurposeVerifyEmail, ann.Email, time.Hour)
		clock.Advance(time.Hour)
		_, err = svc.Identity.PeekMailLink(ctx, tok, accounts.PurposeVerifyEmail)
		if r := refusal(t, err); r != accounts.LinkExpired {
			t.Fatalf("expired peek: refusal %d", r)
		}
		_, err = svc.Identity.TakeMailLink(ctx, tok, accounts.PurposeVerifyEmail)
		if r := refusal(t, err); r != accounts.LinkExpired {
			t.Fatalf("expired take: refusal %d", r)
		}

		// Issued before the account existed.
		tok = issue(ann, accounts.PurposeVerifyEmail, ann.Email, time.Hour)
		if _, err := s.DB.NewUpdate().Table("mail_tokens").Set("created_at = ?", ann.CreatedAt.Add(-time.Minute)).
			Where("token_hash = ?", accounts.HashMailToken(tok)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = svc.Identity.TakeMailLink(ctx, tok, accounts.PurposeVerifyEmail)
		if r := refusal(t, err); r != accounts.LinkPredatesAccount {
			t.Fatalf("link older than its account: refusal %d", r)
		}

		// An email-change link dies with the password.
		clock.Advance(time.Minute)
		tok = issue(ann, accounts.PurposeChangeEmail, "ann.new@example.com", time.Hour)
		if _, err := svc.Identity.PeekMailLink(ctx, tok, accounts.PurposeChangeEmail); err != nil {
			t.Fatalf("email-change link before the password change: %v", err)
		}
		clock.Advance(time.Minute)
		if _, err := svc.Credentials.ChangePassword(ctx, ann.ID, goodPassword, goodPassword+" again"); err != nil {
			t.Fatal(err)
		}
		_, err = svc.Identity.PeekMailLink(ctx, tok, accounts.PurposeChangeEmail)
		if r := refusal(t, err); r != accounts.LinkPredatesPassword {
			t.Fatalf("email-change link after the password change: refusal %d", r)
		}

		// A reset link dies when the account leaves the address, on the
		// reset path and on the setup path.
		clock.Advance(time.Minute)
		tok = issue(ann, accounts.PurposeResetPassword, ann.Email, time.Hour)
		if _, err := svc.Identity.PeekMailLink(ctx, tok, accounts.PurposeResetPassword); err != nil {
			t.Fatalf("reset link: %v", err)
		}
		if err := svc.Credentials.CheckResetLink(ctx, tok); err != nil {
			t.Fatalf("reset link on the setup path: %v", err)
		}
		if _, err := s.DB.NewUpdate().Table("users").Set("email = ?", "ann.elsewhere@example.com").Where("id = ?", ann.ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = svc.Identity.PeekMailLink(ctx, tok, accounts.PurposeResetPassword)
		if r := refusal(t, err); r != accounts.LinkAddressLeft {
			t.Fatalf("reset link after the address changed: refusal %d", r)
		}
		if r := refusal(t, svc.Credentials.CheckResetLink(ctx, tok)); r != accounts.LinkAddressLeft {
			t.Fatalf("setup path after the address changed: refusal %d", r)
		}
		// An expired reset link is refused on the setup path too.
		bob := signup(t, svc, "bob")
		tok = issue(bob, accounts.PurposeResetPassword, bob.Email, time.Hour)
		clock.Advance(time.Hour)
		if r := refusal(t, svc.Credentials.CheckResetLink(ctx, tok)); r != accounts.LinkExpired {
			t.Fatalf("expired reset link on the setup path: refusal %d", r)
		}
		// A token never mailed as a reset link passes the setup-path check.
		if err := svc.Credentials.CheckResetLink(ctx, "never-issued"); err != nil {
			t.Fatalf("unknown token on the setup path: %v", err)
		}
	})
}
