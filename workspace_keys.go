package enclave

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/workspaces"
)

// workspaceKeyVerifier accepts workspace API keys (workspaces.KeyPrefix)
// as bearer tokens at /mcp and hands every other token to next. A key's
// caller is its maker's account, loaded fresh (state, so a suspended or
// deleting account is refused as for a token), confined to the workspace
// capabilities (Caller.Only) and carrying the key (Caller.Credential),
// which the workspaces service looks up again on every call: a revoked
// key stops at once, and a key never reaches another workspace.
type workspaceKeyVerifier struct {
	next mcp.TokenVerifier
	s    *Server
}

func (v workspaceKeyVerifier) VerifyToken(ctx context.Context, token string) (mcp.TokenInfo, error) {
	if !strings.HasPrefix(token, workspaces.KeyPrefix) {
		return v.next.VerifyToken(ctx, token)
	}
	g, err := v.s.workspaces.VerifyKey(ctx, token)
	if errors.Is(err, workspaces.ErrInvalidKey) {
		return mcp.TokenInfo{}, fmt.Errorf("%w: workspace key", mcp.ErrInvalidToken)
	}
	if err != nil {
		return mcp.TokenInfo{}, fmt.Errorf("%w: %w", mcp.ErrTokenUnavailable, err)
	}
	caller, err := v.s.accounts.LoadCaller(ctx, g.UserID)
	if errors.Is(err, capabilities.ErrUnknownUser) {
		return mcp.TokenInfo{}, fmt.Errorf("%w: workspace key of a removed account", mcp.ErrInvalidToken)
	}
	if err != nil {
		return mcp.TokenInfo{}, fmt.Errorf("%w: %w", mcp.ErrTokenUnavailable, err)
	}
	// The account's own roles and permissions do not ride on a key.
	caller.Roles, caller.Permissions = nil, nil
	caller.Only, caller.Credential = g.Only, g.Credential
	return mcp.TokenInfo{UserID: g.UserID, Audience: []string{v.s.mcp.Resource()}, Caller: &caller}, nil
}

// auditWorkspace records workspace key creation and revocation.
func (s *Server) auditWorkspace(ctx context.Context, action, userID, detail string) {
	_ = s.audit.Record(ctx, audit.Event{
		Category: audit.CategoryAccount, Action: action, Result: audit.ResultSuccess,
		Reason: detail, UserHash: s.audit.HashUser(userID), IPHash: s.audit.HashIP(clientIP(ctx)),
	})
}
