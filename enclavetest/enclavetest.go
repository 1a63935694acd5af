// Package enclavetest is the embedder's test kit: it starts a complete
// enclave server in process (real HTTP listener on loopback, real storage,
// background jobs and schedules running), creates users with roles,
// obtains real OAuth access tokens through the real flow (dynamic client
// registration, authorization with PKCE through the sign-in and consent
// pages, code exchange) and calls capabilities over real MCP.
//
// Storage is a fresh SQLite database in a temporary directory, or, when
// ENCLAVE_TEST_POSTGRES holds a PostgreSQL URL, a fresh schema of that
// database (dropped when the test ends) for Options.Dialect Postgres; Each
// runs a test once per available dialect.
//
// Use it from tests only: everything it starts stops when the test ends.
package enclavetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Options configure Start.
type Options struct {
	// Dialect is the database: storage.SQLite (the default) or
	// storage.Postgres (skips the test unless ENCLAVE_TEST_POSTGRES is set).
	Dialect storage.Dialect
	// Config is the server's configuration. Its Addr, BaseURL, DataDir and
	// DatabaseURL are set by Start; a nil Logger discards logs; password
	// hashing is made cheap unless Config.Accounts.Argon2 is set.
	Config enclave.Config
	// Host is the loopback address the server listens on (default
	// 127.0.0.1). Two servers a browser visits need different hosts:
	// cookies are kept per host, not per port.
	Host string
	// Setup runs after enclave.New and before the server serves: register
	// capabilities, inventory surfaces, job kinds and schedules here.
	Setup func(srv *enclave.Server) error
}

// Server is a running server.
type Server struct {
	*enclave.Server
	// URL is the base URL, e.g. http://127.0.0.1:54321.
	URL string

	http  *http.Client
	users atomic.Int64
	opts  Options        // as started, for Replica
	cfg   enclave.Config // with the address, URL and database set
}

// Dialects returns the dialects available to this run: SQLite, plus
// PostgreSQL when ENCLAVE_TEST_POSTGRES is set.
func Dialects() []storage.Dialect { return storagetest.Dialects() }

// Each runs fn as a subtest once per available dialect, each with its own
// server started from opts.
func Each(t *testing.T, opts Options, fn func(t *testing.T, s *Server)) {
	t.Helper()
	for _, d := range Dialects() {
		t.Run(string(d), func(t *testing.T) {
			o := opts
			o.Dialect = d
			fn(t, Start(t, o))
		})
	}
}

// Start starts a server and stops it when t ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	d := opts.Dialect
	if d == "" {
		d = storage.SQLite
	}
	sc := storagetest.Config(t, d)
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("enclavetest: listen: %v", err)
	}
	cfg := opts.Config
	cfg.Addr = ln.Addr().String()
	cfg.BaseURL = "http://" + cfg.Addr
	cfg.DataDir, cfg.DatabaseURL = sc.DataDir, sc.DatabaseURL
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Accounts.Argon2 == (accounts.Argon2Params{}) {
		cfg.Accounts.Argon2 = accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}
	}
	return serve(t, opts, cfg, ln, cfg.BaseURL)
}

// Replica starts another server on s's database, data directory and public
// URL (so tokens issued by s are for it too), listening on an address of
// its own (its URL), as a second replica behind a load balancer would;
// edit may change its configuration (a bus of its own, say). It is stopped
// when t ends.
func (s *Server) Replica(t testing.TB, edit ...func(*enclave.Config)) *Server {
	t.Helper()
	cfg := s.cfg
	for _, f := range edit {
		f(&cfg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("enclavetest: listen: %v", err)
	}
	return serve(t, s.opts, cfg, ln, "http://"+ln.Addr().String())
}

func serve(t testing.TB, opts Options, cfg enclave.Config, ln net.Listener, url string) *Server {
	t.Helper()
	ctx := context.Background()
	srv, err := enclave.New(ctx, cfg)
	if err != nil {
		ln.Close()
		t.Fatalf("enclavetest: start: %v", err)
	}
	if opts.Setup != nil {
		if err := opts.Setup(srv); err != nil {
			ln.Close()
			srv.Close()
			t.Fatalf("enclavetest: setup: %v", err)
		}
	}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(sctx, ln); err != nil {
			t.Errorf("enclavetest: serve: %v", err)
		}
	})
	t.Cleanup(func() {
		stop()
		wg.Wait()
		srv.Close()
	})
	return &Server{Server: srv, URL: url, http: &http.Client{}, opts: opts, cfg: cfg}
}

// User is an account created by CreateUser.
type User struct {
	s        *Server
	ID       int64  // users.id
	StableID string // the stable user id every capability sees
	Email    string
	Username string
	Password string

	mu    sync.Mutex
	token string
}

// CreateUser creates a verified account with a password and the role user,
// plus the given roles (e.g. capabilities.RoleAdmin). name becomes the
// username and the local part of the email.
func (s *Server) CreateUser(t testing.TB, name string, roles ...string) *User {
	t.Helper()
	ctx := context.Background()
	u := &User{s: s, Email: name + "@example.com", Username: name, Password: "test password " + rand.Text()}
	acc, _, err := s.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: u.Email, Username: name, Password: u.Password, Verified: true})
	if err != nil {
		t.Fatalf("enclavetest: create user %s: %v", name, err)
	}
	for _, r := range roles {
		if _, err := assignOrGrant(s.Accounts(), ctx, acc.ID, r); err != nil {
			t.Fatalf("enclavetest: assign %s to %s: %v", r, name, err)
		}
	}
	u.ID, u.StableID = acc.ID, acc.StableID
	return u
}

// Owner returns the user as an ownership-inventory owner.
func (u *User) Owner() storage.Owner { return storage.Owner{ID: u.ID, StableID: u.StableID} }

// Caller loads the user's interactive caller, fresh, as a web page or an
// MCP session would: for calling Registry().Invoke directly.
func (u *User) Caller(t testing.TB) capabilities.Caller {
	t.Helper()
	c, err := u.s.Accounts().LoadCaller(context.Background(), u.StableID)
	if err != nil {
		t.Fatalf("enclavetest: load caller: %v", err)
	}
	c.Interactive, c.AllScopes = true, true
	return c
}

var formAction = regexp.MustCompile(`<form[^>]*method="post"[^>]*action="([^"]*/oauth/authorize[^"]*)"`)

// Token returns an access token for the MCP endpoint, obtained once
// through the real OAuth flow: dynamic client registration, authorization
// with PKCE, the sign-in and consent pages, and the code exchange. It asks
// for the scopes mcp and admin and ticks the admin scope on the consent
// page, so an admin's token reaches the admin capabilities; a user's
// carries mcp alone (the server drops admin). TokenWithoutAdmin is an
// admin's token with the box left unticked.
func (u *User) Token(t testing.TB) string {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.token == "" {
		tok, err := u.s.authorize(u, true)
		if err != nil {
			t.Fatalf("enclavetest: OAuth flow for %s: %v", u.Username, err)
		}
		u.token = tok
	}
	return u.token
}

// TokenWithoutAdmin returns a new access token from the real OAuth flow
// whose consent left the admin scope unticked: with it an admin's agent
// lists and calls only what a user's would (an admin capability answers
// insufficient_scope).
func (u *User) TokenWithoutAdmin(t testing.TB) string {
	t.Helper()
	tok, err := u.s.authorize(u, false)
	if err != nil {
		t.Fatalf("enclavetest: OAuth flow for %s: %v", u.Username, err)
	}
	return tok
}

func (s *Server) authorize(u *User, admin bool) (string, error) {
	redirect := "http://127.0.0.1:9/callback"
	resp, err := s.http.Post(s.URL+"/oauth/register", "application/json",
		strings.NewReader(`{"client_name":"enclavetest","redirect_uris":["`+redirect+`"],"token_endpoint_auth_method":"none"}`))
	if err != nil {
		return "", err
	}
	var client struct {
		ClientID string `json:"client_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&client)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || err != nil {
		return "", fmt.Errorf("client registration: %d %v", resp.StatusCode, err)
	}
	verifier := rand.Text() + rand.Text()
	sum := sha256.Sum256([]byte(verifier))
	state := rand.Text()
	q := url.Values{
		"response_type": {"code"}, "client_id": {client.ClientID}, "redirect_uri": {redirect},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"state": {state}, "scope": {"mcp admin"}, "resource": {s.URL + "/mcp"},
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	next := func(step string, resp *http.Response, err error) (string, error) {
		if err != nil {
			return "", err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := formAction.FindSubmatch(b)
		if resp.StatusCode != http.StatusOK || m == nil {
			return "", fmt.Errorf("%s: status %d, no authorization form", step, resp.StatusCode)
		}
		return s.URL + html.UnescapeString(string(m[1])), nil
	}
	resp, err = browser.Get(s.URL + "/oauth/authorize?" + q.Encode())
	action, err := next("authorize", resp, err)
	if err != nil {
		return "", err
	}
	resp, err = browser.PostForm(action, url.Values{"email": {u.Email}, "password": {u.Password}})
	action, err = next("sign-in", resp, err)
	if err != nil {
		return "", err
	}
	consent := url.Values{"decision": {"approve"}}
	if admin {
		consent.Set("grant", "admin")
	}
	resp, err = browser.PostForm(action, consent)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if loc == nil || loc.Query().Get("code") == "" || loc.Query().Get("state") != state {
		return "", fmt.Errorf("consent: status %d, no code in the redirect", resp.StatusCode)
	}
	resp, err = s.http.PostForm(s.URL+"/oauth/token", url.Values{
		"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "redirect_uri": {redirect},
		"client_id": {client.ClientID}, "code_verifier": {verifier}, "resource": {s.URL + "/mcp"},
	})
	if err != nil {
		return "", err
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	err = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || tok.AccessToken == "" {
		return "", fmt.Errorf("token exchange: status %d %v", resp.StatusCode, err)
	}
	return tok.AccessToken, nil
}

// assignOrGrant gives role to userID: the admin role through the
// operator's path, any other through AssignRole.
func assignOrGrant(svc *accounts.Service, ctx context.Context, userID int64, role string) (bool, error) {
	if role == capabilities.RoleAdmin {
		return svc.Roles.GrantAdminAsOperator(ctx, userID)
	}
	return svc.Roles.AssignRole(ctx, userID, role)
}
