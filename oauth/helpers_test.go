package oauth_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
)

// clock is a settable test clock.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// fakeLogin stands in for the web shell: a POST with email signs in (no
// password check: the password is the web layer's business), a POST with
// decision answers consent, anything else "renders" a page with 200.
type fakeLogin struct {
	st       *storage.Store
	mu       sync.Mutex
	logins   int // login pages rendered
	consents int // consent pages rendered
	last     *oauth.AuthorizeRequest
}

func (f *fakeLogin) Login(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest) (int64, bool) {
	if r.Method == http.MethodPost && r.PostForm.Get("email") != "" {
		var id int64
		err := f.st.Reader.NewSelect().Table("users").Column("id").Where("email = ?", r.PostForm.Get("email")).Scan(r.Context(), &id)
		if err == nil {
			return id, true
		}
	}
	if c, err := r.Cookie("test_user"); err == nil {
		id, _ := strconv.ParseInt(c.Value, 10, 64)
		return id, true
	}
	f.mu.Lock()
	f.logins++
	f.last = req
	f.mu.Unlock()
	fmt.Fprintf(w, `<form method="post" action="%s"><input name="email"><input name="password" type="password"></form>`, req.FormAction)
	return 0, false
}

func (f *fakeLogin) Consent(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest, userID int64) (bool, bool) {
	if r.Method == http.MethodPost {
		switch r.PostForm.Get("decision") {
		case "approve":
			return true, true
		case "deny":
			return false, true
		}
	}
	f.mu.Lock()
	f.consents++
	f.last = req
	f.mu.Unlock()
	fmt.Fprintf(w, `<form method="post" action="%s"><button name="decision" value="approve"></button></form>`, req.FormAction)
	return false, false
}

// ConsentScopes implements oauth.ScopedConsent: the values of the form's
// grant field are the scopes ticked.
func (f *fakeLogin) ConsentScopes(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest, userID int64) ([]string, bool, bool) {
	approved, ok := f.Consent(w, r, req, userID)
	return r.PostForm["grant"], approved, ok
}

func (f *fakeLogin) pages() (logins, consents int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logins, f.consents
}

// env is a running authorization server with a token-checked /mcp.
type env struct {
	t     testing.TB
	st    *storage.Store
	srv   *oauth.Server
	ts    *httptest.Server
	login *fakeLogin
	clock *clock
	http  *http.Client // does not follow redirects
}

func newEnv(t testing.TB, st *storage.Store, opts ...func(*oauth.Options)) *env {
	t.Helper()
	return startEnv(t, st, fakeMCP, opts...)
}

// fakeMCP stands in for the MCP endpoint: 200 with the Access for a good
// bearer, 401 with the RFC 9728 challenge otherwise.
func fakeMCP(srv *oauth.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		a, err := srv.VerifyAccessToken(r.Context(), token)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", resource_metadata="`+srv.ResourceMetadataURL()+`"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(a)
	})
}

// startEnv starts the authorization server with mcp(srv) serving /mcp.
func startEnv(t testing.TB, st *storage.Store, mcp func(*oauth.Server) http.Handler, opts ...func(*oauth.Options)) *env {
	t.Helper()
	mux := http.NewServeMux()
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	e := &env{t: t, st: st, ts: ts, login: &fakeLogin{st: st}, clock: &clock{}}
	o := oauth.Options{
		Store:             st,
		BaseURL:           ts.URL,
		LoginConsent:      e.login,
		PrivateURISchemes: []string{"cursor"},
		Now:               e.clock.Now,
	}
	for _, f := range opts {
		f(&o)
	}
	srv, err := oauth.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	srv.Register(mux)
	mux.Handle("/mcp", mcp(srv))
	e.http = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return e
}

var userSeq atomic.Int64

type userState struct {
	unverified, suspended, deleting bool
}

// createUser inserts an account straight into the users table.
func (e *env) createUser(s userState) (id int64, email string) {
	e.t.Helper()
	n := userSeq.Add(1)
	email = fmt.Sprintf("user%d@example.test", n)
	sum := sha256.Sum256([]byte(email))
	now := time.Now().UTC()
	var verified, suspended, deleting *time.Time
	if !s.unverified {
		verified = &now
	}
	if s.suspended {
		suspended = &now
	}
	if s.deleting {
		deleting = &now
	}
	err := e.st.DB.NewRaw(`INSERT INTO users (stable_user_id, email, username, email_verified_at, suspended_at, deleting_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		hex.EncodeToString(sum[:]), email, fmt.Sprintf("user%d", n), verified, suspended, deleting, now, now).Scan(context.Background(), &id)
	if err != nil {
		e.t.Fatal(err)
	}
	return id, email
}

func (e *env) setUser(id int64, column string, v any) {
	e.t.Helper()
	if _, err := e.st.DB.NewRaw("UPDATE users SET "+column+" = ? WHERE id = ?", v, id).Exec(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// register registers a client through the HTTP endpoint.
func (e *env) register(md map[string]any) (int, map[string]any) {
	e.t.Helper()
	body, _ := json.Marshal(md)
	resp, err := e.http.Post(e.ts.URL+"/oauth/register", "application/json", strings.NewReader(string(body)))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, out
}

// publicClient registers a public client redirecting to a loopback URI.
func (e *env) publicClient() *oauth2.Config {
	e.t.Helper()
	redirect := "http://127.0.0.1:9/callback"
	code, out := e.register(map[string]any{
		"redirect_uris":              []string{redirect},
		"token_endpoint_auth_method": "none",
		"client_name":                "Test agent " + strconv.FormatInt(userSeq.Add(1), 10),
	})
	if code != http.StatusCreated {
		e.t.Fatalf("register: %d %v", code, out)
	}
	return &oauth2.Config{
		ClientID:    out["client_id"].(string),
		RedirectURL: redirect,
		Scopes:      []string{"mcp"},
		Endpoint: oauth2.Endpoint{
			AuthURL:   e.ts.URL + "/oauth/authorize",
			TokenURL:  e.ts.URL + "/oauth/token",
			AuthStyle: oauth2.AuthStyleInParams,
		},
	}
}

// do sends a request without following redirects.
func (e *env) do(method, target string, form url.Values, cookies ...*http.Cookie) *http.Response {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// authorize runs the authorization endpoint as the user with email: the
// login page, the login form, then the consent form. It returns the final
// redirect.
func (e *env) authorize(conf *oauth2.Config, email string, extra url.Values) *url.URL {
	e.t.Helper()
	authURL := e.authURL(conf, extra)
	if resp := e.do(http.MethodGet, authURL, nil); resp.StatusCode != http.StatusOK {
		e.t.Fatalf("authorize: want the login page, got %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp := e.do(http.MethodPost, authURL, url.Values{"email": {email}, "password": {"irrelevant"}})
	if resp.StatusCode == http.StatusOK { // consent page
		resp = e.do(http.MethodPost, authURL, url.Values{"email": {email}, "password": {"irrelevant"}, "decision": {"approve"}})
	}
	if resp.StatusCode != http.StatusSeeOther {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("authorize: want a redirect, got %d %s", resp.StatusCode, b)
	}
	u, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

const testState = "state-0123456789"

// verifiers remembers the PKCE verifier of each authorization URL's client.
var verifiers sync.Map

func (e *env) authURL(conf *oauth2.Config, extra url.Values) string {
	verifier := oauth2.GenerateVerifier()
	verifiers.Store(conf.ClientID, verifier)
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", e.srv.Resource())}
	for k := range extra {
		opts = append(opts, oauth2.SetAuthURLParam(k, extra.Get(k)))
	}
	return conf.AuthCodeURL(testState, opts...)
}

func verifierOf(conf *oauth2.Config) string {
	v, _ := verifiers.Load(conf.ClientID)
	s, _ := v.(string)
	return s
}

// tokenResponse is the token endpoint's answer, success or error.
type tokenResponse struct {
	Status       int
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	ExpiresIn    int    `json:"expires_in"`
	Scope        string `json:"scope"`
	Error        string `json:"error"`
	Description  string `json:"error_description"`
	CacheControl string
}

func (e *env) token(form url.Values) tokenResponse {
	e.t.Helper()
	resp := e.do(http.MethodPost, e.ts.URL+"/oauth/token", form)
	var out tokenResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		e.t.Fatal(err)
	}
	out.Status = resp.StatusCode
	out.CacheControl = resp.Header.Get("Cache-Control")
	return out
}

// exchange redeems a code at the token endpoint.
func (e *env) exchange(conf *oauth2.Config, code string, override url.Values) tokenResponse {
	e.t.Helper()
	form := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"client_id":     {conf.ClientID},
		"redirect_uri":  {conf.RedirectURL},
		"code_verifier": {verifierOf(conf)},
		"resource":      {e.srv.Resource()},
	}
	for k, v := range override {
		form[k] = v
	}
	return e.token(form)
}

func (e *env) refresh(conf *oauth2.Config, refreshToken string) tokenResponse {
	e.t.Helper()
	return e.token(url.Values{
		"grant_type":    {"refresh_token"},
		"refresh_token": {refreshToken},
		"client_id":     {conf.ClientID},
		"resource":      {e.srv.Resource()},
	})
}

// signIn runs a whole authorization for a new client and user and returns
// the client, the user's id and the first token pair.
func (e *env) signIn() (*oauth2.Config, int64, tokenResponse) {
	e.t.Helper()
	conf := e.publicClient()
	uid, email := e.createUser(userState{})
	u := e.authorize(conf, email, nil)
	tok := e.exchange(conf, u.Query().Get("code"), nil)
	if tok.Status != http.StatusOK {
		e.t.Fatalf("exchange: %d %s %s", tok.Status, tok.Error, tok.Description)
	}
	return conf, uid, tok
}

// mcpStatus calls /mcp with token and returns the status.
func (e *env) mcpStatus(token string) int {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.ts.URL+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func isErr(err, target error) bool { return errors.Is(err, target) }
