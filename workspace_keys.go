package enclave

import (
	"context"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/workspaces"
)

// invitationLimit counts workspace invitations per inviter and UTC day in
// the quota meter (durable, shared by replicas): any account may create a
// workspace and invite any address, and each invitation is a mail the
// server sends. perDay 0 means workspaces.DefaultInvitationsPerDay;
// negative, no bound.
func (s *Server) invitationLimit(perDay int) func(ctx context.Context, c capabilities.Caller) error {
	if perDay < 0 {
		return nil
	}
	if perDay == 0 {
		perDay = workspaces.DefaultInvitationsPerDay
	}
	return func(ctx context.Context, c capabilities.Caller) error {
		return s.meter.AllowClass(ctx, c, workspaces.InvitationQuotaClass, int64(perDay))
	}
}

// wireWorkspaceKeys makes workspace API keys die with the password: a
// password change or reset, and every change of second factors that signs
// the account out everywhere (turning off the app, removing a passkey, new
// recovery codes), revokes the account's keys in its own transaction, as
// it revokes OAuth grants and sessions.
func (s *Server) wireWorkspaceKeys() {
	s.accounts.OnPasswordChange(s.workspaces.RevokeUserKeysInTx)
}

// reauthenticateKeyMaker is workspaces.Config.Reauthenticate: making a key
// takes the current password and, when the account has a second factor, a
// fresh proof of one (a code or a passkey assertion).
func (s *Server) reauthenticateKeyMaker(ctx context.Context, c capabilities.Caller, p workspaces.KeyProof) error {
	return s.accounts.ReauthenticateCaller(ctx, c, p.Password,
		accounts.FactorProof{Code: p.Code, PasskeyToken: p.PasskeyToken, PasskeyCredential: p.PasskeyCredential})
}
