package web

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
)

// userError maps accounts errors by code, wrapped or not, in one table:
// the status, and the domain's message unless the table gives its own.
func TestUserErrorTable(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		msg    string
	}{
		{fmt.Errorf("accounts: create: %w", accounts.ErrEmailTaken), http.StatusConflict, accounts.ErrEmailTaken.Error()},
		{accounts.ErrInvalidCredentials, http.StatusUnauthorized, accounts.ErrInvalidCredentials.Error()},
		{fmt.Errorf("x: %w", accounts.ErrSuspended), http.StatusForbidden, accounts.ErrSuspended.Error()},
		{fmt.Errorf("x: %w", &accounts.PasswordPolicyError{Reason: "Too short."}), http.StatusUnprocessableEntity, "Too short."},
		{fmt.Errorf("redeem: %w", accounts.ErrInviteInvalid), http.StatusBadRequest, "That invite code is unknown, already used or expired."},
		{accounts.ErrSignupClosed, http.StatusForbidden, "Sign-up is closed on this server."},
		{accounts.ErrNotFound, http.StatusNotFound, accounts.ErrNotFound.Error()},
	} {
		status, msg, ok := userError(tc.err)
		if !ok || status != tc.status || msg != tc.msg {
			t.Errorf("%v: %d %q %v, want %d %q", tc.err, status, msg, ok, tc.status, tc.msg)
		}
	}
	for _, err := range []error{errors.New("disk full"), accounts.ErrNoSession, accounts.ErrSuspendSelf} {
		if status, msg, ok := userError(err); ok {
			t.Errorf("%v: mapped to %d %q", err, status, msg)
		}
	}
}
