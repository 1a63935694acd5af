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

// Concurrent uses of one recovery code: one wins, on both dialects, also
// when they complete two pending sign-ins (the two sign-in pages).
func TestRecoveryCodeRaceAcrossPendingSignIns(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, c := newService(t, s, accounts.Config{})
		u := signup(t, svc, "alice")
		_, codes := enrolTOTP(t, svc, c, u)
		var tokens []string
		for range 8 {
			tok, err := svc.SecondFactors.BeginPendingLogin(ctx, u, false)
			if err != nil {
				t.Fatal(err)
			}
			tokens = append(tokens, tok)
		}
		var ok atomic.Int32
		var wg sync.WaitGroup
		for _, tok := range tokens {
			wg.Go(func() {
				if _, err := svc.SecondFactors.CompletePendingLogin(ctx, tok, codes[0]); err == nil {
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		if ok.Load() != 1 {
			t.Fatalf("%d sign-ins with one recovery code", ok.Load())
		}
	})
}

// Parallel wrong codes on one pending sign-in: at most five are checked.
func TestPendingAttemptsRace(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, c := newService(t, s, accounts.Config{})
		u := signup(t, svc, "alice")
		enrolTOTP(t, svc, c, u)
		c.Advance(30 * time.Second)
		tok, err := svc.SecondFactors.BeginPendingLogin(ctx, u, false)
		if err != nil {
			t.Fatal(err)
		}
		var checked atomic.Int32
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if _, err := svc.SecondFactors.CompletePendingLogin(ctx, tok, "000001"); errors.Is(err, accounts.ErrSecondFactorInvalid) {
					checked.Add(1)
				}
			})
		}
		wg.Wait()
		if checked.Load() > 5 {
			t.Fatalf("%d codes checked on one pending sign-in", checked.Load())
		}
	})
}

// An unfinished authenticator-app set-up expires: its secret is no longer
// shown, and a code from it no longer turns the app on (a session borrowed
// later cannot read the secret, or finish the set-up and take the
// recovery codes). A new set-up works.
func TestTOTPEnrolmentExpires(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, c := newService(t, s, accounts.Config{})
		u := signup(t, svc, "alice")
		e, err := svc.SecondFactors.BeginTOTP(ctx, u, "enclave")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.SecondFactors.PendingTOTP(ctx, u); err != nil {
			t.Fatalf("fresh set-up: %v", err)
		}
		c.Advance(accounts.TOTPEnrolmentTTL + time.Second)
		if got, err := svc.SecondFactors.PendingTOTP(ctx, u); err == nil {
			t.Fatalf("an expired set-up still shows its secret %q", got.Secret)
		}
		if f, _ := svc.SecondFactors.FactorsOf(ctx, u.ID); f.TOTPPending {
			t.Fatal("an expired set-up still counts as pending")
		}
		if _, err := svc.SecondFactors.ConfirmTOTP(ctx, u, codeAt(t, e.Secret, c.Now())); err == nil {
			t.Fatal("an expired set-up was confirmed")
		}
		if f, _ := svc.SecondFactors.FactorsOf(ctx, u.ID); f.TOTP {
			t.Fatal("the app is on")
		}
		enrolTOTP(t, svc, c, u)
	})
}
