package remotemcp

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
	"hash/maphash"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/internal/background"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
)

// Bounds and defaults.
const (
	// Prefix starts the name of every remote tool's capability; add the
	// provider with Registry.AddProvider(Prefix, s.Provider()).
	Prefix = "mcp_"
	// Separator separates the server's name from the tool's name.
	Separator = "__"
	// PagePath is the account page of remote MCP servers.
	PagePath = "/account/mcp-servers"
	// CallbackPath is the prefix of the consent redirect URIs, on the
	// server's own origin: each remote server has its own,
	// CallbackPath + "/" + its public id, so a code sent back for one
	// server's flow is never exchanged at another server's token endpoint
	// (the mix-up defence).
	CallbackPath = "/account/mcp-servers/callback"
	// ClientMetadataPath is the prefix of the client ID metadata documents
	// enclave serves for itself (one per remote server: ClientMetadataPath
	// + "/" + its public id), used as client_id at authorization servers
	// that support them.
	ClientMetadataPath = "/mcp-servers/clients"
	// MaxServers bounds one person's remote servers.
	MaxServers = 20
	// MaxTools bounds the tools kept of one server; the rest are skipped.
	MaxTools = 128
	// MaxSchemaBytes bounds one tool's input schema.
	MaxSchemaBytes = 16 << 10
	// MaxDescription bounds one tool's description, in bytes.
	MaxDescription = 2 << 10
	// MaxListBytes bounds an answer to tools/list or to metadata requests.
	MaxListBytes = 2 << 20
	// MaxCallBytes bounds the answer to one tool call.
	MaxCallBytes = 1 << 20
	// StateTTL is how long a consent may take.
	StateTTL = 10 * time.Minute
	// MaxPendingStates bounds one person's unfinished consents.
	MaxPendingStates = 10
	// RefreshBefore is how long before its expiry an access token is
	// renewed.
	RefreshBefore = 2 * time.Minute
	// MinRefreshInterval is the least time between two renewals of a
	// server's token.
	MinRefreshInterval = 30 * time.Second
	// DefaultTimeout bounds each exchange with a remote server or its
	// authorization server.
	DefaultTimeout = 15 * time.Second
	// BreakerFailures consecutive failures open a server's breaker ...
	BreakerFailures = 3
	// ... for BreakerCooldown, after which one trial call is let through.
	BreakerCooldown = 30 * time.Second
	// MaxTokenBytes bounds a token the remote authorization server issues.
	MaxTokenBytes = 16 << 10
)

// The statuses of a remote server.
const (
	// StatusActive: its tools are offered.
	StatusActive = "active"
	// StatusConsentRequired: the person must finish consent on the page.
	StatusConsentRequired = "consent_required"
	// StatusExpired: the token expired and could not be renewed.
	StatusExpired = "expired"
)

// The ways a remote server is reached.
const (
	AuthNone  = "none"
	AuthOAuth = "oauth"
)

var (
	// ErrNotFound: the caller has no server of that name.
	ErrNotFound = errors.New("remotemcp: no such server")
	serverName  = regexp.MustCompile(`^[a-z][a-z0-9]{0,15}$`)
	toolName    = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// Auditor records audit events; *audit.Log implements it.
type Auditor interface {
	Record(ctx context.Context, e audit.Event) error
	HashUser(stableUserID string) string
}

// Options tune remote MCP servers. Every zero value is a documented
// default.
type Options struct {
	// Disabled turns remote MCP servers off: no capability, page or tool.
	// The tables exist and are exported and deleted all the same.
	Disabled bool
	// AllowLoopbackHTTP lets servers (and their authorization servers)
	// be reached over plain http on a loopback address, and lifts the
	// egress client's address check. For tests only: never set it in
	// production, where a user could make enclave call its own network.
	AllowLoopbackHTTP bool
	// Timeout bounds each exchange with a remote. Default DefaultTimeout.
	Timeout time.Duration
}

// Config configures the service: Options, plus what the server provides.
// Store, Ring, Owners, Registry and BaseURL are required.
type Config struct {
	Options
	Store    *storage.Store
	Ring     *envelope.Ring
	Owners   capabilities.OwnerOf
	Registry *capabilities.Registry
	BaseURL  string
	Audit    Auditor
	Logger   *slog.Logger
	// Bus, when set, tells the other replicas that a person's servers
	// changed, so that their generation (Provider.Generation) moves there
	// too: their MCP sessions are told of the change and their cached
	// visible sets are worked out again.
	Bus cluster.Bus
	// Deletions, when set, revoke the tokens of an account's servers at
	// its deletion, before its rows go (lifecycle.Service; see Wire).
	Deletions interface{ AddHooks(...lifecycle.Hook) }
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// Service keeps remote MCP servers and offers their tools.
type Service struct {
	store    *storage.Store
	ring     *envelope.Ring
	owners   capabilities.OwnerOf
	reg      *capabilities.Registry
	base     string
	audit    Auditor
	log      *slog.Logger
	opts     Options
	timeout  time.Duration
	now      func() time.Time
	listHTTP *http.Client
	callHTTP *http.Client

	mu       sync.Mutex
	gens     map[string]uint64
	breakers map[string]*breaker
	// cache: each server row's compiled tools, by owner, server and a
	// hash (under seed) of its tool list.
	cache map[string][]capabilities.Capability
	seed  maphash.Seed
	bus   cluster.Bus
	epoch atomic.Uint64 // bus gaps seen
	// refreshing: the servers whose tool list is being read again after
	// a notifications/tools/list_changed.
	refreshing map[string]bool
	// listChangedAt: when each server's list was last read again after a
	// notifications/tools/list_changed.
	listChangedAt map[string]time.Time
	// The reads again in the background (refreshSoon), which write the
	// list to the store: Close cancels them (stop) and waits for them,
	// and none starts after it.
	stop       context.Context
	cancelStop context.CancelFunc
	background background.Group
}

// New returns the service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Ring == nil || cfg.Owners == nil || cfg.Registry == nil || cfg.BaseURL == "" {
		return nil, errors.New("remotemcp: Store, Ring, Owners, Registry and BaseURL are required")
	}
	s := &Service{
		store: cfg.Store, ring: cfg.Ring, owners: cfg.Owners, reg: cfg.Registry, base: strings.TrimSuffix(cfg.BaseURL, "/"),
		audit: cfg.Audit, log: cmp.Or(cfg.Logger, slog.Default()), opts: cfg.Options, timeout: cmp.Or(cfg.Timeout, DefaultTimeout),
		now: cfg.Now, gens: map[string]uint64{}, breakers: map[string]*breaker{}, cache: map[string][]capabilities.Capability{}, seed: maphash.MakeSeed(),
		refreshing: map[string]bool{}, listChangedAt: map[string]time.Time{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.stop, s.cancelStop = context.WithCancel(context.Background())
	if cfg.Bus != nil {
		s.bus = cfg.Bus
		cfg.Bus.Subscribe(genTopic, func(_ string, payload []byte) { s.bump(string(payload)) })
		cfg.Bus.OnGap(func() { s.epoch.Add(1) })
	}
	s.listHTTP = s.newHTTPClient(MaxListBytes)
	s.callHTTP = s.newHTTPClient(MaxCallBytes)
	return s, nil
}

// Close ends the tool lists being read again in the background (after a
// remote said its list changed) and waits for them, since each writes to
// the store; none starts after it. Call it before the store closes. A nil
// Service (remote MCP servers turned off) has nothing to close.
func (s *Service) Close() {
	if s == nil {
		return
	}
	s.cancelStop() // a read started from now on ends at once
	s.background.Close()
}

// Server is a remote MCP server's metadata: never a token.
type Server struct {
	Name      string     `json:"name" jsonschema:"the short name prefixing the server's tools: mcp_<name>__<tool>"`
	URL       string     `json:"url"`
	Status    string     `json:"status" schema:"enum=active|consent_required|expired"`
	Auth      string     `json:"auth" schema:"enum=none|oauth"`
	Issuer    string     `json:"issuer,omitempty" jsonschema:"the authorization server the token comes from"`
	Tools     []string   `json:"tools" jsonschema:"the capability names of the server's tools"`
	ToolsAt   *time.Time `json:"toolsAt,omitempty"`
	ConsentAt string     `json:"consentUrl,omitempty" jsonschema:"where the person finishes consent, when the status is consent_required"`
	LastError string     `json:"lastError,omitempty"`
	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
}

type serverRow struct {
	bun.BaseModel `bun:"table:remote_mcp_servers"`
	ID            int64      `bun:"id,pk,autoincrement"`
	UserID        int64      `bun:"user_id,notnull"`
	PublicID      string     `bun:"public_id,notnull"`
	Name          string     `bun:"name,notnull"`
	URL           string     `bun:"url,notnull"`
	Status        string     `bun:"status,notnull"`
	Auth          string     `bun:"auth,notnull"`
	Issuer        string     `bun:"issuer,notnull"`
	AuthEndpoint  string     `bun:"authorization_endpoint,notnull"`
	TokenEndpoint string     `bun:"token_endpoint,notnull"`
	RevokeURL     string     `bun:"revocation_endpoint,notnull"`
	ClientID      string     `bun:"client_id,notnull"`
	Scopes        string     `bun:"scopes,notnull"`
	KeyID         *int64     `bun:"key_id"`
	Token         string     `bun:"token_ciphertext,notnull"`
	ExpiresAt     *time.Time `bun:"expires_at"`
	RefreshAt     *time.Time `bun:"refresh_at"`
	Tools         string     `bun:"tools,notnull"`
	ToolsAt       *time.Time `bun:"tools_at"`
	LastError     string     `bun:"last_error,notnull"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	UpdatedAt     time.Time  `bun:"updated_at,notnull"`
}

func (s *Service) meta(r serverRow) Server {
	out := Server{Name: r.Name, URL: r.URL, Status: r.Status, Auth: r.Auth, Issuer: r.Issuer, Tools: []string{},
		ToolsAt: utcPtr(r.ToolsAt), LastError: r.LastError, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
	for _, t := range r.tools() {
		out.Tools = append(out.Tools, CapabilityName(r.Name, t.Name))
	}
	if r.Status == StatusConsentRequired {
		out.ConsentAt = s.base + PagePath + "?consent=" + url.QueryEscape(r.Name)
	}
	return out
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// CapabilityName is the capability name of a remote server's tool.
func CapabilityName(server, tool string) string { return Prefix + server + Separator + tool }

// parseName splits a name made by CapabilityName: server names have no "_".
func parseName(name string) (server, tool string, ok bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return "", "", false
	}
	server, tool, ok = strings.Cut(rest, Separator)
	return server, tool, ok && serverName.MatchString(server) && toolName.MatchString(tool)
}

func invalid(format string, args ...any) error {
	return capabilities.Errorf(capabilities.CodeInvalidInput, format, args...)
}

func unavailable(format string, args ...any) error {
	return &capabilities.Error{Code: capabilities.CodeConflict, Message: fmt.Sprintf(format, args...)}
}

// checkURL validates a URL the user (or a remote's metadata) gave: https,
// or http to a loopback host when Options.AllowLoopbackHTTP is set; no
// credentials, no fragment.
func (s *Service) checkURL(raw string) (*url.URL, error) {
	if len(raw) > 2048 {
		return nil, errors.New("the URL is longer than 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return nil, errors.New("it is not an absolute URL")
	}
	if u.User != nil {
		return nil, errors.New("credentials in the URL are not allowed")
	}
	if u.Fragment != "" {
		return nil, errors.New("the URL has a fragment")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && s.opts.AllowLoopbackHTTP && loopback(u.Hostname()):
	default:
		return nil, errors.New("it must be an https URL")
	}
	return u, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// defaultName derives a server name from the URL's host.
func defaultName(u *url.URL) string {
	host := u.Hostname()
	labels := strings.Split(host, ".")
	pick := labels[0]
	if len(labels) > 2 && (pick == "mcp" || pick == "api" || pick == "www") {
		pick = labels[1]
	}
	var b strings.Builder
	for _, c := range strings.ToLower(pick) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
			b.WriteRune(c)
		}
	}
	n := b.String()
	if n == "" || n[0] < 'a' || n[0] > 'z' {
		n = "s" + n
	}
	if len(n) > 16 {
		n = n[:16]
	}
	return n
}

func (s *Service) owner(ctx context.Context, c capabilities.Caller) (storage.Owner, error) {
	o, err := s.owners(ctx, c)
	return storage.Owner(o), err
}

func (s *Service) get(ctx context.Context, db bun.IDB, o storage.Owner, name string) (serverRow, error) {
	var r serverRow
	err := db.NewSelect().Model(&r).Where("user_id = ? AND name = ?", o.ID, name).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return r, ErrNotFound
	}
	return r, err
}

// List returns the owner's remote servers by name.
func (s *Service) List(ctx context.Context, o storage.Owner) ([]Server, error) {
	var rows []serverRow
	if err := s.store.Reader.NewSelect().Model(&rows).Where("user_id = ?", o.ID).Order("name").Scan(ctx); err != nil {
		return nil, fmt.Errorf("remotemcp: list: %w", err)
	}
	out := make([]Server, 0, len(rows))
	for _, r := range rows {
		out = append(out, s.meta(r))
	}
	return out, nil
}

// Get returns the owner's server called name.
func (s *Service) Get(ctx context.Context, o storage.Owner, name string) (Server, error) {
	r, err := s.get(ctx, s.store.Reader, o, name)
	if err != nil {
		return Server{}, err
	}
	return s.meta(r), nil
}

// Removed is the answer of Remove.
type Removed struct {
	Name    string `json:"name"`
	Revoked bool   `json:"revoked" jsonschema:"whether the remote authorization server confirmed revoking the token"`
}

// Remove revokes the server's tokens at its authorization server when it
// has a revocation endpoint (best effort), then forgets the server.
func (s *Service) Remove(ctx context.Context, o storage.Owner, name string) (Removed, error) {
	r, err := s.get(ctx, s.store.DB, o, name)
	if err != nil {
		return Removed{}, err
	}
	revoked := s.revoke(ctx, o, r)
	if _, err := s.store.DB.NewDelete().Model((*serverRow)(nil)).Where("id = ? AND user_id = ?", r.ID, o.ID).Exec(ctx); err != nil {
		return Removed{}, fmt.Errorf("remotemcp: remove: %w", err)
	}
	s.changed(o.StableID)
	s.record(ctx, o, "mcp_server_remove", audit.ResultSuccess, "server="+r.Name)
	return Removed{Name: r.Name, Revoked: revoked}, nil
}

// RevokeAll revokes every token of the owner's servers, best effort,
// before the account's rows are deleted. A nil service (the feature
// off) revokes nothing.
func (s *Service) RevokeAll(ctx context.Context, o storage.Owner) error {
	if s == nil { // the feature is off
		return nil
	}
	var rows []serverRow
	if err := s.store.DB.NewSelect().Model(&rows).Where("user_id = ? AND token_ciphertext <> ''", o.ID).Scan(ctx); err != nil {
		return fmt.Errorf("remotemcp: revoke all: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, r := range rows {
		s.revoke(ctx, o, r)
	}
	return nil
}

// genTopic carries, on the cluster bus, the stable id of a person whose
// servers changed.
const genTopic = "remotemcp.servers"

// changed bumps the owner's generation, here and, through the bus, on
// every replica: their tool set may have changed.
func (s *Service) changed(stableID string) {
	if s.bus == nil {
		s.bump(stableID)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The bus delivers to this replica's subscriber too, even when it fails.
	if err := s.bus.Publish(ctx, genTopic, []byte(stableID)); err != nil {
		s.epoch.Add(1) // the others may not hear of it: a gap here too
		s.log.Warn("remotemcp: telling the other replicas of changed servers failed", "err", err)
	}
}

func (s *Service) bump(stableID string) {
	s.mu.Lock()
	s.gens[stableID]++
	s.mu.Unlock()
}

// generation is the owner's count of changes seen here, plus the bus gaps
// seen (after a gap, anyone's servers may have changed unseen).
func (s *Service) generation(stableID string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gens[stableID] + s.epoch.Load()
}

func (s *Service) record(ctx context.Context, o storage.Owner, action, result, reason string) {
	if s.audit == nil {
		return
	}
	if err := s.audit.Record(ctx, audit.Event{Category: audit.CategoryAccount, Action: action, Result: result, Reason: reason, UserHash: s.audit.HashUser(o.StableID)}); err != nil {
		s.log.WarnContext(ctx, "remotemcp: audit failed", "action", action, "err", err)
	}
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

func serverAD(stableID, publicID string) string {
	return "remotemcp:server:" + stableID + ":" + publicID
}

func stateAD(stableID, stateHash string) string {
	return "remotemcp:state:" + stableID + ":" + stateHash
}

// tokenSet is what is sealed in a server row.
type tokenSet struct {
	AccessToken  string    `json:"a"`
	RefreshToken string    `json:"r,omitempty"`
	ClientSecret string    `json:"c,omitempty"`
	Expiry       time.Time `json:"e,omitzero"`
}

func (s *Service) seal(o storage.Owner, r *serverRow, ts tokenSet) error {
	b, err := json.Marshal(ts)
	if err != nil {
		return err
	}
	keyID, sealed, err := s.ring.Seal(serverAD(o.StableID, r.PublicID), b)
	if err != nil {
		return fmt.Errorf("remotemcp: seal: %w", err)
	}
	r.KeyID, r.Token = &keyID, sealed
	r.ExpiresAt, r.RefreshAt = nil, nil
	if !ts.Expiry.IsZero() {
		e := ts.Expiry.UTC()
		r.ExpiresAt = &e
		if ts.RefreshToken != "" {
			// Not sooner than MinRefreshInterval: a token shorter-lived
			// than RefreshBefore would be renewed at every use.
			at := e.Add(-RefreshBefore)
			if soonest := s.now().UTC().Add(MinRefreshInterval); at.Before(soonest) {
				at = soonest
			}
			r.RefreshAt = &at
		}
	}
	return nil
}

func (s *Service) open(ctx context.Context, o storage.Owner, r serverRow) (tokenSet, error) {
	var ts tokenSet
	if r.Token == "" || r.KeyID == nil {
		return ts, nil
	}
	b, err := s.ring.Open(ctx, *r.KeyID, r.Token, serverAD(o.StableID, r.PublicID))
	if err != nil {
		return ts, fmt.Errorf("remotemcp: open token: %w", err)
	}
	err = json.Unmarshal(b, &ts)
	return ts, err
}

// QuotaClass is the quota class of every remote tool's capability.
const QuotaClass = "remote"

// DefaultDailyCalls is the daily limit of QuotaClass the server applies
// unless the operator sets one.
const DefaultDailyCalls = 2000
