package accounts

import "errors"

// Domain errors. Each is an *Error with its own Code; transports map codes
// to statuses in one table each (CodeOf, MessageOf), and errors.Is with
// these sentinels keeps working through wrapping. The messages are safe to
// show to the person who made the request.
var (
	// ErrInvalidCredentials: unknown email or wrong password (never told apart).
	ErrInvalidCredentials = newError(CodeInvalidCredentials, "Invalid email or password.")
	// ErrEmailTaken: the address is the current email of an account.
	ErrEmailTaken = newError(CodeEmailTaken, "An account with this email already exists.")
	// ErrEmailClaimed: the address is a former email still claimed by an
	// account. The message never reveals that account's current address.
	ErrEmailClaimed = newError(CodeEmailClaimed, "This email is still claimed by an account. Sign in with the email that account uses now, or release this address from its settings.")
	// ErrInvalidEmail: not a plausible email address.
	ErrInvalidEmail = newError(CodeInvalidEmail, "Enter a valid email address.")
	// ErrUsernameTaken: another account holds the username.
	ErrUsernameTaken = newError(CodeUsernameTaken, "This username is taken.")
	// ErrUsernameReserved: the username matches a reserved name.
	ErrUsernameReserved = newError(CodeUsernameReserved, "This username is reserved.")
	// ErrUsernamePermanent: a release of a name that is reserved for good
	// (PermanentReservedUsernames).
	ErrUsernamePermanent = newError(CodeUsernameReserved, "This name is reserved permanently and cannot be released.")
	// ErrUsernameCooldown: the account holder changed their username too
	// recently (Config.UsernameChangeCooldown).
	ErrUsernameCooldown = newError(CodeUsernameCooldown, "You changed your username recently. You can change it again later.")
	// ErrInvalidUsername: not 3–32 lowercase letters, digits and hyphens
	// with a letter or digit at both ends.
	ErrInvalidUsername = newError(CodeInvalidUsername, "Usernames are 3–32 lowercase letters, digits and hyphens, starting and ending with a letter or digit.")
	// ErrWeakPassword: the new password breaks the policy. Use errors.As
	// with *PasswordPolicyError for the reason.
	ErrWeakPassword = newError(CodeWeakPassword, "The password does not meet the policy.")
	// ErrNotFound: no such account (or token).
	ErrNotFound = newError(CodeNotFound, "Account not found.")
	// ErrSuspended: the account is suspended; it is refused everywhere.
	ErrSuspended = newError(CodeSuspended, "This account is suspended.")
	// ErrDeleting: the account is being deleted; writes are refused.
	ErrDeleting = newError(CodeDeleting, "This account is being deleted.")
	// ErrLastAdmin: removing the role, suspending or deleting the account
	// would leave no active admin.
	ErrLastAdmin = newError(CodeLastAdmin, "This is the last admin that is active; grant admin to another active account first.")
	// ErrAdminRoleReserved: the admin role is granted and revoked only by
	// the operator, from the command line.
	ErrAdminRoleReserved = newError(CodeAdminRoleReserved, "The admin role is granted and revoked only by the operator, from the command line (enclave admin grant EMAIL, enclave admin revoke EMAIL).")
	// ErrSuspendSelf: an admin asked to suspend their own account.
	ErrSuspendSelf = newError(CodeSuspendSelf, "You cannot suspend your own account.")
	// ErrUnknownRole: no role has this name.
	ErrUnknownRole = newError(CodeUnknownRole, "Unknown role.")
	// ErrNoSession: the request carries no valid session (missing, forged,
	// expired or revoked cookie).
	ErrNoSession = newError(CodeNoSession, "Not signed in.")
	// ErrInvalidToken: a password-setup token is unknown, used or expired.
	ErrInvalidToken = newError(CodeInvalidToken, "This link is invalid or has expired.")
	// ErrEmailUnverified: the operation needs a verified current email.
	ErrEmailUnverified = newError(CodeEmailUnverified, "Verify your current email address first.")
	// ErrSecondFactorInvalid: a second-factor code (authenticator app or
	// recovery code) is wrong or was already used.
	ErrSecondFactorInvalid = newError(CodeSecondFactorInvalid, "That code is not correct or was already used.")
	// ErrTOTPEnabled: an authenticator app is already set up.
	ErrTOTPEnabled = newError(CodeFactorConflict, "An authenticator app is already set up. Turn it off first to set up another one.")
	// ErrTOTPNotEnabled: no authenticator app is set up.
	ErrTOTPNotEnabled = newError(CodeFactorConflict, "No authenticator app is set up.")
	// ErrNoSecondFactor: the operation needs a second factor.
	ErrNoSecondFactor = newError(CodeFactorConflict, "Set up an authenticator app or a passkey first.")
	// ErrPendingLoginInvalid: a sign-in waiting for its second factor is
	// unknown, used, expired or out of attempts.
	ErrPendingLoginInvalid = newError(CodePendingLoginInvalid, "This sign-in expired. Sign in again.")
	// ErrPasskeyInvalid: a passkey ceremony failed (unknown or expired
	// challenge, a response that does not verify, an unknown passkey).
	ErrPasskeyInvalid = newError(CodePasskeyInvalid, "The passkey could not be verified. Try again.")
	// ErrPasskeyName: a passkey name is too long or holds control
	// characters.
	ErrPasskeyName = newError(CodeFactorInvalidInput, "Passkey names are at most 64 characters, without control characters.")
	// ErrFactorProofRequired: the action changes or relies on the account's
	// sign-in security and the account has a second factor: it needs a
	// fresh proof of one (a code or a passkey), not only the password.
	ErrFactorProofRequired = newError(CodeFactorProofRequired, "Confirm it is you with a code from your authenticator app, a recovery code or one of your passkeys.")
	// ErrAdminSecondFactorRequired: the server requires admins to have a
	// second factor and this admin has none.
	ErrAdminSecondFactorRequired = newError(CodeAdminSecondFactorRequired, AdminSecondFactorMessage)
)

// AdminSecondFactorMessage is the refusal given to an admin without a
// second factor when the server requires one.
const AdminSecondFactorMessage = "This server requires admins to use a second factor. Set up an authenticator app or a passkey on your account's security page (/account/security) first."

// PasswordPolicyError says why a new password was refused. It matches
// ErrWeakPassword with errors.Is.
type PasswordPolicyError struct {
	Reason string // a sentence fit for the person choosing the password
}

func (e *PasswordPolicyError) Error() string { return e.Reason }

// Is reports whether target is ErrWeakPassword.
func (e *PasswordPolicyError) Is(target error) bool { return target == ErrWeakPassword }

// Code names an accounts error independently of its message.
type Code string

// The codes of the domain errors (see the Err… sentinels).
const (
	CodeInvalidCredentials Code = "invalid_credentials"
	CodeEmailTaken         Code = "email_taken"
	CodeEmailClaimed       Code = "email_claimed"
	CodeInvalidEmail       Code = "invalid_email"
	CodeUsernameTaken      Code = "username_taken"
	CodeUsernameReserved   Code = "username_reserved"
	CodeInvalidUsername    Code = "invalid_username"
	CodeUsernameCooldown   Code = "username_cooldown"
	CodeWeakPassword       Code = "weak_password"
	CodeNotFound           Code = "not_found"
	CodeSuspended          Code = "suspended"
	CodeDeleting           Code = "deleting"
	CodeLastAdmin          Code = "last_admin"
	CodeAdminRoleReserved  Code = "admin_role_reserved"
	CodeSuspendSelf        Code = "suspend_self"
	CodeUnknownRole        Code = "unknown_role"
	CodeNoSession          Code = "no_session"
	CodeInvalidToken       Code = "invalid_token"
	CodeEmailUnverified    Code = "email_unverified"
	CodeSignupClosed       Code = "signup_closed"
	CodeInviteInvalid      Code = "invite_invalid"

	CodeSecondFactorInvalid       Code = "second_factor_invalid"
	CodeFactorConflict            Code = "factor_conflict"
	CodeFactorInvalidInput        Code = "factor_invalid_input"
	CodePendingLoginInvalid       Code = "pending_login_invalid"
	CodePasskeyInvalid            Code = "passkey_invalid"
	CodeAdminSecondFactorRequired Code = "admin_second_factor_required"
	CodeFactorProofRequired       Code = "factor_proof_required"
)

// Error is a domain error: a code and a message fit for the person who made
// the request. The Err… sentinels are *Error values; compare with errors.Is.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return e.Message }

func newError(code Code, message string) error { return &Error{Code: code, Message: message} }

// CodeOf returns the code of the accounts error inside err, or "" when err
// holds none. A *PasswordPolicyError is CodeWeakPassword.
func CodeOf(err error) Code {
	if _, ok := errors.AsType[*PasswordPolicyError](err); ok {
		return CodeWeakPassword
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return ""
}

// MessageOf returns the message of the accounts error inside err (the
// policy's reason for a *PasswordPolicyError), or "" when err holds none.
func MessageOf(err error) string {
	if pe, ok := errors.AsType[*PasswordPolicyError](err); ok {
		return pe.Reason
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Message
	}
	return ""
}
