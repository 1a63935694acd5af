package federation_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

var seq atomic.Int64

// addUser inserts an account into st's users table.
func addUser(t *testing.T, st *storage.Store, email string, verified bool, password bool) int64 {
	t.Helper()
	sum := sha256.Sum256([]byte(fmt.Sprint(email, seq.Add(1))))
	now := time.Now().UTC()
	var at *time.Time
	if verified {
		at = &now
	}
	var hash *string
	if password {
		h := "$argon2id$fake"
		hash = &h
	}
	var id int64
	err := st.DB.NewRaw(`INSERT INTO users (stable_user_id, email, username, email_verified_at, password_hash, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`, hex.EncodeToString(sum[:]), email, fmt.Sprintf("u%d", seq.Add(1)), at, hash, now, now).
		Scan(context.Background(), &id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// idp is a real OpenID Provider: enclave's own oauth.Server, with a
// login that signs in whoever the test says and approves.
type idp struct {
	st     *storage.Store
	srv    *oauth.Server
	ts     *httptest.Server
	who    atomic.Int64
	id     string
	secret string
}

func (p *idp) Login(http.ResponseWriter, *http.Request, *oauth.AuthorizeRequest) (int64, bool) {
	return p.who.Load(), true
}
func (p *idp) Consent(http.ResponseWriter, *http.Request, *oauth.AuthorizeRequest, int64) (bool, bool) {
	return true, true
}

func newIdP(t *testing.T, rpBase string) *idp {
	t.Helper()
	p := &idp{st: storagetest.Open(t, storage.SQLite)}
	mux := http.NewServeMux()
	p.ts = httptest.NewServer(mux)
	t.Cleanup(p.ts.Close)
	srv, err := oauth.New(context.Background(), oauth.Options{Store: p.st, BaseURL: p.ts.URL, LoginConsent: p, AllowUnverifiedEmail: true})
	if err != nil {
		t.Fatal(err)
	}
	p.srv = srv
	srv.Register(mux)
	body, _ := json.Marshal(map[string]any{"redirect_uris": []string{rpBase + federation.CallbackPath("corp")},
		"token_endpoint_auth_method": "client_secret_basic", "client_name": "relying party"})
	resp, err := http.Post(p.ts.URL+"/oauth/register", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reg struct {
		ID     string `json:"client_id"`
		Secret string `json:"client_secret"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&reg)
	if reg.ID == "" || reg.Secret == "" {
		t.Fatalf("register at the IdP: %d", resp.StatusCode)
	}
	p.id, p.secret = reg.ID, reg.Secret
	return p
}

const rpBase = "http://127.0.0.1:9"

type rp struct {
	t   *testing.T
	st  *storage.Store
	svc *federation.Service
	idp *idp
}

func newRP(t *testing.T, st *storage.Store, extra ...federation.Provider) *rp {
	t.Helper()
	p := newIdP(t, rpBase)
	svc, err := federation.New(federation.Config{Store: st, BaseURL: rpBase, Providers: append([]federation.Provider{{
		Name: "corp", Label: "Corp", Kind: federation.KindOIDC, Issuer: p.ts.URL, ClientID: p.id, ClientSecret: p.secret,
	}}, extra...)})
	if err != nil {
		t.Fatal(err)
	}
	return &rp{t: t, st: st, svc: svc, idp: p}
}

// signIn runs a sign-in at the IdP as idpUser and returns the callback's
// query (not yet finished).
func (r *rp) signIn(binding string, idpUser int64, linking int64) url.Values {
	r.t.Helper()
	authURL, err := r.svc.Begin(context.Background(), "corp", binding, "/oauth/authorize?client_id=x", linking)
	if err != nil {
		r.t.Fatal(err)
	}
	if u, _ := url.Parse(authURL); u.Query().Get("nonce") == "" || u.Query().Get("code_challenge_method") != "S256" {
		r.t.Fatalf("authorization URL without nonce or PKCE: %s", authURL)
	}
	r.idp.who.Store(idpUser)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(authURL)
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || !strings.HasPrefix(loc.String(), rpBase+federation.CallbackPath("corp")) || loc.Query().Get("code") == "" {
		r.t.Fatalf("IdP answered %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	return loc.Query()
}

func TestSignInWithOpenIDProvider(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		r := newRP(t, st)
		binding := federation.NewBinding()
		alice := addUser(t, r.idp.st, "alice@corp.example", true, false)

		// A new identity with a verified email: an account may be opened.
		res, err := r.svc.Finish(ctx, "corp", binding, r.signIn(binding, alice, 0))
		if err != nil {
			t.Fatal(err)
		}
		if res.Issuer != r.idp.ts.URL || res.Subject == "" || res.Email != "alice@corp.example" || !res.EmailVerified || res.ReturnTo != "/oauth/authorize?client_id=x" || res.MFA {
			t.Fatalf("result: %+v", res)
		}
		d, err := r.svc.Resolve(ctx, res)
		if err != nil || d.Outcome != federation.Create {
			t.Fatalf("new identity: %+v %v", d, err)
		}
		uid := addUser(t, st, res.Email, true, false)
		if err := r.svc.Link(ctx, uid, res); err != nil {
			t.Fatal(err)
		}
		// Next time it signs in to that account.
		res2, err := r.svc.Finish(ctx, "corp", binding, r.signIn(binding, alice, 0))
		if err != nil {
			t.Fatal(err)
		}
		if d, err := r.svc.Resolve(ctx, res2); err != nil || d.Outcome != federation.SignIn || d.UserID != uid {
			t.Fatalf("linked identity: %+v %v", d, err)
		}
		ids, err := r.svc.Identities(ctx, uid)
		if err != nil || len(ids) != 1 || ids[0].Issuer != r.idp.ts.URL || ids[0].Subject != res.Subject || ids[0].Provider != "corp" {
			t.Fatalf("identities: %+v %v", ids, err)
		}
		// It is the account's only way to sign in: it stays.
		if err := r.svc.Unlink(ctx, uid, ids[0].ID); !errors.Is(err, federation.ErrLastSignIn) {
			t.Fatalf("unlink the last way in: %v", err)
		}
	})
}

// A verified email that is an existing account's links only after the
// person proves that account; an unverified one never links.
func TestLinkingNeverTakesOver(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		r := newRP(t, st)
		binding := federation.NewBinding()
		victim := addUser(t, st, "victim@example.com", true, true)
		other := addUser(t, st, "other@example.com", true, true)

		// The IdP says the email is not verified: refused, even though an
		// account has it.
		unverified := addUser(t, r.idp.st, "victim@example.com", false, false)
		res, err := r.svc.Finish(ctx, "corp", binding, r.signIn(binding, unverified, 0))
		if err != nil {
			t.Fatal(err)
		}
		if res.EmailVerified {
			t.Fatal("an unverified email reads as verified")
		}
		if _, err := r.svc.Resolve(ctx, res); !errors.Is(err, federation.ErrUnverifiedEmail) {
			t.Fatalf("unverified email: %v", err)
		}
		if ids, _ := r.svc.Identities(ctx, victim); len(ids) != 0 {
			t.Fatal("an unverified email linked")
		}

		// Verified: the person must prove the account first.
		verified := unverified
		if _, err := r.idp.st.DB.NewRaw("UPDATE users SET email_verified_at = ? WHERE id = ?", time.Now().UTC(), verified).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		res, err = r.svc.Finish(ctx, "corp", binding, r.signIn(binding, verified, 0))
		if err != nil {
			t.Fatal(err)
		}
		d, err := r.svc.Resolve(ctx, res)
		if err != nil || d.Outcome != federation.Prove || d.UserID != victim {
			t.Fatalf("verified email of an account: %+v %v", d, err)
		}
		token, err := r.svc.HoldLink(ctx, binding, res, d.UserID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.svc.PeekLink(ctx, federation.NewBinding(), token); !errors.Is(err, federation.ErrBadState) {
			t.Fatalf("peek from another browser: %v", err)
		}
		// Proving another account does not link this one.
		if _, err := r.svc.CompleteLink(ctx, binding, token, other); !errors.Is(err, federation.ErrBadState) {
			t.Fatalf("proof of another account: %v", err)
		}
		// The token was used by that attempt: start again.
		if _, err := r.svc.CompleteLink(ctx, binding, token, victim); !errors.Is(err, federation.ErrBadState) {
			t.Fatalf("a used link token: %v", err)
		}
		token, _ = r.svc.HoldLink(ctx, binding, res, victim)
		if p, err := r.svc.CompleteLink(ctx, binding, token, victim); err != nil || p.UserID != victim {
			t.Fatalf("complete link: %+v %v", p, err)
		}
		if d, err := r.svc.Resolve(ctx, res); err != nil || d.Outcome != federation.SignIn || d.UserID != victim {
			t.Fatalf("after the proof: %+v %v", d, err)
		}
		// Cross-user: the other account neither sees nor removes it.
		ids, _ := r.svc.Identities(ctx, victim)
		if got, _ := r.svc.Identities(ctx, other); len(got) != 0 {
			t.Fatalf("another account lists %+v", got)
		}
		if err := r.svc.Unlink(ctx, other, ids[0].ID); !errors.Is(err, federation.ErrNotFound) {
			t.Fatalf("unlink another's identity: %v", err)
		}
		// A signed-in person cannot link an identity another account holds.
		q := r.signIn(binding, verified, other)
		res, err = r.svc.Finish(ctx, "corp", binding, q)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.svc.Resolve(ctx, res); !errors.Is(err, federation.ErrLinkedElsewhere) {
			t.Fatalf("linking a held identity: %v", err)
		}
		// The victim has a password: the identity may go.
		if err := r.svc.Unlink(ctx, victim, ids[0].ID); err != nil {
			t.Fatal(err)
		}
	})
}

// The state is single-use, bound to the browser and to the provider.
func TestStateIsBoundAndSingleUse(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		gh := federation.GitHub("gh-id", "gh-secret")
		gh.AuthURL, gh.TokenURL, gh.APIURL = "https://gh.invalid/authorize", "https://gh.invalid/token", "https://gh.invalid/api"
		r := newRP(t, st, gh)
		binding := federation.NewBinding()
		u := addUser(t, r.idp.st, "bob@corp.example", true, false)

		q := r.signIn(binding, u, 0)
		// Another browser: refused, and the state is gone.
		if _, err := r.svc.Finish(ctx, "corp", federation.NewBinding(), q); !errors.Is(err, federation.ErrBadState) {
			t.Fatalf("another browser: %v", err)
		}
		if _, err := r.svc.Finish(ctx, "corp", binding, q); !errors.Is(err, federation.ErrBadState) {
			t.Fatalf("a consumed state: %v", err)
		}
		// Mix-up: a state started for corp, answered at github's callback.
		q = r.signIn(binding, u, 0)
		if _, err := r.svc.Finish(ctx, "github", binding, q); !errors.Is(err, federation.ErrBadState) {
			t.Fatalf("IdP mix-up: %v", err)
		}
		// The issuer parameter must be the provider's.
		q = r.signIn(binding, u, 0)
		q.Set("iss", "https://attacker.example")
		if _, err := r.svc.Finish(ctx, "corp", binding, q); !errors.Is(err, federation.ErrProvider) {
			t.Fatalf("wrong iss: %v", err)
		}
		// A forged code fails at the exchange.
		q = r.signIn(binding, u, 0)
		q.Set("code", "forged")
		if _, err := r.svc.Finish(ctx, "corp", binding, q); !errors.Is(err, federation.ErrProvider) {
			t.Fatalf("forged code: %v", err)
		}
		if _, err := r.svc.Finish(ctx, "corp", binding, url.Values{"state": {"never-issued"}}); !errors.Is(err, federation.ErrBadState) {
			t.Fatalf("unknown state: %v", err)
		}
		// Return addresses are local paths only.
		for _, bad := range []string{"https://evil.example/", "//evil.example", "/\\evil.example", "javascript:alert(1)"} {
			if federation.LocalPath(bad) {
				t.Errorf("%q is a local path", bad)
			}
		}
	})
}

// GitHub: the numeric id is the subject, the primary email and whether
// GitHub verified it come from the emails API.
func TestGitHubPreset(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		verified := atomic.Bool{}
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/token":
				_ = r.ParseForm()
				if r.PostForm.Get("code") != "good" || r.PostForm.Get("code_verifier") == "" || r.PostForm.Get("client_secret") != "gh-secret" {
					w.WriteHeader(http.StatusBadRequest)
					_, _ = w.Write([]byte(`{"error":"bad_verification_code"}`))
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"access_token":"gho_x","token_type":"bearer"}`))
			case "/api/user":
				if r.Header.Get("Authorization") != "Bearer gho_x" {
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				_, _ = w.Write([]byte(`{"id":4242,"login":"octo"}`))
			case "/api/user/emails":
				_ = json.NewEncoder(w).Encode([]map[string]any{
					{"email": "old@example.com", "primary": false, "verified": true},
					{"email": "Octo@Example.com", "primary": true, "verified": verified.Load()},
				})
			default:
				http.NotFound(w, r)
			}
		}))
		defer api.Close()
		gh := federation.GitHub("gh-id", "gh-secret")
		gh.AuthURL, gh.TokenURL, gh.APIURL = api.URL+"/authorize", api.URL+"/token", api.URL+"/api"
		gh.Issuer = federation.GitHubIssuer // the stand-in plays github.com itself
		svc, err := federation.New(federation.Config{Store: st, BaseURL: rpBase, Providers: []federation.Provider{gh}})
		if err != nil {
			t.Fatal(err)
		}
		binding := federation.NewBinding()
		finish := func(code string) (*federation.Result, error) {
			authURL, err := svc.Begin(ctx, "github", binding, "/", 0)
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(authURL)
			return svc.Finish(ctx, "github", binding, url.Values{"state": {u.Query().Get("state")}, "code": {code}})
		}
		if _, err := finish("bad"); !errors.Is(err, federation.ErrProvider) {
			t.Fatalf("bad code: %v", err)
		}
		res, err := finish("good")
		if err != nil {
			t.Fatal(err)
		}
		if res.Issuer != federation.GitHubIssuer || res.Subject != "4242" || res.Email != "octo@example.com" || res.EmailVerified {
			t.Fatalf("unverified primary: %+v", res)
		}
		if _, err := svc.Resolve(ctx, res); !errors.Is(err, federation.ErrUnverifiedEmail) {
			t.Fatalf("unverified GitHub email: %v", err)
		}
		verified.Store(true)
		if res, err = finish("good"); err != nil || !res.EmailVerified {
			t.Fatalf("verified primary: %+v %v", res, err)
		}
		if d, err := svc.Resolve(ctx, res); err != nil || d.Outcome != federation.Create {
			t.Fatalf("new GitHub identity: %+v %v", d, err)
		}
	})
}

// A sign-in left at the provider longer than StateTTL cannot finish.
func TestStateExpires(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		var now atomic.Int64
		now.Store(time.Now().UnixNano())
		gh := federation.GitHub("gh-id", "gh-secret")
		gh.AuthURL, gh.TokenURL, gh.APIURL = "https://gh.invalid/authorize", "https://gh.invalid/token", "https://gh.invalid/api"
		svc, err := federation.New(federation.Config{Store: st, BaseURL: rpBase, Providers: []federation.Provider{gh},
			StateTTL: 10 * time.Minute, Now: func() time.Time { return time.Unix(0, now.Load()) }})
		if err != nil {
			t.Fatal(err)
		}
		binding := federation.NewBinding()
		authURL, err := svc.Begin(ctx, "github", binding, "https://evil.example/", 0)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(authURL)
		if u.Query().Get("redirect_uri") != rpBase+federation.CallbackPath("github") {
			t.Fatalf("redirect_uri %q", u.Query().Get("redirect_uri"))
		}
		now.Add(int64(11 * time.Minute))
		if _, err := svc.Finish(ctx, "github", binding, url.Values{"state": {u.Query().Get("state")}, "code": {"x"}}); !errors.Is(err, federation.ErrBadState) {
			t.Fatalf("expired state: %v", err)
		}
		if _, err := svc.Begin(ctx, "nope", binding, "/", 0); !errors.Is(err, federation.ErrUnknownProvider) {
			t.Fatalf("unknown provider: %v", err)
		}
		for _, bad := range []federation.Provider{
			{Name: "Bad Name", Kind: federation.KindOIDC, Issuer: "https://x.example", ClientID: "a"},
			{Name: "x", Kind: federation.KindOIDC, Issuer: "not a url", ClientID: "a"},
			{Name: "x", Kind: "saml", ClientID: "a"},
			{Name: "x", Kind: federation.KindGitHub},
		} {
			if _, err := federation.New(federation.Config{Store: st, BaseURL: rpBase, Providers: []federation.Provider{bad}}); err == nil {
				t.Errorf("provider %+v accepted", bad)
			}
		}
	})
}

func TestParseProviderFlag(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := federation.ParseProviderFlag("corp=issuer=https://idp.example.com,client-id=abc,client-secret-file=" + secret + ",label=Corp SSO,trust-mfa=true")
	if err != nil || p.Name != "corp" || p.Kind != federation.KindOIDC || p.Issuer != "https://idp.example.com" || p.ClientID != "abc" ||
		p.ClientSecret != "s3cret" || p.Label != "Corp SSO" || !p.TrustMFA {
		t.Fatalf("corp: %+v %v", p, err)
	}
	if p, err := federation.ParseProviderFlag("github=client-id=gh"); err != nil || p.Kind != federation.KindGitHub || p.Label != "GitHub" || p.TrustMFA {
		t.Fatalf("github preset: %+v %v", p, err)
	}
	if p, err := federation.ParseProviderFlag("microsoft=client-id=m,tenant=contoso.example"); err != nil || p.Issuer != "https://login.microsoftonline.com/contoso.example/v2.0" {
		t.Fatalf("microsoft preset: %+v %v", p, err)
	}
	for _, bad := range []string{"corp", "corp=client-id=x", "microsoft=client-id=x", "corp=issuer=https://x,client-id=x,colour=red", "corp=issuer=https://x,trust-mfa=maybe"} {
		if _, err := federation.ParseProviderFlag(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	file := filepath.Join(t.TempDir(), "providers.json")
	_ = os.WriteFile(file, []byte(`[{"name":"google","clientId":"g","clientSecretFile":"`+secret+`"},{"name":"corp","issuer":"https://idp.example.com","clientId":"c","trustMfa":true}]`), 0o600)
	ps, err := federation.LoadProviders(file)
	if err != nil || len(ps) != 2 || ps[0].Issuer != "https://accounts.google.com" || ps[0].ClientSecret != "s3cret" || !ps[1].TrustMFA {
		t.Fatalf("file: %+v %v", ps, err)
	}
	_ = os.WriteFile(file, []byte(`[{"name":"corp","issuer":"https://idp.example.com","clientId":"c","secret":"inline"}]`), 0o600)
	if _, err := federation.LoadProviders(file); err == nil {
		t.Error("an unknown field was accepted")
	}
}
