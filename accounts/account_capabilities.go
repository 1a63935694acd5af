package accounts

import (
	"context"
	"errors"

	"github.com/enclave-mcp/enclave/capabilities"
)

// PasswordChangeInput is the input of accountPasswordChange.
type PasswordChangeInput struct {
	Current string `json:"current" jsonschema:"the current password"`
	New     string `json:"new" jsonschema:"the new password"`
}

// PasswordChangeOutput is the output of accountPasswordChange.
type PasswordChangeOutput struct {
	Changed bool `json:"changed"`
}

// AccountCapabilities returns the capabilities a person uses on their own
// account from the web shell: accountPasswordChange. They are session-only
// (Requirement.SessionOnly): a credential is never handled by an agent.
func (s *Service) AccountCapabilities() []capabilities.Capability {
	own := capabilities.Requirement{
		Permissions: []capabilities.Permission{capabilities.UpdateUserOwn},
		SessionOnly: true, InteractiveOnly: true,
	}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[PasswordChangeInput, PasswordChangeOutput]{
			Name: "accountPasswordChange", Domain: "account", Title: "Change the password",
			Description: "Replaces the signed-in person's password after checking the current one. Every browser session and connected app issued before it stops working.",
			Annotations: &capabilities.Annotations{Destructive: true},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in PasswordChangeInput) (PasswordChangeOutput, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return PasswordChangeOutput{}, err
				}
				if _, err := s.ChangePassword(ctx, u.ID, in.Current, in.New); err != nil {
					return PasswordChangeOutput{}, capabilityError(err)
				}
				return PasswordChangeOutput{Changed: true}, nil
			},
		}),
	}
}

// callerUser loads the caller's own account.
func (s *Service) callerUser(ctx context.Context, c capabilities.Caller) (User, error) {
	u, err := s.UserByStableID(ctx, c.UserID)
	if errors.Is(err, ErrNotFound) {
		return u, capabilities.Errorf(capabilities.CodeNotFound, "no such account")
	}
	return u, err
}
