package accounts

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/enclave-mcp/enclave/capabilities"
)

// The operator's capabilities: the command line's account actions, run
// through the registry's choke point with capabilities.OperatorCaller (and
// so audited there, with the operator as the actor). No other caller sees
// or runs them.

// OperatorUserRef names an account by its email address: the operator's
// handle on an account at the command line.
type OperatorUserRef struct {
	Email string `json:"email" jsonschema:"the account's email address (compared case-insensitively)"`
}

// OperatorUser is what the operator's capabilities answer about an
// account.
type OperatorUser struct {
	StableUserID string `json:"stableUserId" jsonschema:"the account's stable user id"`
	Email        string `json:"email"`
	Username     string `json:"username"`
}

// OperatorUserOutput is the account an operator action was about and
// whether the action changed it.
type OperatorUserOutput struct {
	User    OperatorUser `json:"user"`
	Changed bool         `json:"changed" jsonschema:"false when the account already was as asked"`
}

// OperatorUserCreateInput is the input of operatorUserCreate.
type OperatorUserCreateInput struct {
	Email    string `json:"email" jsonschema:"the new account's email address"`
	Username string `json:"username" jsonschema:"3-32 lowercase letters, digits and hyphens"`
	Password string `json:"password,omitempty" jsonschema:"the account's password; without it the answer carries a one-time password-setup token"`
	Verified bool   `json:"verified,omitempty" jsonschema:"mark the email address verified"`
}

// OperatorUserCreateOutput is the created account and, when it was created
// without a password, its one-time password-setup token (see
// PasswordSetupURL), for the operator to hand to the person.
type OperatorUserCreateOutput struct {
	User       OperatorUser `json:"user"`
	SetupToken string       `json:"setupToken,omitempty" jsonschema:"the one-time password-setup token; absent when a password was given"`
}

// OperatorUserOf is the operator's view of u.
func OperatorUserOf(u User) OperatorUser {
	return OperatorUser{StableUserID: u.StableID, Email: u.Email, Username: u.Username}
}

// OperatorAccount finds the account of email for an operator capability
// and names it as the call's subject (capabilities.Call.SetSubject), so
// the choke point's audit row says which account the operator acted on.
// An unknown address is refused as not found, with a sentence naming it.
func (s *Roles) OperatorAccount(ctx context.Context, call *capabilities.Call, email string) (User, error) {
	u, err := s.identity.UserByEmail(ctx, email)
	if errors.Is(err, ErrNotFound) {
		return u, capabilities.Errorf(capabilities.CodeNotFound, "no account has the email %s", strings.ToLower(strings.TrimSpace(email)))
	}
	if err != nil {
		return u, err
	}
	call.SetSubject(u.StableID)
	return u, nil
}

// OperatorCapabilities returns the operator's account capabilities
// (capabilities.Requirement.Operator), one per account action of the
// command line: operatorAdminGrant and operatorAdminRevoke (the only way
// the admin role is granted or revoked), operatorUserSuspend,
// operatorUserUnsuspend, operatorUserCreate and operatorSessionKeyRotate.
// They make the same domain calls as the admin capabilities where one
// exists (Suspend, Unsuspend, the account creation). Domain errors keep
// their codes (ErrLastAdmin is a conflict whose message names the
// account).
func (s *Service) OperatorCapabilities() []capabilities.Capability {
	op := capabilities.Requirement{Operator: true}
	// change runs one state change on the account of in.Email.
	change := func(name, title, desc string, destructive bool, do func(ctx context.Context, id int64) (bool, error)) capabilities.Capability {
		return capabilities.Define(capabilities.Spec[OperatorUserRef, OperatorUserOutput]{
			Name: name, Domain: "operator", Title: title, Description: desc,
			Annotations: &capabilities.Annotations{Destructive: destructive, Idempotent: true},
			Requires:    op,
			Handler: func(ctx context.Context, call *capabilities.Call, in OperatorUserRef) (OperatorUserOutput, error) {
				u, err := s.Roles.OperatorAccount(ctx, call, in.Email)
				if err != nil {
					return OperatorUserOutput{}, err
				}
				changed, err := do(ctx, u.ID)
				if errors.Is(err, ErrLastAdmin) {
					return OperatorUserOutput{}, &capabilities.Error{Code: capabilities.CodeConflict,
						Message: fmt.Sprintf("%s (%s) is the last admin", u.Email, u.Username), Err: err}
				}
				if err != nil {
					return OperatorUserOutput{}, capabilityError(err)
				}
				return OperatorUserOutput{User: OperatorUserOf(u), Changed: changed}, nil
			},
		})
	}
	return []capabilities.Capability{
		change("operatorAdminGrant", "Grant admin",
			"Gives an account the admin role. The operator's alone: no other path grants admin.", false, s.Roles.GrantAdminAsOperator),
		change("operatorAdminRevoke", "Revoke admin",
			"Takes the admin role from an account; refused for the last active admin. The operator's alone.", true, s.Roles.RevokeAdminAsOperator),
		change("operatorUserSuspend", "Suspend an account",
			"Suspends an account: its sessions, tokens and calls are refused until it is unsuspended. Refused for the last active admin.", true, s.Lifecycle.Suspend),
		change("operatorUserUnsuspend", "Unsuspend an account",
			"Lifts an account's suspension.", false, s.Lifecycle.Unsuspend),
		capabilities.Define(capabilities.Spec[OperatorUserCreateInput, OperatorUserCreateOutput]{
			Name: "operatorUserCreate", Domain: "operator", Title: "Create an account",
			Description: "Creates an account with the role user. Without a password the answer carries a one-time password-setup token for the person.",
			Annotations: &capabilities.Annotations{}, Requires: op,
			Handler: func(ctx context.Context, call *capabilities.Call, in OperatorUserCreateInput) (OperatorUserCreateOutput, error) {
				u, token, err := s.Identity.CreateUser(ctx, CreateUserInput{Email: in.Email, Username: in.Username, Password: in.Password, Verified: in.Verified})
				if err != nil {
					return OperatorUserCreateOutput{}, capabilityError(err)
				}
				call.SetSubject(u.StableID)
				return OperatorUserCreateOutput{User: OperatorUserOf(u), SetupToken: token}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, struct{}]{
			Name: "operatorSessionKeyRotate", Domain: "operator", Title: "Rotate the session signing key",
			Description: "Makes a new session signing key; sessions signed with earlier keys stay valid until they expire.",
			Annotations: &capabilities.Annotations{}, Requires: op,
			Handler: func(ctx context.Context, _ *capabilities.Call, _ struct{}) (struct{}, error) {
				return struct{}{}, s.Credentials.RotateSessionKey(ctx)
			},
		}),
	}
}
