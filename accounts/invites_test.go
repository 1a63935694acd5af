package accounts_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestSignupModes(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		in := func(name, code string) accounts.SignupInput {
			return accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "a long password for " + name, InviteCode: code}
		}

		closed, _ := newService(t, st, accounts.Config{Signup: accounts.SignupClosed})
		if _, err := closed.Identity.Signup(ctx, in("closed", "")); !errors.Is(err, accounts.ErrSignupClosed) {
			t.Fatalf("closed sign-up: %v", err)
		}
		if _, _, err := closed.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "op@example.com", Username: "opsperson"}); err != nil {
			t.Fatalf("an operator creates accounts when sign-up is closed: %v", err)
		}

		svc, clock := newService(t, st, accounts.Config{Signup: accounts.SignupInvite})
		if _, err := svc.Identity.Signup(ctx, in("nocode", "")); !errors.Is(err, accounts.ErrInviteInvalid) {
			t.Fatalf("invite sign-up without a code: %v", err)
		}
		code, inv, err := svc.Identity.CreateInvite(ctx, "for ann", 0)
		if err != nil || inv.ExpiresAt.Sub(inv.CreatedAt) != accounts.DefaultInviteTTL {
			t.Fatalf("create invite: %+v %v", inv, err)
		}
		// A failed sign-up (the email is taken) leaves the code unused.
		if _, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "op@example.com", Username: "someone", Password: "a long password for someone", InviteCode: code}); err == nil {
			t.Fatal("signed up with a taken email")
		}
		if _, err := svc.Identity.Signup(ctx, in("ann", code)); err != nil {
			t.Fatalf("sign-up with the code: %v", err)
		}
		if _, err := svc.Identity.Signup(ctx, in("bob", code)); !errors.Is(err, accounts.ErrInviteInvalid) {
			t.Fatalf("a used code worked again: %v", err)
		}
		old, _, _ := svc.Identity.CreateInvite(ctx, "", time.Hour)
		clock.Advance(2 * time.Hour)
		if _, err := svc.Identity.Signup(ctx, in("carl", old)); !errors.Is(err, accounts.ErrInviteInvalid) {
			t.Fatalf("an expired code worked: %v", err)
		}
		list, err := svc.Identity.Invites(ctx)
		if err != nil || len(list) != 2 || list[1].UsedAt == nil || list[0].UsedAt != nil || list[1].Note != "for ann" {
			t.Fatalf("invites: %+v %v", list, err)
		}

		// Through the capabilities: admins only, and the code once.
		reg := capabilities.NewRegistry(capabilities.Options{})
		if err := reg.Register(svc.InviteCapabilities()...); err != nil {
			t.Fatal(err)
		}
		admin := capabilities.Caller{UserID: "a", Roles: []string{capabilities.RoleAdmin}, State: capabilities.AccountActive, AllScopes: true, Interactive: true}
		user := capabilities.Caller{UserID: "u", Roles: []string{"user"}, State: capabilities.AccountActive, AllScopes: true, Interactive: true}
		if _, err := reg.Invoke(ctx, user, "adminInviteCreate", json.RawMessage(`{}`)); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("a user makes an invite: %v", err)
		}
		if _, err := reg.Invoke(ctx, admin, "adminInviteCreate", json.RawMessage(`{"expiresInDays":400}`)); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("400 days: %v", err)
		}
		res, err := reg.Invoke(ctx, admin, "adminInviteCreate", json.RawMessage(`{"note":"dora","expiresInDays":3}`))
		if err != nil {
			t.Fatal(err)
		}
		out := res.Structured.(accounts.InviteCreateOutput)
		if _, err := svc.Identity.Signup(ctx, in("dora", out.Code)); err != nil {
			t.Fatalf("sign-up with a capability's code: %v", err)
		}
		res, err = reg.Invoke(ctx, admin, "adminInviteList", json.RawMessage(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(res.Structured)
		if json.Valid(b) && containsCode(string(b), out.Code) {
			t.Fatal("the list shows a code")
		}
		if ok, err := svc.Identity.RevokeInvite(ctx, list[0].ID); err != nil || !ok {
			t.Fatalf("revoke: %v %v", ok, err)
		}
	})
}

func containsCode(s, code string) bool { return code != "" && strings.Contains(s, code) }

// In invite mode, a sign-up without a valid code learns nothing: a taken
// email, a taken username and a free pair all answer ErrInviteInvalid (the
// transports answer a taken email like a success, so checking the email
// first would tell a code-less visitor which addresses are registered), and
// a revoked code is refused like an unknown one.
func TestInviteSignupRevealsNothingWithoutACode(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, st, accounts.Config{Signup: accounts.SignupInvite})
		if _, _, err := svc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "known@example.com", Username: "known", Password: goodPassword}); err != nil {
			t.Fatal(err)
		}
		for _, in := range []accounts.SignupInput{
			{Email: "known@example.com", Username: "fresh", Password: goodPassword, InviteCode: "NOT-A-CODE"},
			{Email: "KNOWN@example.com", Username: "fresh", Password: goodPassword, InviteCode: ""},
			{Email: "fresh@example.com", Username: "known", Password: goodPassword, InviteCode: "NOT-A-CODE"},
			{Email: "fresh@example.com", Username: "fresh", Password: goodPassword, InviteCode: "NOT-A-CODE"},
		} {
			if _, err := svc.Identity.Signup(ctx, in); !errors.Is(err, accounts.ErrInviteInvalid) {
				t.Fatalf("sign-up %s/%s with code %q: %v, want ErrInviteInvalid", in.Email, in.Username, in.InviteCode, err)
			}
		}
		code, inv, err := svc.Identity.CreateInvite(ctx, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := svc.Identity.RevokeInvite(ctx, inv.ID); !ok || err != nil {
			t.Fatalf("revoke: %v %v", ok, err)
		}
		if _, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: "known@example.com", Username: "fresh", Password: goodPassword, InviteCode: code}); !errors.Is(err, accounts.ErrInviteInvalid) {
			t.Fatalf("revoked code: %v", err)
		}
	})
}

// One code, many sign-ups at once: exactly one account is opened.
func TestInviteSpentOnceUnderConcurrency(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, st, accounts.Config{Signup: accounts.SignupInvite})
		code, _, err := svc.Identity.CreateInvite(ctx, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		const n = 6
		errs := make(chan error, n)
		for i := range n {
			go func() {
				name := fmt.Sprintf("racer%d", i)
				_, err := svc.Identity.Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: goodPassword, InviteCode: code})
				errs <- err
			}()
		}
		ok := 0
		for range n {
			err := <-errs
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, accounts.ErrInviteInvalid):
				t.Errorf("concurrent sign-up: %v", err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d sign-ups with one code, want 1", ok)
		}
		c, err := svc.Roles.CountUsers(ctx, time.Time{})
		if err != nil || c.Total != 1 {
			t.Fatalf("accounts: %+v %v", c, err)
		}
	})
}

// A sign-up mode the package does not know is refused when the service is
// made, never read as open (the switch in Signup lets anything else
// through).
func TestUnknownSignupModeRefused(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		for _, mode := range []accounts.SignupMode{"Closed", "invite-only", " closed", "none"} {
			svc, err := accounts.New(context.Background(), st, accounts.Config{Signup: mode, Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}, Logger: quietLogger()})
			if err == nil {
				_, serr := svc.Identity.Signup(context.Background(), accounts.SignupInput{Email: "x@example.com", Username: "xperson", Password: goodPassword})
				t.Fatalf("mode %q accepted (sign-up: %v, mode %q)", mode, serr, svc.Identity.SignupMode())
			}
		}
		svc, err := accounts.New(context.Background(), st, accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}, Logger: quietLogger()})
		if err != nil || svc.Identity.SignupMode() != accounts.SignupOpen {
			t.Fatalf("default mode: %v", err)
		}
	})
}
