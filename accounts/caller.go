package accounts

import (
	"context"
	"errors"
	"fmt"

	"github.com/enclave-mcp/enclave/capabilities"
)

// Service implements capabilities.CallerLoader for transports that
// authenticate a stable user id (OAuth bearer tokens, session cookies).
var _ capabilities.CallerLoader = (*Service)(nil)

// LoadCaller returns the caller for the account with stable id sid, with
// its account state and fresh roles and permissions. It returns
// capabilities.ErrUnknownUser when there is no such account. When the roles
// cannot be loaded, it logs the error and returns the caller with no roles
// (fail closed) and a nil error; any other error leaves the transport to
// use capabilities.FailClosed. Scopes, AllScopes and Interactive are left
// for the transport to set.
func (s *Service) LoadCaller(ctx context.Context, sid string) (capabilities.Caller, error) {
	u, err := s.Identity.UserByStableID(ctx, sid)
	if errors.Is(err, ErrNotFound) {
		return capabilities.Caller{}, fmt.Errorf("accounts: load caller: %w", capabilities.ErrUnknownUser)
	}
	if err != nil {
		return capabilities.Caller{}, fmt.Errorf("accounts: load caller: %w", err)
	}
	return CallerFor(u, s.Roles.FreshGrants(ctx, u.ID)), nil
}

// FreshGrants is RolesAndPermissions for request paths: on error it logs
// and returns no roles (fail closed).
func (s *Roles) FreshGrants(ctx context.Context, userID int64) Grants {
	g, err := s.RolesAndPermissions(ctx, userID)
	if err != nil {
		s.cfg.Logger.ErrorContext(ctx, "accounts: loading roles failed; treating the caller as holding none", "user_id", userID, "error", err)
		return Grants{}
	}
	return g
}

// CallerFor builds the capabilities caller of account u holding g. Its
// State is suspended for a suspended account, also one being deleted.
func CallerFor(u User, g Grants) capabilities.Caller {
	c := capabilities.Caller{
		UserID:      u.StableID,
		OwnerID:     u.ID,
		Username:    u.Username,
		Roles:       append([]string(nil), g.Roles...),
		Permissions: append([]capabilities.Permission(nil), g.Permissions...),
		State:       capabilities.AccountActive,
	}
	// Suspension wins over deletion, as for the session cookie: an
	// account suspended while its deletion is pending (u.State() says
	// deleting) is refused everything, not let through to the reads a
	// deleting account keeps.
	switch {
	case u.SuspendedAt != nil:
		c.State = capabilities.AccountSuspended
	case u.State() == StateDeleting:
		c.State = capabilities.AccountDeleting
	}
	return c
}
