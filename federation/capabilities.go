package federation

import (
	"context"
	"errors"

	"github.com/enclave-mcp/enclave/capabilities"
)

// IdentityListOutput is the output of identityList.
type IdentityListOutput struct {
	Identities []Identity `json:"identities"`
}

// IdentityUnlinkInput is the input of identityUnlink.
type IdentityUnlinkInput struct {
	ID int64 `json:"id" jsonschema:"the linked identity's id, from identityList"`
}

// IdentityUnlinkOutput is the output of identityUnlink.
type IdentityUnlinkOutput struct {
	Done bool `json:"done"`
}

// Capabilities returns identityList and identityUnlink: the signed-in
// person's linked identities, listed and removed (session-only, as the
// other sign-in settings). userOf resolves the caller to the account id.
func (s *Service) Capabilities(userOf capabilities.OwnerOf) []capabilities.Capability {
	read := capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.ReadUserOwn}, SessionOnly: true}
	write := capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}, SessionOnly: true, InteractiveOnly: true}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[struct{}, IdentityListOutput]{
			Name: "identityList", Domain: "account", Title: "List linked sign-in identities",
			Description: "Lists the external identities (Google, GitHub, a company's OpenID provider...) the signed-in person can sign in with: provider, issuer, subject and dates.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    read,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (IdentityListOutput, error) {
				o, err := userOf(ctx, call.Caller)
				if err != nil {
					return IdentityListOutput{}, err
				}
				ids, err := s.Identities(ctx, o.ID)
				if err != nil {
					return IdentityListOutput{}, err
				}
				return IdentityListOutput{Identities: ids}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[IdentityUnlinkInput, IdentityUnlinkOutput]{
			Name: "identityUnlink", Domain: "account", Title: "Remove a linked sign-in identity",
			Description: "Removes one of the signed-in person's linked external identities, so it no longer signs in to this account. Refused when it is the account's only way to sign in (no password, passkey or other identity).",
			Annotations: &capabilities.Annotations{Destructive: true},
			Requires:    write,
			Handler: func(ctx context.Context, call *capabilities.Call, in IdentityUnlinkInput) (IdentityUnlinkOutput, error) {
				o, err := userOf(ctx, call.Caller)
				if err != nil {
					return IdentityUnlinkOutput{}, err
				}
				switch err := s.Unlink(ctx, o.ID, in.ID); {
				case errors.Is(err, ErrNotFound):
					return IdentityUnlinkOutput{}, capabilities.Errorf(capabilities.CodeNotFound, "%s", ErrNotFound.Error())
				case errors.Is(err, ErrLastSignIn):
					return IdentityUnlinkOutput{}, capabilities.Errorf(capabilities.CodeConflict, "%s", ErrLastSignIn.Error())
				case err != nil:
					return IdentityUnlinkOutput{}, err
				}
				return IdentityUnlinkOutput{Done: true}, nil
			},
		}),
	}
}
