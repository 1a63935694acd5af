package integrations

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
)

// Bounds and defaults.
const (
	// CallbackPath is the prefix of the connect flow's redirect URIs, on
	// the server's own origin: each provider has its own,
	// CallbackPath + "/" + its name (register that one at the provider),
	// and a callback is accepted only on the path of the provider its
	// flow was started for. One shared callback would let a hostile
	// provider send the person to another provider with its own state
	// and receive that provider's code and verifier (a mix-up attack).
	CallbackPath = "/account/connections/callback"
	// StateTTL is how long a connect flow may take, from the click to
	// the callback.
	StateTTL = 10 * time.Minute
	// MaxPendingStates bounds one person's unfinished connect flows; the
	// oldest are dropped beyond it.
	MaxPendingStates = 10
	// MaxConnections bounds one person's connections.
	MaxConnections = 100
	// RefreshBefore is how long before its expiry an access token is
	// renewed.
	RefreshBefore = 5 * time.Minute
	// MinRefreshInterval is the least time between two renewals of a
	// connection's token by Use: a provider issuing tokens shorter-lived
	// than RefreshBefore would otherwise be called at every use.
	MinRefreshInterval = 30 * time.Second
	// RevokeAllBudget bounds the revocations at an account's deletion
	// together: a provider that does not answer does not hold the
	// deletion longer.
	RevokeAllBudget = 30 * time.Second
	// MaxTokenBytes bounds a token the provider issues.
	MaxTokenBytes = 16 << 10
)

// The statuses of a connection.
const (
	// StatusActive: the token works, as far as enclave knows.
	StatusActive = "active"
	// StatusExpired: the access token expired and could not be renewed
	// (no refresh token, or the provider refused it): connect again.
	StatusExpired = "expired"
)

var (
	// ErrNotFound: the caller has no connection of that name.
	ErrNotFound = errors.New("integrations: no such connection")
	// ErrExpired: the connection's token expired and cannot be renewed.
	ErrExpired = errors.New("integrations: connection expired")
)

var connectionName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Auditor records audit events; *audit.Log implements it.
type Auditor interface {
	Record(ctx context.Context, e audit.Event) error
	HashUser(stableUserID string) string
}

// Options tune integrations. Every zero value is a documented default.
type Options struct {
	// Disabled turns connected accounts off: no capability, page or lane.
	// The tables exist and are exported and deleted all the same.
	Disabled bool
	// Providers are the operator's OAuth providers (--integration).
	Providers []Provider
	// AllowLoopbackHTTP lets people's own apps (AddApp) use plain http
	// endpoints on a loopback host and loopback API hosts. For tests
	// only: never set it in production.
	AllowLoopbackHTTP bool
}

// Config configures the service: Options, plus what the server provides.
// Store, Ring, Owners and BaseURL are required.
type Config struct {
	Options
	Store   *storage.Store
	Ring    *envelope.Ring
	Owners  capabilities.OwnerOf
	BaseURL string
	Audit   Auditor
	Logger  *slog.Logger
	// Registry is where Wire registers the capabilities (New ignores it).
	Registry *capabilities.Registry
	// HTTPClient talks to providers (token, revocation, discovery). The
	// default bounds each exchange by Timeout, follows no redirect and
	// reads at most MaxMetadataBytes of an answer.
	HTTPClient *http.Client
	// Timeout bounds each exchange with a provider. Default
	// DefaultHTTPTimeout.
	Timeout time.Duration
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// Service keeps connected accounts.
type Service struct {
	store     *storage.Store
	ring      *envelope.Ring
	owners    capabilities.OwnerOf
	redirect  string
	audit     Auditor
	log       *slog.Logger
	client    *http.Client
	appClient *http.Client
	allowLoop bool
	timeout   time.Duration
	now       func() time.Time
	providers map[string]*providerState
	names     []string
}

// New returns the service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Ring == nil || cfg.Owners == nil || cfg.BaseURL == "" {
		return nil, errors.New("integrations: Store, Ring, Owners and BaseURL are required")
	}
	s := &Service{
		store: cfg.Store, ring: cfg.Ring, owners: cfg.Owners, audit: cfg.Audit, log: cmp.Or(cfg.Logger, slog.Default()),
		client: cfg.HTTPClient, timeout: cmp.Or(cfg.Timeout, DefaultHTTPTimeout), now: cfg.Now, providers: map[string]*providerState{},
		redirect: strings.TrimSuffix(cfg.BaseURL, "/") + CallbackPath, allowLoop: cfg.AllowLoopbackHTTP,
	}
	s.appClient = s.newAppClient()
	if s.now == nil {
		s.now = time.Now
	}
	if s.client == nil {
		s.client = &http.Client{
			Timeout:   s.timeout,
			Transport: boundedTransport{next: http.DefaultTransport},
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return errors.New("integrations: providers' endpoints do not redirect")
			},
		}
	}
	for _, p := range cfg.Providers {
		p, err := p.prepare()
		if err != nil {
			return nil, err
		}
		if _, dup := s.providers[p.Name]; dup {
			return nil, fmt.Errorf("integrations: provider %s is configured twice", p.Name)
		}
		s.providers[p.Name] = &providerState{Provider: p, hc: s.client}
		s.names = append(s.names, p.Name)
	}
	slices.Sort(s.names)
	return s, nil
}

// ProviderInfo is what a person may know of a provider.
type ProviderInfo struct {
	Name     string   `json:"name"`
	Scopes   []string `json:"scopes"`
	APIHosts []string `json:"apiHosts" jsonschema:"the only hosts the connection's token is sent to"`
}

// Providers lists the configured providers by name.
func (s *Service) Providers() []ProviderInfo {
	out := make([]ProviderInfo, 0, len(s.names))
	for _, n := range s.names {
		p := s.providers[n]
		out = append(out, ProviderInfo{Name: n, Scopes: nonNil(p.Scopes), APIHosts: nonNil(p.APIHosts)})
	}
	return out
}

func nonNil(v []string) []string {
	if v == nil {
		return []string{}
	}
	return slices.Clone(v)
}

// Connection is a connected account's metadata: never a token.
type Connection struct {
	Name       string     `json:"name"`
	Provider   string     `json:"provider"`
	Scopes     []string   `json:"scopes"`
	OwnApp     bool       `json:"ownApp,omitempty" jsonschema:"true when the provider is one of your own OAuth apps (connectionAppList), not one of the server's"`
	Status     string     `json:"status" schema:"enum=active|expired"`
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty" jsonschema:"when the current access token expires (it is renewed before then when the provider allows)"`
	LastError  string     `json:"lastError,omitempty" jsonschema:"why the connection stopped working, when it did"`
	CreatedAt  time.Time  `json:"createdAt"`
	UpdatedAt  time.Time  `json:"updatedAt"`
}

type connRow struct {
	bun.BaseModel `bun:"table:integration_connections"`
	ID            int64      `bun:"id,pk,autoincrement"`
	UserID        int64      `bun:"user_id,notnull"`
	PublicID      string     `bun:"public_id,notnull"`
	Name          string     `bun:"name,notnull"`
	Provider      string     `bun:"provider,notnull"`
	AppID         *int64     `bun:"app_id"`
	Scopes        string     `bun:"scopes,notnull"`
	Status        string     `bun:"status,notnull"`
	KeyID         int64      `bun:"key_id,notnull"`
	Ciphertext    string     `bun:"token_ciphertext,notnull"`
	ExpiresAt     *time.Time `bun:"expires_at"`
	RefreshAt     *time.Time `bun:"refresh_at"`
	LastUsedAt    *time.Time `bun:"last_used_at"`
	LastError     string     `bun:"last_error,notnull"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	UpdatedAt     time.Time  `bun:"updated_at,notnull"`
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func (r connRow) meta() Connection {
	scopes := []string{}
	_ = json.Unmarshal([]byte(r.Scopes), &scopes) // a column this package wrote
	return Connection{Name: r.Name, Provider: r.Provider, OwnApp: r.AppID != nil, Scopes: scopes, Status: r.Status,
		LastUsedAt: utcPtr(r.LastUsedAt), ExpiresAt: utcPtr(r.ExpiresAt), LastError: r.LastError,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
}

// tokenSet is what is sealed: the provider's tokens.
type tokenSet struct {
	AccessToken  string    `json:"a"`
	RefreshToken string    `json:"r,omitempty"`
	TokenType    string    `json:"t,omitempty"`
	Expiry       time.Time `json:"e,omitzero"`
}

func connectionAD(stableID, publicID string) string {
	return "integration:connection:" + stableID + ":" + publicID
}

func stateAD(stableID, stateHash string) string {
	return "integration:state:" + stableID + ":" + stateHash
}

// seal seals ts for the connection publicID of o and sets the row's
// ciphertext, expiry and refresh time.
func (s *Service) seal(o storage.Owner, r *connRow, ts tokenSet) error {
	b, err := json.Marshal(ts)
	if err != nil {
		return err
	}
	keyID, sealed, err := s.ring.Seal(connectionAD(o.StableID, r.PublicID), b)
	if err != nil {
		return fmt.Errorf("integrations: seal: %w", err)
	}
	r.KeyID, r.Ciphertext = keyID, sealed
	r.ExpiresAt, r.RefreshAt = nil, nil
	if !ts.Expiry.IsZero() {
		exp := ts.Expiry.UTC().Truncate(time.Second)
		r.ExpiresAt = &exp
		if ts.RefreshToken != "" {
			at := exp.Add(-RefreshBefore)
			r.RefreshAt = &at
		}
	}
	return nil
}

func (s *Service) open(ctx context.Context, o storage.Owner, r connRow) (tokenSet, error) {
	b, err := s.ring.Open(ctx, r.KeyID, r.Ciphertext, connectionAD(o.StableID, r.PublicID))
	if err != nil {
		return tokenSet{}, fmt.Errorf("integrations: open connection %s: %w", r.Name, err)
	}
	var ts tokenSet
	if err := json.Unmarshal(b, &ts); err != nil {
		return tokenSet{}, fmt.Errorf("integrations: open connection %s: %w", r.Name, err)
	}
	return ts, nil
}

// List returns the owner's connections by name: metadata only.
func (s *Service) List(ctx context.Context, o storage.Owner) ([]Connection, error) {
	var rows []connRow
	err := s.store.Reader.NewSelect().Model(&rows).
		Column("name", "provider", "app_id", "scopes", "status", "expires_at", "last_used_at", "last_error", "created_at", "updated_at").
		Where("user_id = ?", o.ID).Order("name").Limit(MaxConnections).Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("integrations: list: %w", err)
	}
	out := make([]Connection, len(rows))
	for i, r := range rows {
		out[i] = r.meta()
	}
	return out, nil
}

func (s *Service) get(ctx context.Context, db bun.IDB, o storage.Owner, name string) (connRow, error) {
	var r connRow
	err := db.NewSelect().Model(&r).Where("user_id = ? AND name = ?", o.ID, name).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return connRow{}, ErrNotFound
	}
	if err != nil {
		return connRow{}, fmt.Errorf("integrations: get: %w", err)
	}
	return r, nil
}

// Disconnected says what Disconnect did.
type Disconnected struct {
	Disconnected bool `json:"disconnected"`
	// Revoked reports that the provider confirmed the revocation of the
	// connection's tokens (RFC 7009); false when it has no revocation
	// endpoint or did not answer (the tokens are forgotten here anyway).
	Revoked bool `json:"revoked"`
}

// Disconnect revokes the owner's connection called name at its provider
// (best effort, when the provider supports RFC 7009) and forgets it.
func (s *Service) Disconnect(ctx context.Context, o storage.Owner, name string) (Disconnected, error) {
	r, err := s.get(ctx, s.store.DB, o, name)
	if err != nil {
		return Disconnected{}, err
	}
	revoked := s.revoke(ctx, o, r)
	res, err := s.store.DB.NewDelete().Model((*connRow)(nil)).Where("id = ? AND user_id = ?", r.ID, o.ID).Exec(ctx)
	if err != nil {
		return Disconnected{}, fmt.Errorf("integrations: disconnect: %w", err)
	}
	n, _ := res.RowsAffected()
	return Disconnected{Disconnected: n > 0, Revoked: revoked}, nil
}

// revoke asks the connection's provider to revoke its tokens, refresh
// token first (which revokes the grant at most providers), and records the
// attempt. It reports whether the provider confirmed.
func (s *Service) revoke(ctx context.Context, o storage.Owner, r connRow) bool {
	p, err := s.providerFor(ctx, o, r)
	if err != nil {
		return false
	}
	eps, err := p.resolve(ctx, p.hc)
	if err != nil || eps.revoke == "" {
		return false
	}
	ts, err := s.open(ctx, o, r)
	if err != nil {
		return false
	}
	return s.revokeTokens(ctx, o, p, eps, r.Name, ts)
}

// revokeTokens asks p to revoke ts (of the connection called name) and
// records the attempt. It reports whether the provider confirmed.
func (s *Service) revokeTokens(ctx context.Context, o storage.Owner, p *providerState, eps endpoints, name string, ts tokenSet) bool {
	ok := true
	for _, t := range []struct{ token, hint string }{{ts.RefreshToken, "refresh_token"}, {ts.AccessToken, "access_token"}} {
		if t.token == "" {
			continue
		}
		if err := s.revokeOne(ctx, p, eps.revoke, t.token, t.hint); err != nil {
			s.log.WarnContext(ctx, "integrations: revocation at the provider failed", "provider", p.Name, "err", redactErr(err))
			ok = false
		}
	}
	result := audit.ResultSuccess
	if !ok {
		result = audit.ResultFailure
	}
	s.record(context.WithoutCancel(ctx), o, "connection_revoke", result, "provider="+p.Name+" connection="+name)
	return ok
}

func (s *Service) revokeOne(ctx context.Context, p *providerState, endpoint, token, hint string) error {
	form := url.Values{"token": {token}, "token_type_hint": {hint}}
	if p.ClientSecret == "" {
		form.Set("client_id", p.ClientID)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if p.ClientSecret != "" {
		req.SetBasicAuth(url.QueryEscape(p.ClientID), url.QueryEscape(p.ClientSecret))
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("revocation answered %d", resp.StatusCode)
	}
	return nil
}

// redactErr keeps an error's message out of logs when it might hold a URL
// with a token in it: only its type is logged.
func redactErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + " " + redactURL(ue.URL) + ": " + fmt.Sprintf("%T", ue.Err)
	}
	return fmt.Sprintf("%T", err)
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(url)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

func (s *Service) record(ctx context.Context, o storage.Owner, action, result, reason string) {
	if s.audit == nil {
		return
	}
	_ = s.audit.Record(ctx, audit.Event{Category: audit.CategoryAccount, Action: action, Result: result, Reason: reason,
		UserHash: s.audit.HashUser(o.StableID)})
}

// revokeAllBudget bounds RevokeAll as a whole (a variable for tests).
var revokeAllBudget = RevokeAllBudget

// RevokeAll revokes every connection of o at its provider (best effort,
// each attempt recorded) before the account's rows are deleted. It never
// fails the deletion: a provider that does not answer is recorded. A nil
// service (integrations off) revokes nothing.
func (s *Service) RevokeAll(ctx context.Context, o storage.Owner) error {
	if s == nil { // the feature is off
		return nil
	}
	var rows []connRow
	if err := s.store.DB.NewSelect().Model(&rows).Where("user_id = ?", o.ID).Scan(ctx); err != nil {
		return fmt.Errorf("integrations: revoke all: %w", err)
	}
	bctx, cancel := context.WithTimeout(ctx, revokeAllBudget)
	defer cancel()
	for _, r := range rows {
		if bctx.Err() != nil {
			s.record(ctx, o, "connection_revoke", audit.ResultFailure, "provider="+r.Provider+" connection="+r.Name+" not attempted: the time for revocations ran out")
			continue
		}
		s.revoke(bctx, o, r)
	}
	return nil
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hash(v string) string {
	h := sha256.Sum256([]byte(v))
	return hex.EncodeToString(h[:])
}

// validateToken checks a token set the provider issued.
func validateToken(t *oauth2.Token) error {
	if t == nil || t.AccessToken == "" {
		return errors.New("the provider issued no access token")
	}
	if len(t.AccessToken) > MaxTokenBytes || len(t.RefreshToken) > MaxTokenBytes {
		return errors.New("the provider issued a token that is too long")
	}
	if tt := strings.ToLower(t.Type()); tt != "bearer" {
		return fmt.Errorf("the provider issued a %.20q token; only bearer tokens are used", t.TokenType)
	}
	for _, c := range t.AccessToken {
		if c < 0x21 || c > 0x7e {
			return errors.New("the provider issued an access token with characters a header cannot carry")
		}
	}
	return nil
}
