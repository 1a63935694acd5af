package oauth

import (
	"context"
	"errors"

	"github.com/enclave-mcp/enclave/capabilities"
)

// GrantListOutput is the output of oauthGrantList.
type GrantListOutput struct {
	Grants []Grant `json:"grants"`
}

// GrantRevokeInput is the input of oauthGrantRevoke.
type GrantRevokeInput struct {
	ID string `json:"id" jsonschema:"the id of the grant, from oauthGrantList"`
}

// GrantRevokeOutput is the output of oauthGrantRevoke.
type GrantRevokeOutput struct {
	Revoked bool `json:"revoked"`
}

// Capabilities returns oauthGrantList and oauthGrantRevoke: the caller's
// connected apps, and ending one of them. Both act on the caller's own
// grants only.
func (s *Server) Capabilities(owner capabilities.OwnerOf) []capabilities.Capability {
	return GrantCapabilities(s, owner)
}

// GrantStore lists and revokes the grants of one user; *Server implements
// it.
type GrantStore interface {
	Grants(ctx context.Context, userID int64) ([]Grant, error)
	RevokeGrant(ctx context.Context, userID int64, grantID string) error
}

// GrantCapabilities returns oauthGrantList and oauthGrantRevoke on s (see
// Server.Capabilities). Revoking is interactive-only: a person decides.
func GrantCapabilities(s GrantStore, owner capabilities.OwnerOf) []capabilities.Capability {
	own := func(p capabilities.Permission) capabilities.Requirement {
		return capabilities.Requirement{Permissions: []capabilities.Permission{p}}
	}
	revoke := own(capabilities.UpdateUserOwn)
	revoke.InteractiveOnly = true
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[struct{}, GrantListOutput]{
			Name: "oauthGrantList", Domain: "account", Title: "List connected apps",
			Description: "Lists the apps (OAuth clients) the signed-in user has connected: client name, scopes, when each was approved and last used.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    own(capabilities.ReadUserOwn),
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (GrantListOutput, error) {
				o, err := owner(ctx, call.Caller)
				if err != nil {
					return GrantListOutput{}, err
				}
				grants, err := s.Grants(ctx, o.ID)
				if grants == nil {
					grants = []Grant{}
				}
				return GrantListOutput{Grants: grants}, err
			},
		}),
		capabilities.Define(capabilities.Spec[GrantRevokeInput, GrantRevokeOutput]{
			Name: "oauthGrantRevoke", Domain: "account", Title: "Disconnect an app",
			Description: "Revokes one of the signed-in user's connected apps: its access and refresh tokens stop working at once. Revoking a grant that does not exist reports revoked: false.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    revoke,
			Handler: func(ctx context.Context, call *capabilities.Call, in GrantRevokeInput) (GrantRevokeOutput, error) {
				o, err := owner(ctx, call.Caller)
				if err != nil {
					return GrantRevokeOutput{}, err
				}
				err = s.RevokeGrant(ctx, o.ID, in.ID)
				if errors.Is(err, ErrGrantNotFound) {
					return GrantRevokeOutput{Revoked: false}, nil
				}
				return GrantRevokeOutput{Revoked: err == nil}, err
			},
		}),
	}
}
