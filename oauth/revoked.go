package oauth

import (
	"context"
	"sync"
)

// RevokeHook runs after a committed revocation, so that caches of verified
// tokens (see internal/callercache) drop what it ended: grantID names one
// grant (its tokens are gone or going); otherwise userID names an account
// all of whose grants ended; neither (0, "") means any token may have
// changed (a client was blocked or removed).
type RevokeHook func(ctx context.Context, userID int64, grantID string)

// OnRevoke registers hook. Register hooks before serving requests.
func (s *Server) OnRevoke(hook RevokeHook) {
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	s.revokeHooks = append(s.revokeHooks, hook)
}

// revoked runs the OnRevoke hooks; call it after the revoking transaction.
func (s *Server) revoked(ctx context.Context, userID int64, grantID string) {
	s.hookMu.Lock()
	hooks := s.revokeHooks
	s.hookMu.Unlock()
	for _, h := range hooks {
		h(ctx, userID, grantID)
	}
}

type revokedKey struct{}

// revocations gathers the grants fosite's handlers revoke inside their
// own transactions, to be announced once those committed.
type revocations struct {
	mu     sync.Mutex
	grants []string
}

// noteRevoked records that grant requestID is being revoked in ctx's
// request (a no-op outside the token and revocation endpoints, whose
// callers announce their revocations themselves).
func noteRevoked(ctx context.Context, requestID string) {
	if r, ok := ctx.Value(revokedKey{}).(*revocations); ok {
		r.mu.Lock()
		r.grants = append(r.grants, requestID)
		r.mu.Unlock()
	}
}

// collectRevocations returns a context that gathers revocations, and the
// function that announces (and forgets) those gathered so far.
func (s *Server) collectRevocations(ctx context.Context) (context.Context, func()) {
	r := &revocations{}
	return context.WithValue(ctx, revokedKey{}, r), func() {
		r.mu.Lock()
		grants := r.grants
		r.grants = nil
		r.mu.Unlock()
		for _, g := range grants {
			s.revoked(ctx, 0, g)
		}
	}
}
