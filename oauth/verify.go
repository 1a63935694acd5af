package oauth

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// ErrInvalidToken is returned by VerifyAccessToken for every token the
// resource refuses: unknown, malformed, expired, revoked, for another
// audience, or held by an account that may not use OAuth. It maps to 401
// invalid_token; the wrapped reason is for logs only.
var ErrInvalidToken = errors.New("oauth: invalid token")

// Why a token was refused. Each is wrapped together with ErrInvalidToken,
// so callers (the audit of refusals) can tell them apart with errors.Is.
var (
	ErrTokenMalformed = errors.New("malformed")
	ErrTokenUnknown   = errors.New("unknown or revoked")
	ErrTokenExpired   = errors.New("expired")
	ErrWrongAudience  = errors.New("issued for another audience")
	ErrClientBlocked  = errors.New("client blocked by an admin")
	// ErrSignInOnly: the token carries only OpenID Connect scopes (openid,
	// email): it reads userinfo, it does not reach the MCP resource.
	ErrSignInOnly = errors.New("granted only sign-in scopes")
)

// TokenRefusal is the error of a token that matched a grant but is
// refused (expired, for another audience, or held by an account that may
// not use OAuth now). It names the grant's account and client, so the
// refusal can be audited against them; it wraps ErrInvalidToken and the
// reason. A token that matches no grant is refused without one.
type TokenRefusal struct {
	StableUserID string
	ClientID     string
	Err          error
}

func (e *TokenRefusal) Error() string { return e.Err.Error() }
func (e *TokenRefusal) Unwrap() error { return e.Err }

// Access is what a verified access token grants, loaded together with the
// account's state, roles and permissions.
type Access struct {
	UserID       int64  // internal users.id
	StableUserID string // the subject agents see
	Username     string
	ClientID     string
	GrantID      string
	Scopes       []string
	Audience     []string
	ExpiresAt    time.Time
	Roles        []string
	Permissions  []string
}

// grantUseDebounce limits how often a grant's last use is written.
const grantUseDebounce = 5 * time.Minute

type accessRow struct {
	RequestID   string    `bun:"request_id"`
	ClientID    string    `bun:"client_id"`
	Scopes      string    `bun:"scopes"`
	Audience    string    `bun:"audience"`
	ExpiresAt   time.Time `bun:"expires_at"`
	RequestedAt time.Time `bun:"requested_at"`
	GrantUsedAt time.Time `bun:"grant_used_at"`
	GrantedAt   time.Time `bun:"granted_at"`
	Blocked     bool
	Username    string `bun:"username"`
	Roles       string `bun:"roles"`
	Permissions string `bun:"permissions"`
	account
}

// VerifyAccessToken checks a bearer token for the MCP resource. It costs
// one SQL query (token, grant, account state, roles and permissions
// together), plus one write at most every few minutes per grant to record
// its last use. A malformed token costs none.
func (s *Server) VerifyAccessToken(ctx context.Context, token string) (*Access, error) {
	return s.verifyAccess(ctx, token, false)
}

// verifyAccess is VerifyAccessToken; signIn also accepts a token granted
// only OpenID Connect scopes (userinfo's check).
func (s *Server) verifyAccess(ctx context.Context, token string, signIn bool) (*Access, error) {
	if err := s.strategy.Enigma.Validate(ctx, trimPrefix(token, "ory_at_")); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, ErrTokenMalformed)
	}
	sig := s.strategy.AccessTokenSignature(ctx, token)
	row, err := s.lookupAccess(ctx, sig)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, ErrTokenUnknown)
	}
	if err != nil {
		return nil, fmt.Errorf("oauth: verify token: %w", err)
	}
	now := s.opts.Now().UTC()
	audience := strings.Fields(row.Audience)
	refused := func(err error) error {
		return &TokenRefusal{StableUserID: row.StableID, ClientID: row.ClientID, Err: err}
	}
	switch {
	case !now.Before(row.ExpiresAt):
		return nil, refused(fmt.Errorf("%w: %w", ErrInvalidToken, ErrTokenExpired))
	case !slices.Contains(audience, s.resource):
		return nil, refused(fmt.Errorf("%w: %w %v", ErrInvalidToken, ErrWrongAudience, audience))
	case row.Blocked:
		return nil, refused(fmt.Errorf("%w: %w", ErrInvalidToken, ErrClientBlocked))
	case !signIn && signInOnly(strings.Fields(row.Scopes)):
		return nil, refused(fmt.Errorf("%w: %w", ErrInvalidToken, ErrSignInOnly))
	}
	if err := s.refusal(&row.account, row.RequestedAt); err != nil {
		return nil, refused(fmt.Errorf("%w: %w", ErrInvalidToken, err))
	}
	if err := cmp.Or(predates(&row.account, row.RequestedAt), predates(&row.account, row.GrantedAt)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if now.Sub(row.GrantUsedAt) > grantUseDebounce {
		_, err := s.store.db.DB.NewUpdate().Model((*grantRow)(nil)).Set("last_used_at = ?", now).
			Where("id = ? AND last_used_at < ?", row.RequestID, now.Add(-grantUseDebounce)).Exec(ctx)
		if err != nil {
			s.opts.Logger.WarnContext(ctx, "oauth: record grant use", "err", err)
		}
	}
	return &Access{
		UserID:       row.ID,
		StableUserID: row.StableID,
		Username:     row.Username,
		ClientID:     row.ClientID,
		GrantID:      row.RequestID,
		Scopes:       strings.Fields(row.Scopes),
		Audience:     audience,
		ExpiresAt:    row.ExpiresAt,
		Roles:        splitList(row.Roles),
		Permissions:  splitList(row.Permissions),
	}, nil
}

// Caller is the capabilities caller this access stands for, with the roles
// and permissions loaded with the token: a transport can use it instead of
// loading the account again. The account is active (VerifyAccessToken
// refuses suspended and deleting accounts); whether the call is
// interactive is the transport's to say.
func (a *Access) Caller() capabilities.Caller {
	perms := make([]capabilities.Permission, len(a.Permissions))
	for i, p := range a.Permissions {
		perms[i] = capabilities.Permission(p)
	}
	return capabilities.Caller{
		UserID:      a.StableUserID,
		OwnerID:     a.UserID, // from the same row as the stable id
		Username:    a.Username,
		Roles:       slices.Clone(a.Roles),
		Permissions: perms,
		Scopes:      slices.Clone(a.Scopes),
		State:       capabilities.AccountActive,
	}
}

// accessQuery is the bearer check's one query: the token with its grant
// (which must be the same account's), the account's state and creation
// time, and its roles and permissions. It is prepared once
// per connection with the signature as a parameter, so the database parses
// and plans it once instead of on every call.
const accessQuery = `SELECT t.request_id, t.client_id, t.scopes, t.audience, t.expires_at, t.requested_at,
	g.last_used_at AS grant_used_at, g.created_at AS granted_at, c.blocked_at AS client_blocked_at,
	u.id, u.stable_user_id, u.username, u.email_verified_at, u.password_changed_at, u.suspended_at, u.deleting_at, u.created_at,
	COALESCE((SELECT %[1]s FROM user_roles AS ur WHERE ur.user_id = t.user_id), '') AS roles,
	COALESCE((SELECT %[2]s FROM user_roles AS ur JOIN role_permissions AS rp ON rp.role_name = ur.role_name
		WHERE ur.user_id = t.user_id), '') AS permissions
FROM oauth_tokens AS t
JOIN oauth_grants AS g ON g.id = t.request_id AND g.user_id = t.user_id
JOIN oauth_clients AS c ON c.id = t.client_id
JOIN users AS u ON u.id = t.user_id
WHERE t.signature = %[3]s AND t.kind = 'access'`

// bearerQueryTimeout bounds the bearer check's query on PostgreSQL.
const bearerQueryTimeout = 5 * time.Second

// lookupAccess runs accessQuery for an access token's signature.
func (s *Server) lookupAccess(ctx context.Context, sig string) (accessRow, error) {
	var row accessRow
	stmt, err := s.accessStmt(ctx)
	if err != nil {
		return row, err
	}
	// First come, first served: without the gate, database/sql hands
	// freed connections to random waiters and some checks starve.
	release, err := s.store.db.ReadSlot(ctx)
	if err != nil {
		return row, err
	}
	defer release()
	s.stmtRuns.Add(1)
	// On SQLite not cancellable: with a context that can end, database/sql
	// and the SQLite driver each start a goroutine per query to watch it,
	// and at GOMAXPROCS 1 under hundreds of concurrent calls those new
	// goroutines jump the run queue (runnext) ahead of requests already
	// waiting, which stretches the slowest calls to seconds. There the query
	// is a sub-millisecond point read of a local file in WAL mode, which no
	// writer blocks; the wait for a turn above still ends with ctx.
	//
	// On PostgreSQL the query crosses the network and can stall (a lock
	// taken by a migration or an operator, a partition, a saturated
	// server): it keeps the request's cancellation and a bound of its own,
	// so a stalled check neither outlives its client nor holds its read
	// turn (and every call queued behind it) indefinitely.
	qctx := context.WithoutCancel(ctx)
	if s.store.db.Dialect() == storage.Postgres {
		var cancel context.CancelFunc
		qctx, cancel = context.WithTimeout(ctx, bearerQueryTimeout)
		defer cancel()
	}
	rows, err := stmt.QueryContext(qctx, sig)
	if err != nil {
		return row, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return row, err
		}
		return row, sql.ErrNoRows
	}
	var scopes, audience, roles, perms sql.NullString
	var emailVerified, pwChanged, suspended, deleting, blocked sql.NullTime
	if err := rows.Scan(&row.RequestID, &row.ClientID, &scopes, &audience, &row.ExpiresAt, &row.RequestedAt,
		&row.GrantUsedAt, &row.GrantedAt, &blocked, &row.ID, &row.StableID, &row.Username,
		&emailVerified, &pwChanged, &suspended, &deleting, &row.CreatedAt, &roles, &perms); err != nil {
		return row, err
	}
	row.Scopes, row.Audience, row.Roles, row.Permissions = scopes.String, audience.String, roles.String, perms.String
	row.EmailVerifiedAt, row.PasswordChangedAt = timePtr(emailVerified), timePtr(pwChanged)
	row.SuspendedAt, row.DeletingAt = timePtr(suspended), timePtr(deleting)
	row.Blocked = blocked.Valid
	return row, rows.Err()
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.Time
	return &v
}

// BearerChecks counts the bearer-check queries this server has run. They
// run as a prepared statement outside bun, so bun's query hooks do not see
// them; tools that count queries add this.
func (s *Server) BearerChecks() int64 { return s.stmtRuns.Load() }

// accessStmt prepares accessQuery on the read pool the first time it is
// needed. A failure is not remembered: the next call tries again.
func (s *Server) accessStmt(ctx context.Context) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if s.stmt != nil {
		return s.stmt, nil
	}
	q := fmt.Sprintf(accessQuery, "group_concat(ur.role_name, ',')", "group_concat(DISTINCT rp.permission_name)", "?")
	if s.store.db.Dialect() == storage.Postgres {
		q = fmt.Sprintf(accessQuery, "string_agg(ur.role_name, ',')", "string_agg(DISTINCT rp.permission_name, ',')", "$1")
	}
	stmt, err := s.store.db.Reader.DB.PrepareContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("oauth: prepare the bearer check: %w", err)
	}
	s.stmt = stmt
	return stmt, nil
}

func splitList(s string) []string {
	if s == "" {
		return []string{}
	}
	out := strings.Split(s, ",")
	slices.Sort(out)
	return out
}
