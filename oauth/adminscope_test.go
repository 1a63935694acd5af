package oauth_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// grantAdmin gives the account the admin role, as the operator would.
func (e *env) grantAdmin(id int64) {
	e.t.Helper()
	if _, err := e.st.DB.NewRaw("INSERT INTO user_roles (user_id, role_name, granted_at) VALUES (?, 'admin', ?)", id, time.Now().UTC()).
		Exec(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// scopeFlow authorizes conf for the signed-in user uid asking for scope;
// when the consent page comes it approves, ticking grant. It returns
// whether the consent page was shown, the request it showed, and the
// token pair.
func (e *env) scopeFlow(conf *oauth2.Config, uid int64, scope string, grant ...string) (shown bool, req oauth.AuthorizeRequest, tok tokenResponse) {
	e.t.Helper()
	authURL := e.authURL(conf, url.Values{"scope": {scope}})
	cookie := &http.Cookie{Name: "test_user", Value: strconv.FormatInt(uid, 10)}
	_, before := e.login.pages()
	resp := e.do(http.MethodGet, authURL, nil, cookie)
	if _, after := e.login.pages(); after != before {
		shown = true
		e.login.mu.Lock()
		req = *e.login.last
		e.login.mu.Unlock()
		resp = e.do(http.MethodPost, authURL, url.Values{"decision": {"approve"}, "grant": grant}, cookie)
	}
	if resp.StatusCode != http.StatusSeeOther {
		e.t.Fatalf("authorize %q: status %d, want a redirect", scope, resp.StatusCode)
	}
	loc, _ := url.Parse(resp.Header.Get("Location"))
	tok = e.exchange(conf, loc.Query().Get("code"), nil)
	if tok.Status != http.StatusOK {
		e.t.Fatalf("exchange: %d %s %s", tok.Status, tok.Error, tok.Description)
	}
	return shown, req, tok
}

// tokenScopes is what the resource server sees of a token.
func (e *env) tokenScopes(token string) []string {
	e.t.Helper()
	a, err := e.srv.VerifyAccessToken(context.Background(), token)
	if err != nil {
		e.t.Fatal(err)
	}
	s := slices.Clone(a.Scopes)
	slices.Sort(s)
	return s
}

// The admin scope is granted only to an admin, and only when the person
// ticks it: unticked, the grant carries the rest and the next request for
// it asks again (step-up); ticked, it is remembered. A non-admin asking
// for it (or forging the tick) gets it dropped silently, and the consent
// is remembered without it. The token response's scope says what was
// granted, refreshes keep it, and a client registered before the scope
// existed (scope "mcp") may ask for it.
func TestAdminScopeConsent(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		both := "mcp " + oauth.ScopeAdmin

		t.Run("admin", func(t *testing.T) {
			conf := e.publicClient()
			uid, _ := e.createUser(userState{})
			e.grantAdmin(uid)

			shown, req, tok := e.scopeFlow(conf, uid, both)
			if !shown || !slices.Equal(req.Scopes, []string{"mcp"}) || !slices.Equal(req.OptionalScopes, []string{"admin"}) {
				t.Fatalf("consent shown %v with scopes %v, optional %v: want mcp, and admin to tick", shown, req.Scopes, req.OptionalScopes)
			}
			if tok.Scope != "mcp" || !slices.Equal(e.tokenScopes(tok.AccessToken), []string{"mcp"}) {
				t.Fatalf("unticked: token scope %q (%v), want mcp only", tok.Scope, e.tokenScopes(tok.AccessToken))
			}

			shown, _, tok = e.scopeFlow(conf, uid, both, oauth.ScopeAdmin)
			if !shown {
				t.Fatal("asked for admin again after leaving it unticked, the person was not asked")
			}
			if got := e.tokenScopes(tok.AccessToken); !slices.Equal(got, []string{"admin", "mcp"}) || !strings.Contains(tok.Scope, "admin") {
				t.Fatalf("ticked: token scopes %v (response %q), want admin and mcp", got, tok.Scope)
			}

			shown, _, tok = e.scopeFlow(conf, uid, both)
			if shown || !slices.Equal(e.tokenScopes(tok.AccessToken), []string{"admin", "mcp"}) {
				t.Fatalf("remembered: consent shown %v, scopes %v", shown, e.tokenScopes(tok.AccessToken))
			}
			ref := e.refresh(conf, tok.RefreshToken)
			if ref.Status != http.StatusOK || !slices.Equal(e.tokenScopes(ref.AccessToken), []string{"admin", "mcp"}) {
				t.Fatalf("refresh: %d %s, scopes %q", ref.Status, ref.Error, ref.Scope)
			}

			shown, _, tok = e.scopeFlow(conf, uid, "mcp")
			if shown || tok.Scope != "mcp" {
				t.Fatalf("mcp alone: consent shown %v, scope %q", shown, tok.Scope)
			}
		})

		t.Run("user", func(t *testing.T) {
			conf := e.publicClient()
			uid, _ := e.createUser(userState{})
			shown, req, tok := e.scopeFlow(conf, uid, both, oauth.ScopeAdmin) // a forged tick
			if !shown || len(req.OptionalScopes) != 0 || slices.Contains(req.Scopes, oauth.ScopeAdmin) {
				t.Fatalf("consent shown %v with scopes %v, optional %v: want no admin anywhere", shown, req.Scopes, req.OptionalScopes)
			}
			if tok.Scope != "mcp" || !slices.Equal(e.tokenScopes(tok.AccessToken), []string{"mcp"}) {
				t.Fatalf("token scope %q, want mcp", tok.Scope)
			}
			shown, _, tok = e.scopeFlow(conf, uid, both)
			if shown || tok.Scope != "mcp" {
				t.Fatalf("asking again: consent shown %v (want remembered), scope %q", shown, tok.Scope)
			}
			// Asked for admin alone, the grant still carries mcp.
			conf2 := e.publicClient()
			if _, req, tok := e.scopeFlow(conf2, uid, oauth.ScopeAdmin); tok.Scope != "mcp" || !slices.Equal(req.Scopes, []string{"mcp"}) {
				t.Fatalf("admin alone: scope %q, consent scopes %v", tok.Scope, req.Scopes)
			}
		})

		t.Run("client registered with mcp only", func(t *testing.T) {
			redirect := "http://127.0.0.1:9/callback"
			code, out := e.register(map[string]any{"redirect_uris": []string{redirect}, "token_endpoint_auth_method": "none", "scope": "mcp"})
			if code != http.StatusCreated || out["scope"] != "mcp" {
				t.Fatalf("register: %d %v", code, out)
			}
			conf := e.publicClient()
			conf.ClientID = out["client_id"].(string)
			uid, _ := e.createUser(userState{})
			e.grantAdmin(uid)
			if _, _, tok := e.scopeFlow(conf, uid, both, oauth.ScopeAdmin); !slices.Equal(e.tokenScopes(tok.AccessToken), []string{"admin", "mcp"}) {
				t.Fatalf("scope %q, want admin mcp", tok.Scope)
			}
		})
	})
}

// plainConsent is a LoginConsent without ScopedConsent.
type plainConsent struct{ f *fakeLogin }

func (p plainConsent) Login(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest) (int64, bool) {
	return p.f.Login(w, r, req)
}

func (p plainConsent) Consent(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest, userID int64) (bool, bool) {
	return p.f.Consent(w, r, req, userID)
}

// A LoginConsent that cannot ask about optional scopes never grants them.
func TestAdminScopeNeedsScopedConsent(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, func(o *oauth.Options) { o.LoginConsent = plainConsent{o.LoginConsent.(*fakeLogin)} })
		conf := e.publicClient()
		uid, _ := e.createUser(userState{})
		e.grantAdmin(uid)
		if _, _, tok := e.scopeFlow(conf, uid, "mcp admin", oauth.ScopeAdmin); tok.Scope != "mcp" {
			t.Fatalf("scope %q, want mcp", tok.Scope)
		}
	})
}
