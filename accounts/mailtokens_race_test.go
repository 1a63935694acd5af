package accounts_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// TestMailTokenTakenOnceUnderConcurrency: of many concurrent uses of one
// link, exactly one wins; a use under another purpose (a verification
// link posted to the reset or email-change form) fails without using the
// token up; and the token of a deleted account is gone.
func TestMailTokenTakenOnceUnderConcurrency(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		ann := signup(t, svc, "ann")
		tok, err := svc.Identity.IssueMailToken(ctx, ann.ID, accounts.PurposeVerifyEmail, ann.Email, "", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, other := range []string{"reset_password", accounts.PurposeChangeEmail} {
			if _, err := svc.Identity.TakeMailToken(ctx, tok, other); !errors.Is(err, accounts.ErrInvalidToken) {
				t.Fatalf("take as %s: %v", other, err)
			}
		}
		const n = 8
		var wins, losses atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Go(func() {
				<-start
				_, err := svc.Identity.TakeMailToken(ctx, tok, accounts.PurposeVerifyEmail)
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, accounts.ErrInvalidToken):
					losses.Add(1)
				default:
					t.Errorf("take: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		if wins.Load() != 1 || losses.Load() != n-1 {
			t.Fatalf("%d uses won, %d lost; want exactly one win", wins.Load(), losses.Load())
		}
		// A deleted account's tokens go with it.
		bob := signup(t, svc, "bob")
		bt, err := svc.Identity.IssueMailToken(ctx, bob.ID, "reset_password", bob.Email, "", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB.NewDelete().Table("users").Where("id = ?", bob.ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Identity.TakeMailToken(ctx, bt, "reset_password"); !errors.Is(err, accounts.ErrInvalidToken) {
			t.Fatalf("token of a deleted account: %v", err)
		}
	})
}
