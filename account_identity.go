package enclave

import (
	"context"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/internal/clientnet"
)

// auditAccount records the outcome of a person's account action
// (accounts.AccountOptions.Audit: a username change, a request to release
// a former address), whatever the transport: the account's and the
// client address's hashes, and for a failure its code.
func (s *Server) auditAccount(ctx context.Context, u accounts.User, action string, ok bool, reason string) {
	e := audit.Event{Category: audit.CategoryAccount, Action: action, Result: audit.ResultSuccess, Reason: reason,
		UserHash: s.audit.HashUser(u.StableID), IPHash: s.audit.HashIP(clientnet.Addr(ctx))}
	if !ok {
		e.Result = audit.ResultFailure
	}
	_ = s.audit.Record(ctx, e)
}
