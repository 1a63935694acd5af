package oauth_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A bad authorization request never reaches the login page. When the client
// and its exact redirect URI are known, the error goes back to the client
// with state and iss; otherwise the person gets a page (here the plain-text
// fallback of a LoginConsent without ErrorPage) with status 400, never a
// Basic challenge or a JSON body.
func TestAuthorizeRefusedBeforeLogin(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf := e.publicClient()
		challenge := func(v string) string {
			sum := sha256.Sum256([]byte(v))
			return base64.RawURLEncoding.EncodeToString(sum[:])
		}
		valid := url.Values{
			"response_type":         {"code"},
			"client_id":             {conf.ClientID},
			"redirect_uri":          {conf.RedirectURL},
			"state":                 {testState},
			"code_challenge":        {challenge("verifier-verifier-verifier-verifier-verifier")},
			"code_challenge_method": {"S256"},
			"resource":              {e.srv.Resource()},
		}
		tests := []struct {
			name      string
			change    url.Values
			drop      []string
			redirect  bool // error delivered to the client
			wantError string
			wantCode  int                        // for errors shown to the person
			reason    oauth.AuthorizeErrorReason // for errors shown to the person
		}{
			{name: "plain PKCE", change: url.Values{"code_challenge_method": {"plain"}}, redirect: true, wantError: "invalid_request"},
			{name: "no PKCE method", drop: []string{"code_challenge_method"}, redirect: true, wantError: "invalid_request"},
			{name: "no PKCE", drop: []string{"code_challenge", "code_challenge_method"}, redirect: true, wantError: "invalid_request"},
			{name: "no state", drop: []string{"state"}, redirect: true, wantError: "invalid_state"},
			{name: "short state", change: url.Values{"state": {"abc"}}, redirect: true, wantError: "invalid_state"},
			{name: "foreign resource", change: url.Values{"resource": {"https://elsewhere.example/mcp"}}, redirect: true, wantError: "invalid_target"},
			{name: "unknown scope", change: url.Values{"scope": {"mcp nonesuch"}}, redirect: true, wantError: "invalid_scope"},
			{name: "form post response mode", change: url.Values{"response_mode": {"form_post"}}, redirect: true, wantError: "unsupported_response_mode"},
			{name: "token response type", change: url.Values{"response_type": {"token"}}, redirect: true, wantError: "unsupported_response_type"},
			{name: "unregistered redirect", change: url.Values{"redirect_uri": {"https://attacker.example/cb"}}, wantCode: 400, reason: oauth.ErrorRedirectURI},
			{name: "loopback on another path", change: url.Values{"redirect_uri": {"http://127.0.0.1:9/other"}}, wantCode: 400, reason: oauth.ErrorRedirectURI},
			{name: "loopback on another host", change: url.Values{"redirect_uri": {"http://localhost:9/callback"}}, wantCode: 400, reason: oauth.ErrorRedirectURI},
			{name: "unknown client", change: url.Values{"client_id": {"nobody"}}, wantCode: 400, reason: oauth.ErrorUnknownClient},
			{name: "no client", drop: []string{"client_id"}, wantCode: 400, reason: oauth.ErrorBadRequest},
			{name: "bad response mode before the redirect is trusted", change: url.Values{"response_mode": {"bogus"}}, wantCode: 400, reason: oauth.ErrorBadRequest},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				q := url.Values{}
				for k, v := range valid {
					q[k] = v
				}
				for k, v := range tt.change {
					q[k] = v
				}
				for _, k := range tt.drop {
					q.Del(k)
				}
				logins, _ := e.login.pages()
				resp := e.do(http.MethodGet, e.ts.URL+"/oauth/authorize?"+q.Encode(), nil)
				if l, _ := e.login.pages(); l != logins {
					t.Fatal("the login page was shown")
				}
				if tt.redirect {
					if resp.StatusCode != http.StatusSeeOther {
						b, _ := io.ReadAll(resp.Body)
						t.Fatalf("status %d %s, want a redirect", resp.StatusCode, b)
					}
					loc, _ := url.Parse(resp.Header.Get("Location"))
					got := loc.Query()
					if !strings.HasPrefix(loc.String(), conf.RedirectURL+"?") || got.Get("error") != tt.wantError || got.Get("iss") != e.ts.URL {
						t.Fatalf("redirect %s: want error %s with iss", loc, tt.wantError)
					}
					if q.Get("state") != "" && got.Get("state") != q.Get("state") {
						t.Errorf("state %q not echoed", q.Get("state"))
					}
					return
				}
				if resp.StatusCode != tt.wantCode || resp.Header.Get("Location") != "" {
					t.Fatalf("status %d location %q, want %d without redirect", resp.StatusCode, resp.Header.Get("Location"), tt.wantCode)
				}
				body := readAll(resp)
				if h := resp.Header.Get("WWW-Authenticate"); h != "" {
					t.Errorf("WWW-Authenticate %q: a browser would ask for a password", h)
				}
				if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") || strings.Contains(body, `"error"`) {
					t.Errorf("Content-Type %q, body %q: want a sentence, not JSON", ct, body)
				}
				if want := pageSentences[tt.reason]; want == "" || !strings.Contains(body, want) {
					t.Errorf("body %q, want it to say %q", body, want)
				}
			})
		}
	})
}

// pageSentences are words of the sentence each kind of error that cannot be
// redirected shows the person.
var pageSentences = map[oauth.AuthorizeErrorReason]string{
	oauth.ErrorUnknownClient: "Remove this server from your app and add it again",
	oauth.ErrorRedirectURI:   "an address it did not register",
	oauth.ErrorBadRequest:    "Start connecting again from your app",
	oauth.ErrorBlockedClient: "blocked this app",
	oauth.ErrorUnavailable:   "Wait a moment",
}

func readAll(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestAuthorizeDenied(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf := e.publicClient()
		_, email := e.createUser(userState{})
		authURL := e.authURL(conf, nil)
		resp := e.do(http.MethodPost, authURL, url.Values{"email": {email}, "decision": {"deny"}})
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || loc.Query().Get("error") != "access_denied" || loc.Query().Get("iss") != e.ts.URL || loc.Query().Get("state") != testState {
			t.Fatalf("deny: %d %s", resp.StatusCode, loc)
		}
	})
}

// Accounts that may not use OAuth get no code, no tokens, and their
// bearers stop working.
func TestAccountStates(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		for _, tt := range []struct {
			name   string
			state  userState
			column string
		}{
			{"suspended", userState{suspended: true}, "suspended_at"},
			{"deleting", userState{deleting: true}, "deleting_at"},
			{"unverified email", userState{unverified: true}, ""},
		} {
			t.Run(tt.name+" at authorize", func(t *testing.T) {
				conf := e.publicClient()
				_, email := e.createUser(tt.state)
				u := e.authorize(conf, email, nil)
				if u.Query().Get("error") != "access_denied" || u.Query().Get("code") != "" || u.Query().Get("iss") != e.ts.URL {
					t.Fatalf("want access_denied, got %s", u)
				}
			})
			if tt.column == "" {
				continue
			}
			t.Run(tt.name+" after authorize", func(t *testing.T) {
				conf := e.publicClient()
				uid, email := e.createUser(userState{})
				code := e.authorize(conf, email, nil).Query().Get("code")
				e.setUser(uid, tt.column, time.Now().UTC())
				if got := e.exchange(conf, code, nil); got.Error != "invalid_grant" {
					t.Fatalf("exchange: want invalid_grant, got %+v", got)
				}
			})
			t.Run(tt.name+" with tokens", func(t *testing.T) {
				conf, uid, tok := e.signIn()
				e.setUser(uid, tt.column, time.Now().UTC())
				if got := e.mcpStatus(tok.AccessToken); got != http.StatusUnauthorized {
					t.Errorf("/mcp: %d", got)
				}
				if got := e.refresh(conf, tok.RefreshToken); got.Error != "invalid_grant" {
					t.Errorf("refresh: want invalid_grant, got %+v", got)
				}
				e.setUser(uid, tt.column, nil)
				if got := e.mcpStatus(tok.AccessToken); got != http.StatusOK {
					t.Errorf("/mcp once cleared: %d", got)
				}
			})
		}
		t.Run("unverified allowed by option", func(t *testing.T) {
			e := newEnv(t, st, func(o *oauth.Options) { o.AllowUnverifiedEmail = true })
			conf := e.publicClient()
			_, email := e.createUser(userState{unverified: true})
			if code := e.authorize(conf, email, nil).Query().Get("code"); code == "" {
				t.Fatal("no code")
			}
		})
	})
}

func TestTokenEndpointErrors(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		tests := []struct {
			name       string
			override   url.Values
			wantStatus int
			wantError  string
		}{
			{"wrong verifier", url.Values{"code_verifier": {"wrong-verifier-wrong-verifier-wrong-verifier-wrong"}}, 400, "invalid_grant"},
			{"no verifier", url.Values{"code_verifier": {""}}, 400, "invalid_grant"},
			{"wrong redirect", url.Values{"redirect_uri": {"http://127.0.0.1:9/other"}}, 400, "invalid_grant"},
			{"foreign resource", url.Values{"resource": {"https://elsewhere.example/mcp"}}, 400, "invalid_target"},
			{"unknown client", url.Values{"client_id": {"nobody"}}, 401, "invalid_client"},
			{"bogus code", url.Values{"code": {"ory_ac_bogus.bogus"}}, 400, "invalid_grant"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				conf := e.publicClient()
				_, email := e.createUser(userState{})
				code := e.authorize(conf, email, nil).Query().Get("code")
				got := e.exchange(conf, code, tt.override)
				if got.Status != tt.wantStatus || got.Error != tt.wantError || got.CacheControl != "no-store" {
					t.Fatalf("got %d %s (%s) cache %q, want %d %s", got.Status, got.Error, got.Description, got.CacheControl, tt.wantStatus, tt.wantError)
				}
			})
		}
		t.Run("trailing slash resource", func(t *testing.T) {
			conf := e.publicClient()
			_, email := e.createUser(userState{})
			u := e.authorize(conf, email, url.Values{"resource": {e.srv.Resource() + "/"}})
			got := e.exchange(conf, u.Query().Get("code"), url.Values{"resource": {e.srv.Resource() + "/"}})
			if got.Status != 200 {
				t.Fatalf("got %+v", got)
			}
			a, err := e.srv.VerifyAccessToken(context.Background(), got.AccessToken)
			if err != nil || mustJSON(a.Audience) != mustJSON([]string{e.srv.Resource()}) {
				t.Fatalf("audience: %+v %v", a, err)
			}
		})
		t.Run("no resource", func(t *testing.T) {
			conf := e.publicClient()
			_, email := e.createUser(userState{})
			authURL := strings.Replace(e.authURL(conf, nil), "&resource="+url.QueryEscape(e.srv.Resource()), "", 1)
			e.do(http.MethodGet, authURL, nil)
			resp := e.do(http.MethodPost, authURL, url.Values{"email": {email}, "decision": {"approve"}})
			loc, _ := url.Parse(resp.Header.Get("Location"))
			got := e.exchange(conf, loc.Query().Get("code"), url.Values{"resource": nil})
			a, err := e.srv.VerifyAccessToken(context.Background(), got.AccessToken)
			if err != nil || mustJSON(a.Audience) != mustJSON([]string{e.srv.Resource()}) {
				t.Fatalf("audience: %+v %v", a, err)
			}
		})
	})
}

// A replayed code is refused and revokes what the first exchange issued.
func TestCodeReplay(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf := e.publicClient()
		_, email := e.createUser(userState{})
		code := e.authorize(conf, email, nil).Query().Get("code")
		first := e.exchange(conf, code, nil)
		if first.Status != 200 || e.mcpStatus(first.AccessToken) != 200 {
			t.Fatalf("first exchange: %+v", first)
		}
		if again := e.exchange(conf, code, nil); again.Error != "invalid_grant" {
			t.Fatalf("replay: want invalid_grant, got %+v", again)
		}
		if got := e.mcpStatus(first.AccessToken); got != http.StatusUnauthorized {
			t.Errorf("access token after replay: %d", got)
		}
		if got := e.refresh(conf, first.RefreshToken); got.Error != "invalid_grant" {
			t.Errorf("refresh token after replay: %+v", got)
		}
	})
}

// Concurrent exchanges of one code: at most one gets tokens (the code is
// invalidated by a conditional update inside the issuing transaction); the
// others get invalid_grant.
func TestConcurrentCodeExchange(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf := e.publicClient()
		_, email := e.createUser(userState{})
		code := e.authorize(conf, email, nil).Query().Get("code")
		const n = 4
		results := make(chan tokenResponse, n)
		for range n {
			go func() { results <- e.exchange(conf, code, nil) }()
		}
		var issued []tokenResponse
		for range n {
			if r := <-results; r.Status == 200 {
				issued = append(issued, r)
			} else if r.Error != "invalid_grant" {
				t.Errorf("loser: %+v", r)
			}
		}
		if len(issued) > 1 {
			t.Fatalf("%d exchanges of one code got tokens", len(issued))
		}
	})
}
