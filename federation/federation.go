// Package federation signs people in with identities they hold at external
// providers: any OpenID Connect provider by its issuer URL (discovery, PKCE,
// nonce, ID token verified with go-jose v3), and GitHub (OAuth 2 and its user
// and emails API), with Google and Microsoft as named OpenID Connect
// presets.
//
// A sign-in is started by Begin, which records a single-use state bound to
// the browser (the SHA-256 of a cookie only that browser holds) and returns
// the provider's authorization URL; the provider's redirect is handed to
// Finish, which consumes the state (whatever the outcome), checks that it
// was started by this browser for this provider, exchanges the code and
// returns the verified identity. Resolve then applies the linking rules,
// which never let an identity take an account over:
//
//   - an identity already linked signs in to its account;
//   - a signed-in person linking an identity links it to their account;
//   - an identity whose verified email is an account's email links only
//     after the person proves that account once (HoldLink, then
//     CompleteLink after the password or passkey check);
//   - an unverified email never links, and never opens an account;
//   - otherwise a verified identity may open an account, when signup
//     allows it (the caller's accounts service decides).
//
// Linked identities keep only the provider, issuer and subject; their
// tables are declared for the inventory and retention in fedtables.
package federation

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"
	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/storage"
)

// Kind is how a provider is spoken to.
type Kind string

const (
	// KindOIDC: an OpenID Connect provider found by discovery at its issuer.
	KindOIDC Kind = "oidc"
	// KindGitHub: GitHub's OAuth 2 and its REST API.
	KindGitHub Kind = "github"
)

// GitHubIssuer is the issuer recorded for GitHub identities (GitHub has no
// OpenID Connect issuer for people); the subject is the numeric user id,
// which survives a change of login.
const GitHubIssuer = "https://github.com"

// Provider is one operator-configured identity provider.
type Provider struct {
	// Name identifies the provider in URLs and in linked identities
	// (lower-case letters, digits and hyphens): "google", "corp".
	Name string
	// Label is the button's text after "Sign in with".
	Label string
	Kind  Kind
	// Issuer is an OpenID Connect provider's issuer URL (KindOIDC); for
	// GitHub it is recorded with the identities (default GitHubIssuer, or
	// AuthURL's origin when AuthURL is set: a GitHub Enterprise server's
	// user ids are not github.com's).
	Issuer       string
	ClientID     string
	ClientSecret string
	// Scopes are asked for; default "openid email" (OIDC), "read:user
	// user:email" (GitHub).
	Scopes []string
	// TrustMFA lets a sign-in through this provider count as the second
	// factor when the provider says it used one (its ID token's amr claim
	// names "mfa", "otp", "hwk", "swk", "sms" or "fido"). Off by default:
	// the account's own second factor still applies.
	TrustMFA bool
	// GitHub's endpoints (tests, GitHub Enterprise): defaults
	// https://github.com/login/oauth/... and https://api.github.com.
	AuthURL, TokenURL, APIURL string
}

// Google returns the Google preset.
func Google(clientID, clientSecret string) Provider {
	return Provider{Name: "google", Label: "Google", Kind: KindOIDC, Issuer: "https://accounts.google.com", ClientID: clientID, ClientSecret: clientSecret}
}

// Microsoft returns the Microsoft Entra ID preset for one tenant (its id
// or domain): the issuer must be the tenant's, since the multi-tenant
// "common" endpoint has no single issuer to verify.
func Microsoft(tenant, clientID, clientSecret string) Provider {
	return Provider{Name: "microsoft", Label: "Microsoft", Kind: KindOIDC,
		Issuer: "https://login.microsoftonline.com/" + url.PathEscape(tenant) + "/v2.0", ClientID: clientID, ClientSecret: clientSecret}
}

// GitHub returns the GitHub preset.
func GitHub(clientID, clientSecret string) Provider {
	return Provider{Name: "github", Label: "GitHub", Kind: KindGitHub, ClientID: clientID, ClientSecret: clientSecret}
}

// Config configures a Service.
type Config struct {
	Store *storage.Store
	// BaseURL is this server's public origin; a provider redirects to
	// BaseURL + CallbackPath(name).
	BaseURL   string
	Providers []Provider
	// HTTPClient talks to providers (discovery, keys, tokens, APIs).
	// Default: a client with a 10 s timeout.
	HTTPClient *http.Client
	// StateTTL bounds a sign-in in progress. Default 10 minutes.
	StateTTL time.Duration
	Now      func() time.Time
}

// CallbackPath is where provider name redirects back to.
func CallbackPath(name string) string { return "/auth/external/" + name + "/callback" }

// Errors of a sign-in. Their text is safe to show; an error that wraps
// one (ErrProvider with the provider's answer, for instance) is for the
// log: show the sentinel it matches with errors.Is, not its Error().
var (
	ErrUnknownProvider = errors.New("this sign-in provider is not configured")
	ErrBadState        = errors.New("this sign-in link was already used, has expired, or was started in another browser; start again")
	ErrDenied          = errors.New("the provider did not sign you in")
	ErrProvider        = errors.New("the provider's answer could not be verified; try again")
	ErrUnverifiedEmail = errors.New("the provider did not verify this email address, so it cannot sign in to or open an account here")
	ErrNoEmail         = errors.New("the provider shared no email address")
	ErrLinkedElsewhere = errors.New("this identity is already linked to another account")
	ErrLastSignIn      = errors.New("this is the account's only way to sign in; set a password or add a passkey first")
	ErrNotFound        = errors.New("no such linked identity")
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// Service runs sign-ins with the configured providers. It is safe for
// concurrent use.
type Service struct {
	cfg       Config
	db        *bun.DB
	providers map[string]*provider
	order     []string
}

type provider struct {
	Provider
	svc *Service

	mu   sync.Mutex
	oidc *openIDProvider // discovered on first use
}

// New checks cfg and returns the Service. OpenID Connect discovery happens
// on first use, so a provider that is down does not stop the server.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("federation: Config.Store is required")
	}
	base, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" {
		return nil, fmt.Errorf("federation: Config.BaseURL %q: want an absolute http(s) URL", cfg.BaseURL)
	}
	cfg.BaseURL = base.String()
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.StateTTL <= 0 {
		cfg.StateTTL = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{cfg: cfg, db: cfg.Store.DB, providers: map[string]*provider{}}
	kinds := map[string]Kind{}
	for _, p := range cfg.Providers {
		if !nameRE.MatchString(p.Name) {
			return nil, fmt.Errorf("federation: provider name %q: want lower-case letters, digits and hyphens", p.Name)
		}
		if _, dup := s.providers[p.Name]; dup {
			return nil, fmt.Errorf("federation: provider %q configured twice", p.Name)
		}
		if p.ClientID == "" {
			return nil, fmt.Errorf("federation: provider %q: a client id is required", p.Name)
		}
		if p.Label == "" {
			p.Label = p.Name
		}
		switch p.Kind {
		case KindOIDC:
			u, err := url.Parse(p.Issuer)
			if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
				return nil, fmt.Errorf("federation: provider %q: issuer %q is not an http(s) URL", p.Name, p.Issuer)
			}
			if len(p.Scopes) == 0 {
				p.Scopes = []string{scopeOpenID, "email"}
			}
			if !slices.Contains(p.Scopes, scopeOpenID) {
				p.Scopes = append([]string{scopeOpenID}, p.Scopes...)
			}
		case KindGitHub:
			if len(p.Scopes) == 0 {
				p.Scopes = []string{"read:user", "user:email"}
			}
			if p.Issuer == "" && p.AuthURL != "" {
				// A GitHub Enterprise server numbers its users on its own:
				// its identities are its origin's, never github.com's.
				u, err := url.Parse(p.AuthURL)
				if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
					return nil, fmt.Errorf("federation: provider %q: authorization URL %q is not an http(s) URL", p.Name, p.AuthURL)
				}
				p.Issuer = u.Scheme + "://" + u.Host
			}
			p.AuthURL = cmpOr(p.AuthURL, "https://github.com/login/oauth/authorize")
			p.TokenURL = cmpOr(p.TokenURL, "https://github.com/login/oauth/access_token")
			p.APIURL = strings.TrimRight(cmpOr(p.APIURL, "https://api.github.com"), "/")
			p.Issuer = cmpOr(p.Issuer, GitHubIssuer)
		default:
			return nil, fmt.Errorf("federation: provider %q: unknown kind %q", p.Name, p.Kind)
		}
		// Identities are keyed by issuer and subject: providers of
		// different kinds (whose subjects mean different things) cannot
		// share an issuer.
		if k, ok := kinds[p.Issuer]; ok && k != p.Kind {
			return nil, fmt.Errorf("federation: provider %q: issuer %q is another kind of provider's", p.Name, p.Issuer)
		}
		kinds[p.Issuer] = p.Kind
		s.providers[p.Name] = &provider{Provider: p, svc: s}
		s.order = append(s.order, p.Name)
	}
	return s, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Providers lists the configured providers, in configuration order (the
// buttons' order).
func (s *Service) Providers() []Provider {
	out := make([]Provider, 0, len(s.order))
	for _, n := range s.order {
		p := s.providers[n].Provider
		p.ClientSecret = ""
		out = append(out, p)
	}
	return out
}

func (s *Service) ctx(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, s.cfg.HTTPClient)
}

// setup discovers an OpenID Connect provider once.
func (p *provider) setup(ctx context.Context) (*oauth2.Config, error) {
	conf := &oauth2.Config{
		ClientID:     p.ClientID,
		ClientSecret: p.ClientSecret,
		RedirectURL:  p.svc.cfg.BaseURL + CallbackPath(p.Name),
		Scopes:       p.Scopes,
	}
	if p.Kind == KindGitHub {
		conf.Endpoint = oauth2.Endpoint{AuthURL: p.AuthURL, TokenURL: p.TokenURL, AuthStyle: oauth2.AuthStyleInParams}
		return conf, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.oidc == nil {
		op, err := discover(ctx, p.svc.cfg.HTTPClient, p.Issuer)
		if err != nil {
			return nil, fmt.Errorf("%w: discovery of %s: %v", ErrProvider, p.Issuer, err)
		}
		p.oidc = op
	}
	conf.Endpoint = p.oidc.endpoint()
	return conf, nil
}

// random returns n random bytes, base64url.
func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// NewBinding returns a fresh browser binding: set it in a cookie only
// that browser sends (HttpOnly, SameSite=Lax, Secure) and pass it to
// Begin and Finish.
func NewBinding() string { return random(32) }

// LocalPath reports whether p is a path on this server (a safe return
// address): it starts with one slash, and has no scheme, host or
// backslash.
func LocalPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\\r\n\t") {
		return false
	}
	u, err := url.Parse(p)
	return err == nil && u.Scheme == "" && u.Host == ""
}

type stateRow struct {
	bun.BaseModel `bun:"table:federation_states"`

	StateHash   string    `bun:"state_hash,pk"`
	BindingHash string    `bun:"binding_hash"`
	Provider    string    `bun:"provider"`
	Nonce       string    `bun:"nonce"`
	Verifier    string    `bun:"verifier"`
	ReturnTo    string    `bun:"return_to"`
	LinkIssuer  string    `bun:"link_issuer"`
	LinkSubject string    `bun:"link_subject"`
	UserID      *int64    `bun:"user_id"`
	ExpiresAt   time.Time `bun:"expires_at"`
}

// Begin starts a sign-in with provider name for the browser holding
// binding, returning to returnTo (a local path) afterwards. userID is the
// signed-in person linking an identity to their account, or 0. It returns
// the URL to send the browser to.
func (s *Service) Begin(ctx context.Context, name, binding, returnTo string, userID int64) (string, error) {
	p, ok := s.providers[name]
	if !ok {
		return "", ErrUnknownProvider
	}
	if len(binding) < 32 {
		return "", errors.New("federation: a browser binding is required")
	}
	if !LocalPath(returnTo) {
		returnTo = "/"
	}
	conf, err := p.setup(ctx)
	if err != nil {
		return "", err
	}
	state, nonce, verifier := random(32), random(24), oauth2.GenerateVerifier()
	row := &stateRow{StateHash: hash(state), BindingHash: hash(binding), Provider: name, Nonce: nonce, Verifier: verifier,
		ReturnTo: returnTo, ExpiresAt: s.cfg.Now().UTC().Add(s.cfg.StateTTL)}
	if userID != 0 {
		row.UserID = &userID
	}
	if _, err := s.db.NewInsert().Model(row).Returning("NULL").Exec(ctx); err != nil {
		return "", fmt.Errorf("federation: record sign-in state: %w", err)
	}
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier)}
	if p.Kind == KindOIDC {
		opts = append(opts, oauth2.SetAuthURLParam("nonce", nonce))
	}
	return conf.AuthCodeURL(state, opts...), nil
}

// Result is a verified external identity.
type Result struct {
	Provider      string
	Issuer        string
	Subject       string
	Email         string
	EmailVerified bool
	// MFA: the provider says it used a second factor and the operator
	// trusts this provider's word on it (Provider.TrustMFA).
	MFA bool
	// ReturnTo is the local path the sign-in was started for.
	ReturnTo string
	// UserID is the signed-in person who started a link, or 0. Resolve
	// links the identity to this account whatever the provider's email
	// says, so the caller checks first that the browser is still signed in
	// as UserID (the person may have signed out, and another signed in,
	// while the provider's page was open) and refuses otherwise.
	UserID int64
}

// consume deletes and returns the state row of state, whatever happens
// next: a state is used once.
func (s *Service) consume(ctx context.Context, state string) (*stateRow, error) {
	if state == "" || len(state) > 200 {
		return nil, ErrBadState
	}
	var rows []stateRow
	err := s.db.NewDelete().Model(&rows).Where("state_hash = ?", hash(state)).Returning("*").Scan(ctx)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("federation: consume state: %w", err)
	}
	if len(rows) != 1 {
		return nil, ErrBadState
	}
	return &rows[0], nil
}

// Finish completes a sign-in from the provider's redirect to
// CallbackPath(name): query is the redirect's query, binding the
// browser's binding cookie. The state is consumed whatever the outcome.
func (s *Service) Finish(ctx context.Context, name, binding string, query url.Values) (*Result, error) {
	row, err := s.consume(ctx, query.Get("state"))
	if err != nil {
		return nil, err
	}
	p, ok := s.providers[name]
	switch {
	case !ok:
		return nil, ErrUnknownProvider
	case row.Provider != name, // IdP mix-up: the state was started for another provider
		subtle.ConstantTimeCompare([]byte(row.BindingHash), []byte(hash(binding))) != 1,
		!s.cfg.Now().Before(row.ExpiresAt),
		row.LinkSubject != "":
		return nil, ErrBadState
	}
	if query.Get("error") != "" {
		return nil, ErrDenied
	}
	conf, err := p.setup(ctx)
	if err != nil {
		return nil, err
	}
	if p.Kind == KindOIDC {
		// RFC 9207: the answer comes from another issuer, or lacks the
		// iss its provider says every answer carries.
		p.mu.Lock()
		issParam := p.oidc.md.ISSParam
		p.mu.Unlock()
		if iss, ok := query["iss"]; (ok && (len(iss) != 1 || iss[0] != p.Issuer)) || (!ok && issParam) {
			return nil, fmt.Errorf("%w: the authorization response does not name this provider's issuer", ErrProvider)
		}
	}
	hctx := s.ctx(ctx)
	tok, err := conf.Exchange(hctx, query.Get("code"), oauth2.VerifierOption(row.Verifier))
	if err != nil {
		return nil, fmt.Errorf("%w: code exchange: %v", ErrProvider, err)
	}
	res := &Result{Provider: name, ReturnTo: row.ReturnTo}
	if row.UserID != nil {
		res.UserID = *row.UserID
	}
	if p.Kind == KindGitHub {
		err = p.github(hctx, tok, res)
	} else {
		err = p.openID(hctx, tok, row.Nonce, res)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// openID verifies the ID token (issuer, audience, signature, expiry,
// nonce) and reads the email from it or from userinfo.
func (p *provider) openID(ctx context.Context, tok *oauth2.Token, nonce string, res *Result) error {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return fmt.Errorf("%w: no ID token", ErrProvider)
	}
	p.mu.Lock()
	op := p.oidc
	p.mu.Unlock()
	idt, err := op.verifyIDToken(ctx, raw, p.ClientID, p.svc.cfg.Now())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrProvider, err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 {
		return fmt.Errorf("%w: the ID token's nonce is not this sign-in's", ErrProvider)
	}
	// verifyIDToken checks that the audience includes us; azp is checked
	// here (OpenID Connect Core 3.1.3.7): with several audiences it must
	// be present, and when present it must name us, at_hash or not.
	if (idt.AZP == nil && len(idt.Audience) != 1) || (idt.AZP != nil && *idt.AZP != p.ClientID) {
		return fmt.Errorf("%w: the ID token was issued to another party", ErrProvider)
	}
	if idt.AccessTokenHash != "" {
		if err := idt.verifyAccessToken(tok.AccessToken); err != nil {
			return fmt.Errorf("%w: %v", ErrProvider, err)
		}
	}
	res.Issuer, res.Subject = idt.Issuer, idt.Subject
	res.Email, res.EmailVerified = idt.Email, truthy(idt.EmailVerified)
	if idt.Email == "" && slices.Contains(p.Scopes, "email") {
		info, err := op.userInfo(ctx, tok)
		if err == nil && info.Subject == idt.Subject {
			res.Email, res.EmailVerified = info.Email, truthy(info.EmailVerified)
		}
	}
	res.Email = strings.ToLower(strings.TrimSpace(res.Email))
	if p.TrustMFA {
		for _, m := range idt.AMR {
			if slices.Contains([]string{"mfa", "otp", "hwk", "swk", "sms", "fido"}, m) {
				res.MFA = true
			}
		}
	}
	return nil
}

// truthy reads email_verified, which some providers send as a string.
func truthy(v any) bool {
	switch b := v.(type) {
	case bool:
		return b
	case string:
		ok, _ := strconv.ParseBool(b)
		return ok
	}
	return false
}

// github reads the user's id and primary verified email.
func (p *provider) github(ctx context.Context, tok *oauth2.Token, res *Result) error {
	client := oauth2.NewClient(ctx, oauth2.StaticTokenSource(tok))
	get := func(path string, into any) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.APIURL+path, nil)
		req.Header.Set("Accept", "application/vnd.github+json")
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrProvider, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%w: GitHub answered %d to %s", ErrProvider, resp.StatusCode, path)
		}
		return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(into)
	}
	var user struct {
		ID int64 `json:"id"`
	}
	if err := get("/user", &user); err != nil {
		return err
	}
	if user.ID <= 0 {
		return fmt.Errorf("%w: GitHub sent no user id", ErrProvider)
	}
	var emails []struct {
		Email    string `json:"email"`
		Primary  bool   `json:"primary"`
		Verified bool   `json:"verified"`
	}
	if err := get("/user/emails", &emails); err != nil {
		return err
	}
	res.Issuer, res.Subject = p.Issuer, strconv.FormatInt(user.ID, 10)
	for _, e := range emails {
		if e.Primary {
			res.Email, res.EmailVerified = strings.ToLower(strings.TrimSpace(e.Email)), e.Verified
		}
	}
	return nil
}
