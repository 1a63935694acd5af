package accounts

import (
	"errors"
	"fmt"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
)

// Every domain error has a code of its own that survives wrapping, and
// errors.Is with the sentinels keeps working; the capabilities transport
// maps by code, with the message (or the policy's reason) kept.
func TestErrorCodes(t *testing.T) {
	sentinels := []error{ErrInvalidCredentials, ErrEmailTaken, ErrEmailClaimed, ErrInvalidEmail, ErrUsernameTaken,
		ErrUsernameReserved, ErrInvalidUsername, ErrWeakPassword, ErrNotFound, ErrSuspended, ErrDeleting, ErrLastAdmin,
		ErrAdminRoleReserved, ErrSuspendSelf, ErrUnknownRole, ErrNoSession, ErrInvalidToken, ErrEmailUnverified,
		ErrSignupClosed, ErrInviteInvalid, ErrUsernameCooldown}
	seen := map[Code]error{}
	for _, s := range sentinels {
		code := CodeOf(s)
		if code == "" {
			t.Fatalf("%q has no code", s)
		}
		if other, dup := seen[code]; dup {
			t.Fatalf("%q and %q share code %s", s, other, code)
		}
		seen[code] = s
		wrapped := fmt.Errorf("accounts: update user 7: %w", s)
		if !errors.Is(wrapped, s) || CodeOf(wrapped) != code || MessageOf(wrapped) != s.Error() {
			t.Fatalf("wrapped %q: Is %v, code %q, message %q", s, errors.Is(wrapped, s), CodeOf(wrapped), MessageOf(wrapped))
		}
		for _, o := range sentinels {
			if o != s && errors.Is(wrapped, o) {
				t.Fatalf("%q matches %q", s, o)
			}
		}
	}
	if CodeOf(errors.New("disk full")) != "" || MessageOf(errors.New("disk full")) != "" || CodeOf(nil) != "" {
		t.Fatal("a foreign error has an accounts code or message")
	}
	policy := fmt.Errorf("set password: %w", &PasswordPolicyError{Reason: "Use at least 12 characters."})
	if CodeOf(policy) != CodeWeakPassword || MessageOf(policy) != "Use at least 12 characters." || !errors.Is(policy, ErrWeakPassword) {
		t.Fatalf("policy error: code %q message %q", CodeOf(policy), MessageOf(policy))
	}
	var ce *capabilities.Error
	if !errors.As(capabilityError(policy), &ce) || ce.Code != capabilities.CodeInvalidInput || ce.Message != "Use at least 12 characters." {
		t.Fatalf("policy over capabilities: %+v", ce)
	}
	if !errors.As(capabilityError(fmt.Errorf("x: %w", ErrLastAdmin)), &ce) || ce.Code != capabilities.CodeConflict || ce.Message != ErrLastAdmin.Error() || !errors.Is(ce, ErrLastAdmin) {
		t.Fatalf("last admin over capabilities: %+v", ce)
	}
	if err := capabilityError(ErrNoSession); errors.As(err, &ce) {
		t.Fatalf("an unmapped accounts error became %+v", ce)
	}
}
