package accounts_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Mail tokens: only the newest of a purpose works, a token is taken once,
// peeking does not use it up, and the in-transaction hook rolls the token
// back when it fails.
func TestMailTokens(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, clock := newService(t, s, accounts.Config{})
		ann, bob := signup(t, svc, "ann"), signup(t, svc, "bob")
		first, err := svc.Identity.IssueMailToken(ctx, ann.ID, "verify_email", ann.Email, "", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		var seen string
		second, err := svc.Identity.IssueMailToken(ctx, ann.ID, "verify_email", ann.Email, "", time.Hour, func(ctx context.Context, tx bun.IDB, token string) error {
			seen = token
			return nil
		})
		if err != nil || seen != second || second == first {
			t.Fatalf("second token %q (hook saw %q): %v", second, seen, err)
		}
		bobs, err := svc.Identity.IssueMailToken(ctx, bob.ID, "verify_email", bob.Email, "", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Issuing the second expired the first (kept as a record).
		if row, err := svc.Identity.PeekMailToken(ctx, first, "verify_email"); err != nil || clock.Now().Before(row.ExpiresAt) {
			t.Fatalf("first token after the second: %+v %v", row, err)
		}
		if row, err := svc.Identity.PeekMailToken(ctx, second, "verify_email"); err != nil || row.UserID != ann.ID || !clock.Now().Before(row.ExpiresAt) {
			t.Fatalf("peek: %+v %v", row, err)
		}
		if _, err := svc.Identity.PeekMailToken(ctx, second, "reset_password"); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Fatalf("peek with another purpose: %v", err)
		}
		if row, err := svc.Identity.TakeMailToken(ctx, second, "verify_email"); err != nil || row.Email != ann.Email {
			t.Fatalf("take: %+v %v", row, err)
		}
		if _, err := svc.Identity.TakeMailToken(ctx, second, "verify_email"); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Fatalf("second take: %v", err)
		}
		// Retiring ann's tokens leaves bob's.
		if err := svc.Identity.RetireMailTokens(ctx, ann.ID, "verify_email"); err != nil {
			t.Fatal(err)
		}
		if row, err := svc.Identity.PeekMailToken(ctx, bobs, "verify_email"); err != nil || !clock.Now().Before(row.ExpiresAt) {
			t.Fatalf("bob's token after ann's were retired: %+v %v", row, err)
		}
		if rows, err := svc.Identity.MailTokenRecords(ctx, first); err != nil || len(rows) != 1 {
			t.Fatalf("records: %+v %v", rows, err)
		}
		// A failing hook leaves no token.
		var lost string
		_, err = svc.Identity.IssueMailToken(ctx, ann.ID, "change_email", "new@example.com", "", time.Hour, func(_ context.Context, _ bun.IDB, token string) error {
			lost = token
			return errors.New("outbox down")
		})
		if err == nil {
			t.Fatal("issue with a failing hook succeeded")
		}
		if _, err := svc.Identity.PeekMailToken(ctx, lost, "change_email"); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Fatalf("token of a failed issue: %v", err)
		}
	})
}
