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
	// Kind is how the client identifies itself: "registered" (dynamic
	// registration; nobody vouches for its name) or "metadataDocument"
	// (its id is the https URL of its metadata document).
	Kind string `json:"kind" jsonschema:"registered: dynamic registration, nobody vouches for its name; metadataDocument: its id is the https URL of its metadata document" schema:"enum=registered|metadataDocument"`
	// Host is the host of the metadata document, for kind metadataDocument.
	Host string `json:"host,omitempty" jsonschema:"the host publishing the client's metadata document (kind metadataDocument)"`
}

// Kinds of RegisteredClient.
const (
	ClientKindRegistered       = "registered"
	ClientKindMetadataDocument = "metadataDocument"
)

// ClientBlock is an admin's block of a client metadata URL or of every
// client whose metadata document a host publishes.
type ClientBlock struct {
	Kind      string    `json:"kind" jsonschema:"what is blocked" schema:"enum=url|host"`
	Value     string    `json:"value" jsonschema:"the metadata URL (kind url) or host (kind host)"`
	CreatedAt time.Time `json:"createdAt"`
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
		c := RegisteredClient{ID: r.ID, Name: r.Name, Public: r.SecretHash == "", CreatedAt: r.CreatedAt, LastUsedAt: r.LastUsedAt, Grants: r.Grants, BlockedAt: r.BlockedAt, Kind: ClientKindRegistered}
		if r.MetadataHost != nil {
			c.Kind, c.Host = ClientKindMetadataDocument, *r.MetadataHost
		}
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
//
// A client metadata URL may be blocked before any client used it: the
// block is kept apart from the client's row (which goes when the client
// goes unused), and the URL is refused before anything is fetched.
func (s *Server) SetClientBlocked(ctx context.Context, id string, blocked bool) (bool, error) {
	if !storable(id) {
		return false, ErrClientNotFound // from a URL: no client has such an id
	}
	defer s.revoked(ctx, 0, "") // the client's tokens, of every account
	if metadataShaped(id) {
		u, err := parseMetadataURL(id)
		if err != nil {
			return false, ErrClientNotFound
		}
		return s.setMetadataBlock(ctx, blockURL, id, metadataHost(u), blocked)
	}
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

// ClientBlocks lists the admins' blocks of metadata URLs and hosts, newest
// first.
func (s *Server) ClientBlocks(ctx context.Context) ([]ClientBlock, error) {
	var rows []clientBlockRow
	if err := s.store.db.Reader.NewSelect().Model(&rows).OrderExpr("b.created_at DESC, b.kind, b.value").
		Limit(maxListedClients).Scan(ctx); err != nil {
		return nil, fmt.Errorf("oauth: list client blocks: %w", err)
	}
	out := make([]ClientBlock, 0, len(rows))
	for _, r := range rows {
		out = append(out, ClientBlock{Kind: r.Kind, Value: r.Value, CreatedAt: r.CreatedAt})
	}
	return out, nil
}

// ClientListOutput is the output of adminOAuthClientList.
type ClientListOutput struct {
	Clients []RegisteredClient `json:"clients"`
	// Blocks are the blocked metadata URLs and hosts.
	Blocks []ClientBlock `json:"blocks"`
}

// HostBlockInput is the input of adminOAuthClientBlockHost and
// adminOAuthClientUnblockHost.
type HostBlockInput struct {
	Host string `json:"host" jsonschema:"a host name publishing client metadata documents, such as app.example (with :port when not 443)"`
}

// HostBlockOutput says whether the call changed the host's block.
type HostBlockOutput struct {
	Host    string `json:"host"`
	Blocked bool   `json:"blocked"`
	Changed bool   `json:"changed"`
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
	blockHost := func(name, title, desc string, blocked bool) capabilities.Capability {
		return capabilities.Define(capabilities.Spec[HostBlockInput, HostBlockOutput]{
			Name: name, Domain: "admin", Title: title, Description: desc,
			Annotations: &capabilities.Annotations{Destructive: blocked, Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, in HostBlockInput) (HostBlockOutput, error) {
				host, err := NormalizeHost(in.Host)
				if err != nil {
					return HostBlockOutput{}, capabilities.Errorf(capabilities.CodeInvalidInput, "%s", err.Error())
				}
				changed, err := s.SetHostBlocked(ctx, host, blocked)
				if err != nil {
					return HostBlockOutput{}, err
				}
				if changed {
					s.opts.Logger.InfoContext(ctx, "oauth: client host block changed by an admin", "host", host, "blocked", blocked)
				}
				return HostBlockOutput{Host: host, Blocked: blocked, Changed: changed}, nil
			},
		})
	}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[struct{}, ClientListOutput]{
			Name: "adminOAuthClientList", Domain: "admin", Title: "List registered OAuth clients",
			Description: "Lists the OAuth clients (apps and agents), registered ones and those identified by a metadata document URL: name, redirect URIs, host, when first seen and last used, how many users authorized each, whether it is blocked, and the blocked metadata URLs and hosts. Admins only.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    admin,
			Handler: func(ctx context.Context, _ *capabilities.Call, _ struct{}) (ClientListOutput, error) {
				cs, err := s.Clients(ctx)
				if err != nil {
					return ClientListOutput{}, err
				}
				bs, err := s.ClientBlocks(ctx)
				return ClientListOutput{Clients: cs, Blocks: bs}, err
			},
		}),
		blockHost("adminOAuthClientBlockHost", "Block every OAuth client a host publishes",
			"Blocks every OAuth client whose id is a metadata document URL on this host: their tokens stop working at once, and no client from the host can authorize until unblocked. Admins only.", true),
		blockHost("adminOAuthClientUnblockHost", "Unblock a host's OAuth clients",
			"Lifts a host's block: its clients (unless blocked one by one) may authorize again, and their authorizations that have not expired work again. Admins only.", false),
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
