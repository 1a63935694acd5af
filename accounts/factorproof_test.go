package accounts_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// factorRegistry registers the factor capabilities of svc.
func factorRegistry(t *testing.T, svc *accounts.Service) *capabilities.Registry {
	t.Helper()
	reg := capabilities.NewRegistry(capabilities.Options{})
	if err := reg.Register(svc.FactorCapabilities("enclave", nil)...); err != nil {
		t.Fatal(err)
	}
	return reg
}

func sessionCaller(t *testing.T, svc *accounts.Service, u accounts.User) capabilities.Caller {
	t.Helper()
	c, err := svc.LoadCaller(context.Background(), u.StableID)
	if err != nil {
		t.Fatal(err)
	}
	c.AllScopes, c.Interactive, c.Session = true, true, true
	return c
}

func invokeAs(t *testing.T, reg *capabilities.Registry, c capabilities.Caller, name string, in any) error {
	t.Helper()
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	_, err = reg.Invoke(context.Background(), c, name, raw)
	return err
}

// With a second factor on the account, the password alone no longer adds
// a factor or makes recovery codes (a borrowed session or a phished
// password would add the borrower's own): each needs a fresh code (the
// app's or a recovery code) or a passkey assertion of the account's own.
// A wrong password spends no code; an account without a factor still
// enrols with its password alone.
func TestAddingAFactorNeedsAProofOfAnother(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, c := newService(t, s, accounts.Config{})
		reg := factorRegistry(t, svc)
		ann := signup(t, svc, "ann")
		secret, codes := enrolTOTP(t, svc, c, ann)
		as := sessionCaller(t, svc, ann)

		for _, name := range []string{"accountPasskeyRegisterBegin", "accountRecoveryCodesReset"} {
			err := invokeAs(t, reg, as, name, accounts.PasswordInput{Password: goodPassword})
			if !errors.Is(err, accounts.ErrFactorProofRequired) || capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
				t.Fatalf("%s with the password alone: %v", name, err)
			}
			c.Advance(30 * time.Second)
			err = invokeAs(t, reg, as, name, accounts.PasswordInput{Password: goodPassword, Code: "000000"})
			if !errors.Is(err, accounts.ErrSecondFactorInvalid) && codeAt(t, secret, c.Now()) != "000000" {
				t.Fatalf("%s with a wrong code: %v", name, err)
			}
			err = invokeAs(t, reg, as, name, accounts.PasswordInput{Password: goodPassword, PasskeyToken: "forged", PasskeyCredential: map[string]any{"id": "x"}})
			if !errors.Is(err, accounts.ErrPasskeyInvalid) {
				t.Fatalf("%s with a forged passkey proof: %v", name, err)
			}
			// A wrong password is refused before the code is looked at:
			// the code still works afterwards.
			code := codeAt(t, secret, c.Now())
			err = invokeAs(t, reg, as, name, accounts.PasswordInput{Password: "not the password", Code: code})
			if ce, ok := errors.AsType[*capabilities.Error](err); !ok || !errors.Is(err, accounts.ErrInvalidCredentials) || ce.Message != "Your current password is not correct." {
				t.Fatalf("%s with a wrong password: %v", name, err)
			}
			if err := invokeAs(t, reg, as, name, accounts.PasswordInput{Password: goodPassword, Code: code}); err != nil {
				t.Fatalf("%s with password and code: %v", name, err)
			}
			// The code was used: it does not serve twice.
			if err := invokeAs(t, reg, as, name, accounts.PasswordInput{Password: goodPassword, Code: code}); !errors.Is(err, accounts.ErrSecondFactorInvalid) {
				t.Fatalf("%s with a replayed code: %v", name, err)
			}
		}
		// The recovery codes were replaced above: an old one is dead, and a
		// new one is a proof (spent).
		if err := invokeAs(t, reg, as, "accountPasskeyRegisterBegin", accounts.PasswordInput{Password: goodPassword, Code: codes[1]}); !errors.Is(err, accounts.ErrSecondFactorInvalid) {
			t.Fatalf("an old recovery code: %v", err)
		}

		// A passkey-only account: the authenticator app needs a proof too.
		bob := signup(t, svc, "bob")
		insertPasskey(t, s, bob.ID, "bob's laptop")
		bs := sessionCaller(t, svc, bob)
		if err := invokeAs(t, reg, bs, "accountTOTPBegin", accounts.PasswordInput{Password: goodPassword}); !errors.Is(err, accounts.ErrFactorProofRequired) {
			t.Fatalf("authenticator app beside a passkey, password alone: %v", err)
		}
		if f, _ := svc.SecondFactors.FactorsOf(ctx, bob.ID); f.TOTPPending {
			t.Fatal("a refused set-up left a pending enrolment")
		}

		// Without any factor the password alone enrols.
		cat := signup(t, svc, "cat")
		cs := sessionCaller(t, svc, cat)
		if err := invokeAs(t, reg, cs, "accountTOTPBegin", accounts.PasswordInput{Password: goodPassword}); err != nil {
			t.Fatalf("first factor with the password: %v", err)
		}
		if err := invokeAs(t, reg, cs, "accountPasskeyRegisterBegin", accounts.PasswordInput{Password: goodPassword}); err != nil {
			t.Fatalf("first passkey with the password: %v", err)
		}
	})
}

// A passkey proof ceremony belongs to the account that began it and to
// proofs only: another account, or a sign-in, cannot use its token.
func TestPasskeyProofCeremonyIsTheAccounts(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{Passkeys: accounts.PasskeyConfig{RPID: "localhost", Origins: []string{"http://localhost"}}})
		reg := factorRegistry(t, svc)
		ann, bob := signup(t, svc, "ann"), signup(t, svc, "bob")
		if err := invokeAs(t, reg, sessionCaller(t, svc, ann), "accountPasskeyProofBegin", struct{}{}); !errors.Is(err, accounts.ErrPasskeyInvalid) {
			t.Fatalf("a proof ceremony without a passkey: %v", err)
		}
		insertPasskey(t, s, ann.ID, "ann's laptop")
		insertPasskey(t, s, bob.ID, "bob's laptop")
		cer, err := svc.SecondFactors.BeginPasskeyProof(ctx, ann)
		if err != nil {
			t.Fatal(err)
		}
		var opts struct {
			PublicKey struct {
				Challenge        string `json:"challenge"`
				UserVerification string `json:"userVerification"`
				AllowCredentials []any  `json:"allowCredentials"`
			} `json:"publicKey"`
		}
		if err := json.Unmarshal(cer.Options, &opts); err != nil || opts.PublicKey.Challenge == "" || opts.PublicKey.UserVerification != "required" || len(opts.PublicKey.AllowCredentials) != 1 {
			t.Fatalf("proof options %s: %v", cer.Options, err)
		}
		cred := map[string]any{"id": "x", "type": "public-key"}
		// Bob cannot spend ann's ceremony.
		err = invokeAs(t, reg, sessionCaller(t, svc, bob), "accountRecoveryCodesReset", accounts.PasswordInput{Password: goodPassword, PasskeyToken: cer.Token, PasskeyCredential: cred})
		if !errors.Is(err, accounts.ErrPasskeyInvalid) {
			t.Fatalf("bob uses ann's proof ceremony: %v", err)
		}
		// Nor is it a sign-in ceremony.
		if _, err := svc.SecondFactors.FinishPasskeyLogin(ctx, cer.Token, []byte(`{"id":"x"}`)); !errors.Is(err, accounts.ErrPasskeyInvalid) {
			t.Fatalf("a proof ceremony as a sign-in: %v", err)
		}
	})
}

// ProvePasskey is a proof of the account itself: unlike ProveFactor it
// never passes an account without a second factor, and a ceremony of
// another account or a made-up one does not verify.
func TestProvePasskeyNeverPassesWithoutAnAssertion(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{Passkeys: accounts.PasskeyConfig{RPID: "localhost", Origins: []string{"http://localhost"}}})
		ann, bob := signup(t, svc, "ann"), signup(t, svc, "bob")
		// ann has no second factor: ProveFactor passes her, ProvePasskey not.
		if err := svc.SecondFactors.ProveFactor(ctx, ann, accounts.FactorProof{PasskeyToken: "made-up"}); err != nil {
			t.Fatalf("ProveFactor without a factor: %v", err)
		}
		for _, token := range []string{"", "made-up"} {
			if err := svc.SecondFactors.ProvePasskey(ctx, ann, token, []byte(`{"id":"x","type":"public-key"}`)); !errors.Is(err, accounts.ErrPasskeyInvalid) {
				t.Fatalf("ProvePasskey(%q) without a passkey: %v", token, err)
			}
		}
		insertPasskey(t, s, bob.ID, "bob's laptop")
		cer, err := svc.SecondFactors.BeginPasskeyProof(ctx, bob)
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.SecondFactors.ProvePasskey(ctx, ann, cer.Token, []byte(`{"id":"x","type":"public-key"}`)); !errors.Is(err, accounts.ErrPasskeyInvalid) {
			t.Fatalf("ann with bob's ceremony: %v", err)
		}
		if err := svc.SecondFactors.ProvePasskey(ctx, bob, cer.Token, []byte(`{"id":"x","type":"public-key"}`)); !errors.Is(err, accounts.ErrPasskeyInvalid) {
			t.Fatalf("a forged assertion: %v", err)
		}
	})
}
