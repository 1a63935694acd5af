package integrations

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/internal/egress"
	"github.com/enclave-mcp/enclave/storage"
)

// A person's own OAuth apps: a client they registered at a provider
// themselves, whose client id and secret they paste on the Connections
// page (AddApp, the session-only capability connectionAppAdd). A
// connection to an app works as one to an operator's provider, except
// that every exchange with the app's endpoints (discovery, token,
// revocation) goes through the egress client (https, public addresses
// only after DNS, no proxy, no redirect), since the person, not the
// operator, chose them.

// Bounds of people's own apps.
const (
	// MaxApps bounds one person's own apps.
	MaxApps = 20
	// AppCallbackPath is the prefix of own apps' redirect URIs:
	// AppCallbackPath + "/" + the app's name.
	AppCallbackPath = CallbackPath + "/app"
	maxClientID     = 256
	maxClientSecret = 1024
	maxScopes       = 32
	maxScopeLen     = 128
)

// ErrAppNotFound: the caller has no app of that name.
var ErrAppNotFound = errors.New("integrations: no such app")

// scopeToken is a scope as RFC 6749 (3.3) writes one.
var scopeToken = regexp.MustCompile(`^[\x21\x23-\x5b\x5d-\x7e]+$`)

type appRow struct {
	bun.BaseModel `bun:"table:integration_apps"`
	ID            int64     `bun:"id,pk,autoincrement"`
	UserID        int64     `bun:"user_id,notnull"`
	PublicID      string    `bun:"public_id,notnull"`
	Name          string    `bun:"name,notnull"`
	Issuer        string    `bun:"issuer,notnull"`
	AuthURL       string    `bun:"auth_url,notnull"`
	TokenURL      string    `bun:"token_url,notnull"`
	RevokeURL     string    `bun:"revoke_url,notnull"`
	ClientID      string    `bun:"client_id,notnull"`
	KeyID         *int64    `bun:"key_id"`
	Secret        string    `bun:"client_secret_ciphertext,notnull"`
	Scopes        string    `bun:"scopes,notnull"`
	APIHosts      string    `bun:"api_hosts,notnull"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
	UpdatedAt     time.Time `bun:"updated_at,notnull"`
}

func appAD(stableID, publicID string) string {
	return "integration:app:" + stableID + ":" + publicID
}

// AppInput is a person's own OAuth app as they give it (connectionAppAdd).
type AppInput struct {
	Name         string   `json:"name" jsonschema:"the app's name: 1-32 lowercase letters, digits, '-' or '_', starting with a letter; not the name of one of the server's providers"`
	Issuer       string   `json:"issuer,omitempty" jsonschema:"the provider's issuer URL (https): the endpoints not given are discovered from its metadata"`
	AuthURL      string   `json:"authorizationUrl,omitempty" jsonschema:"the provider's authorization endpoint (https); required without issuer"`
	TokenURL     string   `json:"tokenUrl,omitempty" jsonschema:"the provider's token endpoint (https); required without issuer"`
	RevokeURL    string   `json:"revocationUrl,omitempty" jsonschema:"the provider's RFC 7009 revocation endpoint (https), if it has one"`
	ClientID     string   `json:"clientId" jsonschema:"the client id the provider gave the app"`
	ClientSecret string   `json:"clientSecret,omitempty" jsonschema:"the app's client secret (none for a public client); kept sealed, never shown again"`
	Scopes       []string `json:"scopes,omitempty" jsonschema:"the scopes asked for at every connection"`
	APIHosts     []string `json:"apiHosts" jsonschema:"the only hosts the connections' tokens are sent to: public host names (api.example.com, *.example.com, an optional :port)"`
}

// App is a person's own OAuth app: never its client secret.
type App struct {
	Name        string    `json:"name"`
	Issuer      string    `json:"issuer,omitempty"`
	AuthURL     string    `json:"authorizationUrl"`
	TokenURL    string    `json:"tokenUrl"`
	RevokeURL   string    `json:"revocationUrl,omitempty"`
	ClientID    string    `json:"clientId"`
	HasSecret   bool      `json:"hasSecret" jsonschema:"whether a client secret is kept (it is never shown)"`
	Scopes      []string  `json:"scopes"`
	APIHosts    []string  `json:"apiHosts"`
	RedirectURI string    `json:"redirectUri" jsonschema:"the redirect URI to register for the app at the provider"`
	Shadowed    bool      `json:"shadowed,omitempty" jsonschema:"true when one of the server's providers now has the app's name: the app still works, and is always marked as your own"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

func (s *Service) appMeta(r appRow) App {
	scopes, hosts := []string{}, []string{}
	_ = json.Unmarshal([]byte(r.Scopes), &scopes) // columns this package wrote
	_ = json.Unmarshal([]byte(r.APIHosts), &hosts)
	_, shadowed := s.providers[r.Name]
	return App{Name: r.Name, Issuer: r.Issuer, AuthURL: r.AuthURL, TokenURL: r.TokenURL, RevokeURL: r.RevokeURL,
		ClientID: r.ClientID, HasSecret: r.Secret != "", Scopes: scopes, APIHosts: hosts, RedirectURI: s.AppRedirectURL(r.Name),
		Shadowed: shadowed, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
}

// AppRedirectURL is the redirect URI of the connect flow at an own app
// called name: register it at the provider.
func (s *Service) AppRedirectURL(name string) string {
	return strings.TrimSuffix(s.redirect, CallbackPath) + AppCallbackPath + "/" + url.PathEscape(name)
}

// AppRedirectBase is what an own app's redirect URI starts with; its
// name follows.
func (s *Service) AppRedirectBase() string {
	return strings.TrimSuffix(s.redirect, CallbackPath) + AppCallbackPath + "/"
}

// newAppClient is the client for people's own apps: the egress client
// (https, public addresses only, no redirect, bounded time and answer)
// and, with Options.AllowLoopbackHTTP (tests), plain http to a loopback
// host besides. https is always checked by egress, loopback included.
func (s *Service) newAppClient() *http.Client {
	hc := egress.NewClient(egress.Options{Timeout: s.timeout, MaxResponseBytes: MaxMetadataBytes, MaxRedirects: -1})
	hc.CheckRedirect = func(*http.Request, []*http.Request) error {
		return errors.New("integrations: providers' endpoints do not redirect")
	}
	if !s.allowLoop {
		return hc
	}
	plain := &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil || !isLoopback(host) {
				return egress.ErrForbiddenAddress
			}
			return nil
		}}).DialContext,
		ResponseHeaderTimeout: s.timeout,
	}
	secure := hc.Transport
	hc.Transport = appTransport(func(r *http.Request) (*http.Response, error) {
		if r.URL.Scheme == "http" && isLoopback(r.URL.Hostname()) {
			return boundedTransport{next: plain}.RoundTrip(r)
		}
		return secure.RoundTrip(r)
	})
	return hc
}

type appTransport func(*http.Request) (*http.Response, error)

func (f appTransport) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// privateNames are names (and the domains under them) that never name a
// public host.
var privateNames = []string{"localhost", "local", "internal", "localdomain", "home.arpa", "lan", "intranet", "corp", "private"}

// publicHost reports why host (a URL's host name or an API host pattern's
// name, lowercase) is not a public host, or "" when it is one.
func (s *Service) publicHost(host string) string {
	host = strings.TrimRight(strings.TrimPrefix(host, "*."), ".")
	for _, c := range host {
		if c > 0x7e || c == '%' {
			// An internationalized name is mapped (IDNA) only when it is
			// used: the names below would not be recognized before.
			return "is not written in ASCII (give an internationalized name in its xn-- form)"
		}
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if s.allowLoop && a.IsLoopback() {
			return ""
		}
		if !egress.Public(a) {
			return "is an address outside the public internet"
		}
		return ""
	}
	if s.allowLoop && host == "localhost" {
		return ""
	}
	if !strings.Contains(host, ".") {
		return "is not a public host name (it has no domain)"
	}
	if numericLabel(host[strings.LastIndexByte(host, '.')+1:]) {
		// 127.1, 0177.0.0.1, 0x7f.0.0.1: an IPv4 address as inet_aton
		// reads one (no top-level domain is a number).
		return "is an IP address in another form, not a host name"
	}
	for _, n := range privateNames {
		if host == n || strings.HasSuffix(host, "."+n) {
			return "is a local name, not a public host"
		}
	}
	return ""
}

// appEndpoint checks an own app's endpoint: an absolute https URL without
// user info or fragment, on a public host (with AllowLoopbackHTTP, also
// http to a loopback host).
func (s *Service) appEndpoint(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" || len(raw) > 2048 {
		return invalid("The %s must be an absolute https URL without user name, password or fragment.", field)
	}
	host := strings.ToLower(u.Hostname())
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && s.allowLoop && isLoopback(host):
		return nil
	default:
		return invalid("The %s must be an https URL.", field)
	}
	if why := s.publicHost(host); why != "" {
		return invalid("The %s's host %q %s.", field, host, why)
	}
	return nil
}

// AddApp validates and keeps the owner's own OAuth app: endpoints
// (discovered from the issuer through the egress client when not given),
// client id, client secret sealed with the key ring (bound to the owner
// and the app), scopes and API hosts. The secret is never returned.
func (s *Service) AddApp(ctx context.Context, o storage.Owner, in AppInput) (App, error) {
	in.Name = strings.TrimSpace(in.Name)
	if !providerName.MatchString(in.Name) {
		return App{}, invalid("An app's name is 1-32 lowercase letters, digits, '-' or '_', starting with a letter.")
	}
	if _, ok := s.providers[in.Name]; ok {
		return App{}, invalid("%q is the name of one of this server's providers; give your app another name.", in.Name)
	}
	in.ClientID = strings.TrimSpace(in.ClientID)
	in.ClientSecret = strings.TrimSpace(in.ClientSecret)
	if in.ClientID == "" || len(in.ClientID) > maxClientID || !printable(in.ClientID) {
		return App{}, invalid("The client id is required: up to %d printable characters, as the provider shows it.", maxClientID)
	}
	if len(in.ClientSecret) > maxClientSecret || (in.ClientSecret != "" && !printable(in.ClientSecret)) {
		return App{}, invalid("The client secret must be up to %d printable characters.", maxClientSecret)
	}
	if len(in.Scopes) > maxScopes {
		return App{}, invalid("An app asks for at most %d scopes.", maxScopes)
	}
	scopes := []string{}
	for _, sc := range in.Scopes {
		for _, f := range strings.Fields(sc) {
			if len(f) > maxScopeLen || !scopeToken.MatchString(f) {
				return App{}, invalid("The scope %.40q is not a valid OAuth scope.", f)
			}
			scopes = append(scopes, f)
		}
	}
	if len(scopes) > maxScopes {
		return App{}, invalid("An app asks for at most %d scopes.", maxScopes)
	}
	hosts, err := s.appHosts(in.APIHosts)
	if err != nil {
		return App{}, err
	}
	in.Issuer, in.AuthURL, in.TokenURL, in.RevokeURL = strings.TrimSpace(in.Issuer), strings.TrimSpace(in.AuthURL), strings.TrimSpace(in.TokenURL), strings.TrimSpace(in.RevokeURL)
	if in.Issuer == "" && (in.AuthURL == "" || in.TokenURL == "") {
		return App{}, invalid("Give the provider's issuer, or both its authorization URL and its token URL.")
	}
	for _, f := range []struct{ name, v string }{{"issuer", in.Issuer}, {"authorization URL", in.AuthURL}, {"token URL", in.TokenURL}, {"revocation URL", in.RevokeURL}} {
		if f.v != "" {
			if err := s.appEndpoint(f.name, f.v); err != nil {
				return App{}, err
			}
		}
	}
	auth, token, revoke := in.AuthURL, in.TokenURL, in.RevokeURL
	if in.Issuer != "" && (auth == "" || token == "" || revoke == "") {
		md, err := discover(ctx, s.appClient, in.Issuer)
		switch {
		case err != nil && (auth == "" || token == ""):
			s.log.InfoContext(ctx, "integrations: an app's issuer discovery failed", "issuer", redactURL(in.Issuer), "err", redactErr(err))
			return App{}, invalid("The issuer's metadata could not be read (at %s/.well-known/openid-configuration or oauth-authorization-server, over https, naming the same issuer); give the authorization and token URLs instead.", strings.TrimSuffix(redactURL(in.Issuer), "/"))
		case err == nil:
			for _, f := range []struct {
				name string
				v    *string
				md   string
			}{{"authorization URL", &auth, md.AuthorizationEndpoint}, {"token URL", &token, md.TokenEndpoint}, {"revocation URL", &revoke, md.RevocationEndpoint}} {
				if *f.v != "" || f.md == "" {
					continue
				}
				if err := s.appEndpoint("discovered "+f.name, f.md); err != nil {
					if f.name == "revocation URL" {
						continue // a revocation endpoint we will not call
					}
					return App{}, err
				}
				*f.v = f.md
			}
			if auth == "" || token == "" {
				return App{}, invalid("The issuer's metadata names no authorization or token endpoint; give them instead.")
			}
		}
	}
	sb, _ := json.Marshal(scopes)
	hb, _ := json.Marshal(hosts)
	now := s.now().UTC()
	row := appRow{UserID: o.ID, PublicID: "app_" + randomToken(15), Name: in.Name, Issuer: in.Issuer, AuthURL: auth, TokenURL: token,
		RevokeURL: revoke, ClientID: in.ClientID, Scopes: string(sb), APIHosts: string(hb), CreatedAt: now, UpdatedAt: now}
	if in.ClientSecret != "" {
		keyID, sealed, err := s.ring.Seal(appAD(o.StableID, row.PublicID), []byte(in.ClientSecret))
		if err != nil {
			return App{}, fmt.Errorf("integrations: add app: %w", err)
		}
		row.KeyID, row.Secret = &keyID, sealed
	}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if s.store.Dialect() == storage.Postgres {
			// One addition at a time per person, so the count and the
			// name check below see the others' rows. (SQLite writes are
			// serial already.)
			var id int64
			if err := tx.NewSelect().Table("users").Column("id").Where("id = ?", o.ID).For("UPDATE").Scan(ctx, &id); err != nil {
				return err
			}
		}
		n, err := tx.NewSelect().Model((*appRow)(nil)).Where("user_id = ?", o.ID).Count(ctx)
		if err != nil {
			return err
		}
		if n >= MaxApps {
			return invalid("You have %d apps, the most one account may keep; remove one first.", MaxApps)
		}
		exists, err := tx.NewSelect().Model((*appRow)(nil)).Where("user_id = ? AND name = ?", o.ID, in.Name).Exists(ctx)
		if err != nil {
			return err
		}
		if exists {
			return &capabilities.Error{Code: capabilities.CodeConflict, Message: fmt.Sprintf("You already have an app named %q; remove it first, or pick another name.", in.Name)}
		}
		_, err = tx.NewInsert().Model(&row).Returning("NULL").Exec(ctx)
		return err
	})
	if err != nil {
		if _, ok := errors.AsType[*capabilities.Error](err); ok {
			return App{}, err
		}
		return App{}, fmt.Errorf("integrations: add app: %w", err)
	}
	s.record(ctx, o, "connection_app_add", audit.ResultSuccess, "app="+row.Name)
	return s.appMeta(row), nil
}

// appHosts normalizes an own app's API hosts: as an operator's
// (secrets.NormalizeHosts: no wildcard over a public suffix or a
// top-level domain), and public host names only.
func (s *Service) appHosts(in []string) ([]string, error) {
	var raw []string
	for _, h := range in {
		raw = append(raw, strings.Fields(strings.ReplaceAll(h, ",", " "))...)
	}
	if len(raw) == 0 {
		return nil, invalid("Name at least one API host: the connections' tokens are sent to those hosts only.")
	}
	hosts, err := secrets.NormalizeHosts(raw)
	if err != nil {
		return nil, invalid("API hosts: %s.", strings.TrimPrefix(err.Error(), secrets.ErrInvalid.Error()+": "))
	}
	for _, h := range hosts {
		name := h
		if i := strings.LastIndexByte(h, ':'); i > 0 {
			name = h[:i]
		}
		if why := s.publicHost(name); why != "" {
			return nil, invalid("The API host %q %s.", h, why)
		}
	}
	return hosts, nil
}

// numericLabel reports whether a host name's last label is a number
// (decimal, octal or 0x hexadecimal), as no top-level domain is.
func numericLabel(l string) bool {
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		return strings.Trim(h, "0123456789abcdef") == ""
	}
	return l != "" && strings.Trim(l, "0123456789") == ""
}

func printable(v string) bool {
	for _, c := range v {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// ListApps returns the owner's own apps by name: never a secret.
func (s *Service) ListApps(ctx context.Context, o storage.Owner) ([]App, error) {
	var rows []appRow
	err := s.store.Reader.NewSelect().Model(&rows).Where("user_id = ?", o.ID).Order("name").Limit(MaxApps).Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("integrations: list apps: %w", err)
	}
	out := make([]App, len(rows))
	for i, r := range rows {
		out[i] = s.appMeta(r)
	}
	return out, nil
}

func (s *Service) getApp(ctx context.Context, db bun.IDB, o storage.Owner, name string) (appRow, error) {
	var r appRow
	err := db.NewSelect().Model(&r).Where("user_id = ? AND name = ?", o.ID, name).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return appRow{}, ErrAppNotFound
	}
	if err != nil {
		return appRow{}, fmt.Errorf("integrations: get app: %w", err)
	}
	return r, nil
}

func (s *Service) getAppByID(ctx context.Context, db bun.IDB, o storage.Owner, id int64) (appRow, error) {
	var r appRow
	err := db.NewSelect().Model(&r).Where("user_id = ? AND id = ?", o.ID, id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return appRow{}, ErrAppNotFound
	}
	if err != nil {
		return appRow{}, fmt.Errorf("integrations: get app: %w", err)
	}
	return r, nil
}

// appProvider is the owner's app as a provider: its secret opened, its
// endpoints as stored, the egress client.
func (s *Service) appProvider(ctx context.Context, o storage.Owner, r appRow) (*providerState, error) {
	secret := ""
	if r.Secret != "" && r.KeyID != nil {
		b, err := s.ring.Open(ctx, *r.KeyID, r.Secret, appAD(o.StableID, r.PublicID))
		if err != nil {
			return nil, fmt.Errorf("integrations: open app %s: %w", r.Name, err)
		}
		secret = string(b)
	}
	p := &providerState{hc: s.appClient, appID: r.ID, eps: &endpoints{auth: r.AuthURL, token: r.TokenURL, revoke: r.RevokeURL}}
	p.Name, p.Issuer, p.AuthURL, p.TokenURL, p.RevokeURL, p.ClientID, p.ClientSecret = r.Name, r.Issuer, r.AuthURL, r.TokenURL, r.RevokeURL, r.ClientID, secret
	_ = json.Unmarshal([]byte(r.Scopes), &p.Scopes)
	_ = json.Unmarshal([]byte(r.APIHosts), &p.APIHosts)
	return p, nil
}

// providerFor is the provider of the owner's connection r: its app, or
// the operator's provider. ErrNotFound when it is gone.
func (s *Service) providerFor(ctx context.Context, o storage.Owner, r connRow) (*providerState, error) {
	if r.AppID != nil {
		a, err := s.getAppByID(ctx, s.store.DB, o, *r.AppID)
		if errors.Is(err, ErrAppNotFound) {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		return s.appProvider(ctx, o, a)
	}
	p, ok := s.providers[r.Provider]
	if !ok {
		return nil, ErrNotFound
	}
	return p, nil
}

func (p *providerState) appIDPtr() *int64 {
	if p.appID == 0 {
		return nil
	}
	id := p.appID
	return &id
}

// AppRemoved says what RemoveApp did.
type AppRemoved struct {
	Removed bool `json:"removed"`
	// Disconnected names the connections to the app, now gone.
	Disconnected []string `json:"disconnected"`
	// Revoked reports that the provider confirmed the revocation of every
	// one of their tokens.
	Revoked bool `json:"revoked"`
}

// RemoveApp disconnects the owner's connections to their app called name
// (revoking their tokens at the provider first, best effort) and forgets
// the app, its secret and its pending flows.
func (s *Service) RemoveApp(ctx context.Context, o storage.Owner, name string) (AppRemoved, error) {
	a, err := s.getApp(ctx, s.store.DB, o, name)
	if err != nil {
		return AppRemoved{}, err
	}
	var conns []connRow
	if err := s.store.DB.NewSelect().Model(&conns).Where("user_id = ? AND app_id = ?", o.ID, a.ID).Order("name").Scan(ctx); err != nil {
		return AppRemoved{}, fmt.Errorf("integrations: remove app: %w", err)
	}
	out := AppRemoved{Disconnected: []string{}, Revoked: true}
	bctx, cancel := context.WithTimeout(ctx, revokeAllBudget)
	defer cancel()
	for _, c := range conns {
		if !s.revoke(bctx, o, c) {
			out.Revoked = false
		}
		out.Disconnected = append(out.Disconnected, c.Name)
	}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		for _, m := range []any{(*connRow)(nil), (*stateRow)(nil)} {
			if _, err := tx.NewDelete().Model(m).Where("user_id = ? AND app_id = ?", o.ID, a.ID).Exec(ctx); err != nil {
				return err
			}
		}
		res, err := tx.NewDelete().Model((*appRow)(nil)).Where("user_id = ? AND id = ?", o.ID, a.ID).Exec(ctx)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		out.Removed = n > 0
		return nil
	})
	if err != nil {
		return AppRemoved{}, fmt.Errorf("integrations: remove app: %w", err)
	}
	s.record(ctx, o, "connection_app_remove", audit.ResultSuccess, "app="+a.Name)
	return out, nil
}
