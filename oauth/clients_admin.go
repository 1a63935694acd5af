package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

// RegisteredClient is a registered OAuth client as admins see it.
type RegisteredClient struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	RedirectURIs []string   `json:"redirectUris"`
	Public       bool       `json:"public" jsonschema:"true for a client without a secret (PKCE only)"`
	CreatedAt    time.Time  `json:"createdAt"`
	LastUsedAt   time.Time  `json:"lastUsedAt"`
	Grants       int        `json:"grants" jsonschema:"how many users have an active authorization for it"`
	BlockedAt    *time.Time `json:"blockedAt,omitempty"`
}

// ErrClientNotFound is returned for a client id that is not registered.
var ErrClientNotFound = errors.New("oauth: client not found")

// maxListedClients bounds one listing.
const maxListedClients = 1000

// Clients lists the registered clients, most recently used first, with
// their grant counts.
func (s *Server) Clients(ctx context.Context) ([]RegisteredClient, error) {
	var rows []struct {
		clientRow `bun:",extend"`
		Grants    int `bun:"grants"`
	}
	err := s.store.db.Reader.NewSelect().Model(&rows).
		ColumnExpr("c.*").
		ColumnExpr("(SELECT count(*) FROM oauth_grants AS g WHERE g.client_id = c.id) AS grants").
		OrderExpr("c.last_used_at DESC, c.id").Limit(maxListedClients).Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("oauth: list clients: %w", err)
	}
	out := make([]RegisteredClient, 0, len(rows))
	for _, r := range rows {
		c := RegisteredClient{ID: r.ID, Name: r.Name, Public: r.SecretHash == "", CreatedAt: r.CreatedAt, LastUsedAt: r.LastUsedAt, Grants: r.Grants, BlockedAt: r.BlockedAt}
		if err := json.Unmarshal([]byte(r.RedirectURIs), &c.RedirectURIs); err != nil {
			c.RedirectURIs = []string{}
		}
		out = append(out, c)
	}
	return out, nil
}

// SetClientBlocked blocks or unblocks a client. A blocked client's access
// tokens are refused by the next bearer check (the check reads the flag in
// its one query), and it can neither authorize nor refresh; unblocking
// restores its grants that have not expired. It reports whether anything
// changed.
func (s *Server) SetClientBlocked(ctx context.Context, id string, blocked bool) (bool, error) {
	if !storable(id) {
		return false, ErrClientNotFound // from a URL: no client has such an id
	}
	defer s.revoked(ctx, 0, "") // the client's tokens, of every account
	q := s.store.db.DB.NewUpdate().Model((*clientRow)(nil)).Where("id = ?", id)
	if blocked {
		q = q.Set("blocked_at = ?", s.opts.Now().UTC()).Where("blocked_at IS NULL")
	} else {
		q = q.Set("blocked_at = NULL").Where("blocked_at IS NOT NULL")
	}
	res, err := q.Exec(ctx)
	if err != nil {
		return false, fmt.Errorf("oauth: block client: %w", err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return true, nil
	}
	exists, err := s.store.db.DB.NewSelect().Model((*clientRow)(nil)).Where("id = ?", id).Exists(ctx)
	if err != nil {
		return false, fmt.Errorf("oauth: block client: %w", err)
	}
	if !exists {
		return false, ErrClientNotFound
	}
	return false, nil
}

// ClientListOutput is the output of adminOAuthClientList.
type ClientListOutput struct {
	Clients []RegisteredClient `json:"clients"`
}

// ClientBlockInput is the input of adminOAuthClientBlock and
// adminOAuthClientUnblock.
type ClientBlockInput struct {
	ClientID string `json:"clientId" jsonschema:"the id of the client, from adminOAuthClientList"`
}

// ClientBlockOutput says whether the call changed the client.
type ClientBlockOutput struct {
	ClientID string `json:"clientId"`
	Blocked  bool   `json:"blocked"`
	Changed  bool   `json:"changed"`
}

// AdminCapabilities returns adminOAuthClientList, adminOAuthClientBlock and
// adminOAuthClientUnblock, for admins only.
func (s *Server) AdminCapabilities() []capabilities.Capability {
	admin := capabilities.Requirement{Role: capabilities.RoleAdmin}
	block := func(name, title, desc string, blocked bool) capabilities.Capability {
		return capabilities.Define(capabilities.Spec[ClientBlockInput, ClientBlockOutput]{
			Name: name, Domain: "admin", Title: title, Description: desc,
			Annotations: &capabilities.Annotations{Destructive: blocked, Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, in ClientBlockInput) (ClientBlockOutput, error) {
				if in.ClientID == "" {
					return ClientBlockOutput{}, capabilities.Errorf(capabilities.CodeInvalidInput, "clientId is required")
				}
				changed, err := s.SetClientBlocked(ctx, in.ClientID, blocked)
				if errors.Is(err, ErrClientNotFound) {
					return ClientBlockOutput{}, capabilities.Errorf(capabilities.CodeNotFound, "client %q not found", in.ClientID)
				}
				if err != nil {
					return ClientBlockOutput{}, err
				}
				if changed {
					s.opts.Logger.InfoContext(ctx, "oauth: client block changed by an admin", "client", in.ClientID, "blocked", blocked)
				}
				return ClientBlockOutput{ClientID: in.ClientID, Blocked: blocked, Changed: changed}, nil
			},
		})
	}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[struct{}, ClientListOutput]{
			Name: "adminOAuthClientList", Domain: "admin", Title: "List registered OAuth clients",
			Description: "Lists the registered OAuth clients (apps and agents): name, redirect URIs, when registered and last used, how many users authorized each, and whether it is blocked. Admins only.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, _ struct{}) (ClientListOutput, error) {
				cs, err := s.Clients(ctx)
				return ClientListOutput{Clients: cs}, err
			},
		}),
		block("adminOAuthClientBlock", "Block an OAuth client",
			"Blocks a registered OAuth client: every token it holds stops working at once, and it can neither authorize nor refresh until unblocked. Admins only.", true),
		block("adminOAuthClientUnblock", "Unblock an OAuth client",
			"Lifts a client's block: its authorizations that have not expired work again. Admins only.", false),
	}
}

// ActiveGrants counts the grants that still hold an unexpired token.
func (s *Server) ActiveGrants(ctx context.Context) (int, error) {
	n, err := s.store.db.Reader.NewSelect().TableExpr("oauth_grants AS g").
		Where("EXISTS (SELECT 1 FROM oauth_tokens AS t WHERE t.request_id = g.id AND t.expires_at > ? AND t.kind IN ('access', 'refresh'))", s.opts.Now().UTC()).
		Count(ctx)
	if err != nil {
		return 0, fmt.Errorf("oauth: count grants: %w", err)
	}
	return int(n), nil
}
