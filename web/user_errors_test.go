package web

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
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

// Every accounts error a page shows reaches capabilities' one table
// through accounts.CapabilityCode, and an entry that names its own status
// stays in the class of that table's (a refusal of the person's request,
// never a server error).
func TestUserErrorsGoThroughTheOneTable(t *testing.T) {
	for code, m := range userErrors {
		cc, ok := accounts.CapabilityCode(code)
		if !ok {
			t.Errorf("%s: no capabilities code", code)
			continue
		}
		base := capabilities.HTTPStatus(cc)
		if base < 400 || base >= 500 || (m.status != 0 && (m.status < 400 || m.status >= 500)) {
			t.Errorf("%s: status %d, table %d", code, m.status, base)
		}
		if m.status == base {
			t.Errorf("%s repeats the table's status %d: leave it 0", code, base)
		}
	}
}
