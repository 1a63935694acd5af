package verifiers_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/enclave-mcp/enclave/mcp/verifiers"
	"github.com/enclave-mcp/enclave/oauth"
)

func TestRefusalReasons(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrTokenMalformed), "malformed"},
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrTokenExpired), "expired"},
		{fmt.Errorf("%w: %w [https://other/mcp]", oauth.ErrInvalidToken, oauth.ErrWrongAudience), "wrong_audience"},
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrTokenUnknown), "unknown_or_revoked"},
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrPasswordChanged), "revoked_by_password_change"},
		{errors.New("expired, but not from oauth"), "invalid"},
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrAccountSuspended), "account_suspended"},
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrAccountDeleting), "account_deleting"},
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrClientBlocked), "client_blocked"},
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrEmailNotVerified), "email_not_verified"},
		{errors.New("anything else"), "invalid"},
	} {
		if got := verifiers.RefusalReason(tc.err); got != tc.want {
			t.Errorf("RefusalReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
