package accounts_test

import (
	"context"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A link is bound to its purpose and account: taking it under another
// purpose is refused without using it up, peeking never uses it up, and a
// deleted account's link no longer works.
func TestMailLinkPurposeAndAccount(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		ann := signup(t, svc, "ann")
		tok, err := svc.Identity.IssueMailToken(ctx, ann.ID, accounts.PurposeChangeEmail, "ann.new@example.com", "", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{accounts.PurposeVerifyEmail, accounts.PurposeResetPassword} {
			_, err := svc.Identity.TakeMailLink(ctx, tok, p)
			if r := refusal(t, err); r != accounts.LinkUnknown {
				t.Fatalf("take as %s: refusal %d", p, r)
			}
			_, err = svc.Identity.PeekMailLink(ctx, tok, p)
			if r := refusal(t, err); r != accounts.LinkUnknown {
				t.Fatalf("peek as %s: refusal %d", p, r)
			}
		}
		for range 2 {
			if row, err := svc.Identity.PeekMailLink(ctx, tok, accounts.PurposeChangeEmail); err != nil || row.UserID != ann.ID || row.Email != "ann.new@example.com" {
				t.Fatalf("peek: %+v %v", row, err)
			}
		}
		if row, err := svc.Identity.TakeMailLink(ctx, tok, accounts.PurposeChangeEmail); err != nil || row.UserID != ann.ID {
			t.Fatalf("take after refused mismatches: %+v %v", row, err)
		}

		// A deleted account's links are refused on every path.
		bob := signup(t, svc, "bob")
		verify, err := svc.Identity.IssueMailToken(ctx, bob.ID, accounts.PurposeVerifyEmail, bob.Email, "", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		reset, err := svc.Identity.IssueMailToken(ctx, bob.ID, accounts.PurposeResetPassword, bob.Email, "", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB.NewDelete().Table("users").Where("id = ?", bob.ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.PeekMailLink(ctx, verify, accounts.PurposeVerifyEmail); err == nil {
			t.Fatal("verify link of a deleted account peeked")
		}
		if _, err := svc.Identity.TakeMailLink(ctx, reset, accounts.PurposeResetPassword); err == nil {
			t.Fatal("reset link of a deleted account taken")
		}
	})
}
