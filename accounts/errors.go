package accounts

import "errors"

// Domain errors. Transports map them to status codes in one table each; the
// messages are safe to show to the person who made the request.
var (
	// ErrInvalidCredentials: unknown email or wrong password (never told apart).
	ErrInvalidCredentials = errors.New("Invalid email or password.")
	// ErrEmailTaken: the address is the current email of an account.
	ErrEmailTaken = errors.New("An account with this email already exists.")
	// ErrEmailClaimed: the address is a former email still claimed by an
	// account. The message never reveals that account's current address.
	ErrEmailClaimed = errors.New("This email is still claimed by an account. Sign in with the email that account uses now, or release this address from its settings.")
	// ErrInvalidEmail: not a plausible email address.
	ErrInvalidEmail = errors.New("Enter a valid email address.")
	// ErrUsernameTaken: another account holds the username.
	ErrUsernameTaken = errors.New("This username is taken.")
	// ErrUsernameReserved: the username matches a reserved name.
	ErrUsernameReserved = errors.New("This username is reserved.")
	// ErrInvalidUsername: not 3–32 lowercase letters, digits and hyphens
	// with a letter or digit at both ends.
	ErrInvalidUsername = errors.New("Usernames are 3–32 lowercase letters, digits and hyphens, starting and ending with a letter or digit.")
	// ErrWeakPassword: the new password breaks the policy. Use errors.As
	// with *PasswordPolicyError for the reason.
	ErrWeakPassword = errors.New("The password does not meet the policy.")
	// ErrNotFound: no such account (or token).
	ErrNotFound = errors.New("Account not found.")
	// ErrSuspended: the account is suspended; it is refused everywhere.
	ErrSuspended = errors.New("This account is suspended.")
	// ErrDeleting: the account is being deleted; writes are refused.
	ErrDeleting = errors.New("This account is being deleted.")
	// ErrLastAdmin: removing the role, suspending or deleting the account
	// would leave no active admin.
	ErrLastAdmin = errors.New("This is the last admin that is active; grant admin to another active account first.")
	// ErrAdminRoleReserved: the admin role is granted and revoked only by
	// the operator, from the command line.
	ErrAdminRoleReserved = errors.New("The admin role is granted and revoked only by the operator, from the command line (enclave admin grant EMAIL, enclave admin revoke EMAIL).")
	// ErrSuspendSelf: an admin asked to suspend their own account.
	ErrSuspendSelf = errors.New("You cannot suspend your own account.")
	// ErrUnknownRole: no role has this name.
	ErrUnknownRole = errors.New("Unknown role.")
	// ErrNoSession: the request carries no valid session (missing, forged,
	// expired or revoked cookie).
	ErrNoSession = errors.New("Not signed in.")
	// ErrInvalidToken: a password-setup token is unknown, used or expired.
	ErrInvalidToken = errors.New("This link is invalid or has expired.")
	// ErrEmailUnverified: the operation needs a verified current email.
	ErrEmailUnverified = errors.New("Verify your current email address first.")
)

// PasswordPolicyError says why a new password was refused. It matches
// ErrWeakPassword with errors.Is.
type PasswordPolicyError struct {
	Reason string // a sentence fit for the person choosing the password
}

func (e *PasswordPolicyError) Error() string { return e.Reason }

// Is reports whether target is ErrWeakPassword.
func (e *PasswordPolicyError) Is(target error) bool { return target == ErrWeakPassword }
