package oauth

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// ErrInvalidToken is returned by VerifyAccessToken for every token the
// resource refuses: unknown, malformed, expired, revoked, for another
// audience, or held by an account that may not use OAuth. It maps to 401
// invalid_token; the wrapped reason is for logs only.
var ErrInvalidToken = errors.New("oauth: invalid token")

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
	Username    string    `bun:"username"`
	Roles       string    `bun:"roles"`
	Permissions string    `bun:"permissions"`
	account
}

// VerifyAccessToken checks a bearer token for the MCP resource. It costs
// one SQL query (token, grant, account state, roles and permissions
// together), plus one write at most every few minutes per grant to record
// its last use. A malformed token costs none.
func (s *Server) VerifyAccessToken(ctx context.Context, token string) (*Access, error) {
	if err := s.strategy.Enigma.Validate(ctx, trimPrefix(token, "ory_at_")); err != nil {
		return nil, fmt.Errorf("%w: malformed", ErrInvalidToken)
	}
	sig := s.strategy.AccessTokenSignature(ctx, token)
	agg, aggDistinct := "group_concat(?, ',')", "group_concat(DISTINCT ?)"
	if s.store.db.Dialect() == storage.Postgres {
		agg, aggDistinct = "string_agg(?, ',')", "string_agg(DISTINCT ?, ',')"
	}
	var row accessRow
	err := s.store.db.Reader.NewSelect().
		TableExpr("oauth_tokens AS t").
		Join("JOIN oauth_grants AS g ON g.id = t.request_id").
		Join("JOIN users AS u ON u.id = t.user_id").
		ColumnExpr("t.request_id, t.client_id, t.scopes, t.audience, t.expires_at, t.requested_at").
		ColumnExpr("g.last_used_at AS grant_used_at").
		ColumnExpr("u.id, u.stable_user_id, u.username, u.email_verified_at, u.password_changed_at, u.suspended_at, u.deleting_at").
		ColumnExpr("COALESCE((SELECT "+agg+" FROM user_roles AS ur WHERE ur.user_id = t.user_id), '') AS roles", bun.Ident("ur.role_name")).
		ColumnExpr("COALESCE((SELECT "+aggDistinct+" FROM user_roles AS ur JOIN role_permissions AS rp ON rp.role_name = ur.role_name WHERE ur.user_id = t.user_id), '') AS permissions", bun.Ident("rp.permission_name")).
		Where("t.signature = ? AND t.kind = ?", sig, kindAccess).
		Scan(ctx, &row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: unknown or revoked", ErrInvalidToken)
	}
	if err != nil {
		return nil, fmt.Errorf("oauth: verify token: %w", err)
	}
	now := s.opts.Now().UTC()
	audience := strings.Fields(row.Audience)
	switch {
	case !now.Before(row.ExpiresAt):
		return nil, fmt.Errorf("%w: expired", ErrInvalidToken)
	case !slices.Contains(audience, s.resource):
		return nil, fmt.Errorf("%w: audience %v", ErrInvalidToken, audience)
	}
	if err := s.refusal(&row.account, row.RequestedAt); err != nil {
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
		Username:    a.Username,
		Roles:       slices.Clone(a.Roles),
		Permissions: perms,
		Scopes:      slices.Clone(a.Scopes),
		State:       capabilities.AccountActive,
	}
}

func splitList(s string) []string {
	if s == "" {
		return []string{}
	}
	out := strings.Split(s, ",")
	slices.Sort(out)
	return out
}
