package oauth

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/retention"
)

// UnusedClientWindow: a registered client that holds no grant and has not
// been used (no authorization or token request) for this long is removed;
// clients that hold grants go after Options.ClientIdleTTL.
const UnusedClientWindow = 7 * 24 * time.Hour

// RetentionPolicies declares the retention of the authorization server's
// tables, in purge order (grants after their tokens, clients after their
// grants). clientIdle is Options.ClientIdleTTL (0: DefaultClientIdleTTL).
func RetentionPolicies(clientIdle time.Duration) []retention.Policy {
	day := 24 * time.Hour
	if clientIdle <= 0 {
		clientIdle = DefaultClientIdleTTL
	}
	return []retention.Policy{
		retention.Age("oauth_tokens", "expires_at", 0).Because("expired codes, PKCE sessions, access and refresh tokens"),
		retention.Age("oauth_grants", "last_used_at", time.Hour).
			If("NOT EXISTS (SELECT 1 FROM oauth_tokens AS t WHERE t.request_id = oauth_grants.id)").
			Because("a grant whose tokens are all gone (expired or revoked) is over; the others go with the account"),
		retention.Custom("oauth_clients", fmt.Sprintf("a client holding no grant and unused for %d days is removed; any client unused for %d days (Options.ClientIdleTTL) is removed with everything issued to it",
			int(UnusedClientWindow/day), int(clientIdle/day)), purgeClients(clientIdle)),
		retention.UntilAccountDeleted("oauth_consents").Because("or until the client is removed"),
		retention.Kept("oauth_keys", "signing keys of the authorization server"),
		retention.Kept("oauth_client_blocks", "admins' blocks of client metadata URLs and hosts, until lifted"),
		retention.Age("oauth_client_assertions", "expires_at", 0).Because("ids of used private_key_jwt client assertions, kept until the assertion expires (at most an hour)"),
	}
}

// purgeClients removes clients that hold no grant and went unused for
// UnusedClientWindow, then clients idle for longer than idle.
func purgeClients(idle time.Duration) retention.PurgeFunc {
	unused := retention.Age("oauth_clients", "last_used_at", UnusedClientWindow).
		If("NOT EXISTS (SELECT 1 FROM oauth_grants AS g WHERE g.client_id = oauth_clients.id)")
	stale := retention.Age("oauth_clients", "last_used_at", idle)
	return func(ctx context.Context, db bun.IDB, now time.Time, limit int) (int64, error) {
		n, err := retention.PurgeAge(ctx, db, unused, now, limit)
		if err != nil || n >= int64(limit) {
			return n, err
		}
		m, err := retention.PurgeAge(ctx, db, stale, now, limit-int(n))
		return n + m, err
	}
}
