package oauth_test

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// pagedLogin is a LoginConsent with an error page: it records what it was
// asked to show.
type pagedLogin struct {
	*fakeLogin
	mu    sync.Mutex
	shown []oauth.AuthorizeError
}

func (p *pagedLogin) AuthorizeError(w http.ResponseWriter, r *http.Request, e *oauth.AuthorizeError) {
	p.mu.Lock()
	p.shown = append(p.shown, *e)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(e.Status)
	_, _ = w.Write([]byte("<h1>" + e.Title + "</h1><p>" + e.Message + "</p>"))
}

func (p *pagedLogin) last() oauth.AuthorizeError {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.shown) == 0 {
		return oauth.AuthorizeError{}
	}
	return p.shown[len(p.shown)-1]
}

// Every error of the authorization endpoint that cannot go back to the
// client is the LoginConsent's error page, with the case, a status of 400
// for a bad request (503 when the store is down), and no Basic challenge:
// a client unknown, removed after going unused, or blocked; a redirect URI
// it did not register; a request without client or with an unreadable
// body. The token endpoint keeps its RFC 6749 JSON and Basic challenge.
func TestAuthorizeErrorPages(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		var pages *pagedLogin
		e := newEnv(t, st, func(o *oauth.Options) {
			pages = &pagedLogin{fakeLogin: o.LoginConsent.(*fakeLogin)}
			o.LoginConsent = pages
			o.ClientIdleTTL = 24 * time.Hour
		})
		check := func(t *testing.T, resp *http.Response, status int, reason oauth.AuthorizeErrorReason) {
			t.Helper()
			body := readAll(resp)
			if resp.StatusCode != status || resp.Header.Get("Location") != "" {
				t.Fatalf("status %d location %q, want %d and a page", resp.StatusCode, resp.Header.Get("Location"), status)
			}
			if h := resp.Header.Get("WWW-Authenticate"); h != "" {
				t.Errorf("WWW-Authenticate %q", h)
			}
			got := pages.last()
			if got.Reason != reason || got.Status != status || got.Title == "" || !strings.Contains(body, got.Message) {
				t.Fatalf("page %+v (body %q), want reason %s", got, body, reason)
			}
			if want := pageSentences[reason]; !strings.Contains(got.Message, want) {
				t.Errorf("message %q, want it to say %q", got.Message, want)
			}
			if resp.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control %q", resp.Header.Get("Cache-Control"))
			}
		}

		t.Run("unknown client", func(t *testing.T) {
			conf := e.publicClient()
			conf.ClientID = "gone-" + conf.ClientID
			check(t, e.do(http.MethodGet, e.authURL(conf, nil), nil), http.StatusBadRequest, oauth.ErrorUnknownClient)
		})
		t.Run("redirect mismatch", func(t *testing.T) {
			conf := e.publicClient()
			conf.RedirectURL = "https://elsewhere.example/cb"
			check(t, e.do(http.MethodGet, e.authURL(conf, nil), nil), http.StatusBadRequest, oauth.ErrorRedirectURI)
		})
		t.Run("no client", func(t *testing.T) {
			check(t, e.do(http.MethodGet, e.ts.URL+"/oauth/authorize?response_type=code", nil), http.StatusBadRequest, oauth.ErrorBadRequest)
		})
		t.Run("unreadable body", func(t *testing.T) {
			form := url.Values{"client_id": {strings.Repeat("x", 70<<10)}}
			check(t, e.do(http.MethodPost, e.ts.URL+"/oauth/authorize", form), http.StatusBadRequest, oauth.ErrorBadRequest)
		})
		t.Run("blocked client", func(t *testing.T) {
			conf := e.publicClient()
			if _, err := e.srv.SetClientBlocked(t.Context(), conf.ClientID, true); err != nil {
				t.Fatal(err)
			}
			check(t, e.do(http.MethodGet, e.authURL(conf, nil), nil), http.StatusBadRequest, oauth.ErrorBlockedClient)
		})
		t.Run("client removed after going unused", func(t *testing.T) {
			conf := e.publicClient()
			e.clock.Advance(25 * time.Hour)
			if _, _, err := e.srv.Cleanup(t.Context()); err != nil {
				t.Fatal(err)
			}
			check(t, e.do(http.MethodGet, e.authURL(conf, nil), nil), http.StatusBadRequest, oauth.ErrorUnknownClient)
			// The token endpoint keeps the RFC answer for the same client.
			resp := e.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {conf.ClientID}})
			if resp.Status != http.StatusUnauthorized || resp.Error != "invalid_client" {
				t.Fatalf("token endpoint: %d %s, want 401 invalid_client", resp.Status, resp.Error)
			}
		})
		t.Run("store unavailable", func(t *testing.T) {
			conf := e.publicClient()
			if err := st.DB.Close(); err != nil {
				t.Fatal(err)
			}
			if st.Reader != st.DB {
				if err := st.Reader.Close(); err != nil {
					t.Fatal(err)
				}
			}
			resp := e.do(http.MethodGet, e.authURL(conf, nil), nil)
			if resp.Header.Get("Retry-After") == "" {
				t.Error("no Retry-After")
			}
			check(t, resp, http.StatusServiceUnavailable, oauth.ErrorUnavailable)
		})
	})
}
