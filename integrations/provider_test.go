package integrations_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// fakeProvider is an OAuth authorization server: it authorizes at once
// (as if the person clicked "allow"), checks PKCE and client
// authentication at the token endpoint, rotates refresh tokens and
// records revocations.
type fakeProvider struct {
	t   testing.TB
	srv *httptest.Server

	mu         sync.Mutex
	codes      map[string]string // code -> S256 challenge
	refresh    map[string]bool   // live refresh tokens
	issued     []string          // every access token issued
	revoked    []string
	ttl        time.Duration
	noRefresh  bool
	refuseCode bool
	tokenHook  func(w http.ResponseWriter) bool // answers instead when it returns true
	revokeHook func(r *http.Request) bool       // answers nothing more when it returns true
}

const clientID, clientSecret = "enclave-client", "s3cret-client"

func newFakeProvider(t testing.TB) *fakeProvider {
	f := &fakeProvider{t: t, codes: map[string]string{}, refresh: map[string]bool{}, ttl: time.Hour}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{
			"issuer": f.srv.URL, "authorization_endpoint": f.srv.URL + "/authorize",
			"token_endpoint": f.srv.URL + "/token", "revocation_endpoint": f.srv.URL + "/revoke",
		})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("client_id") != clientID || q.Get("state") == "" {
			http.Error(w, "bad request", 400)
			return
		}
		code := "code-" + fmt.Sprint(time.Now().UnixNano())
		f.mu.Lock()
		f.codes[code] = q.Get("code_challenge")
		f.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?code="+code+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		if f.tokenHook != nil && f.tokenHook(w) {
			return
		}
		id, secret, ok := r.BasicAuth()
		if !ok || id != clientID || secret != clientSecret {
			tokenError(w, 401, "invalid_client")
			return
		}
		_ = r.ParseForm()
		f.mu.Lock()
		defer f.mu.Unlock()
		switch r.PostForm.Get("grant_type") {
		case "authorization_code":
			ch, ok := f.codes[r.PostForm.Get("code")]
			delete(f.codes, r.PostForm.Get("code"))
			sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
			if !ok || f.refuseCode || base64.RawURLEncoding.EncodeToString(sum[:]) != ch {
				tokenError(w, 400, "invalid_grant")
				return
			}
		case "refresh_token":
			rt := r.PostForm.Get("refresh_token")
			if !f.refresh[rt] {
				tokenError(w, 400, "invalid_grant")
				return
			}
			delete(f.refresh, rt) // rotated
		default:
			tokenError(w, 400, "unsupported_grant_type")
			return
		}
		at := "at-" + hex.EncodeToString([]byte(fmt.Sprint(time.Now().UnixNano())))
		f.issued = append(f.issued, at)
		out := map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": int(f.ttl.Seconds()), "scope": "read write"}
		if !f.noRefresh {
			rt := "rt-" + fmt.Sprint(time.Now().UnixNano())
			f.refresh[rt] = true
			out["refresh_token"] = rt
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /revoke", func(w http.ResponseWriter, r *http.Request) {
		if f.revokeHook != nil && f.revokeHook(r) {
			return
		}
		id, secret, ok := r.BasicAuth()
		if !ok || id != clientID || secret != clientSecret {
			tokenError(w, 401, "invalid_client")
			return
		}
		_ = r.ParseForm()
		f.mu.Lock()
		f.revoked = append(f.revoked, r.PostForm.Get("token"))
		delete(f.refresh, r.PostForm.Get("token"))
		f.mu.Unlock()
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func tokenError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code})
}

func (f *fakeProvider) lastAccessToken() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.issued) == 0 {
		return ""
	}
	return f.issued[len(f.issued)-1]
}

func (f *fakeProvider) revocations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.revoked...)
}

// authorize plays the browser at the provider: it follows the
// authorization URL and returns the callback's query.
func (f *fakeProvider) authorize(t testing.TB, authURL string) url.Values {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if !strings.HasSuffix(loc.Path, integrations.CallbackPath+"/acme") {
		t.Fatalf("callback %s is not on our origin's callback path", loc)
	}
	return loc.Query()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// owners resolves a caller from the ids it carries, as the server's does.
func owners(_ context.Context, c capabilities.Caller) (capabilities.Owner, error) {
	if c.OwnerID == 0 {
		return capabilities.Owner{}, capabilities.Errorf(capabilities.CodeNotFound, "no such account")
	}
	return capabilities.Owner{ID: c.OwnerID, StableID: c.UserID}, nil
}

func newService(t testing.TB, s *storage.Store, ps ...integrations.Provider) *integrations.Service {
	t.Helper()
	return newServiceAt(t, s, nil, ps...)
}

func newServiceAt(t testing.TB, s *storage.Store, now func() time.Time, ps ...integrations.Provider) *integrations.Service {
	t.Helper()
	ring, err := envelope.Open(context.Background(), s.DB, s.Keeper)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := integrations.New(integrations.Config{Options: integrations.Options{Providers: ps}, Store: s, Ring: ring,
		Owners: owners, BaseURL: "https://enclave.example", Logger: quiet(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func TestProviderConfig(t *testing.T) {
	for _, bad := range []string{"noequals", "x=client-id=a,unknown=1", "x=client-id"} {
		if _, err := integrations.ParseProviderFlag(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	st := storagetest.Open(t, storage.SQLite)
	ring, err := envelope.Open(t.Context(), st.DB, st.Keeper)
	if err != nil {
		t.Fatal(err)
	}
	good := integrations.Provider{Name: "x", ClientID: "c", Issuer: "https://id.example", APIHosts: []string{"api.example"}}
	if _, err := integrations.New(integrations.Config{Options: integrations.Options{Providers: []integrations.Provider{good}},
		Store: st, Ring: ring, Owners: owners, BaseURL: "https://e.example"}); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]integrations.Provider{
		"bad name":        {Name: "Bad Name", ClientID: "c", Issuer: "https://id.example"},
		"no client":       {Name: "x", Issuer: "https://id.example"},
		"no endpoints":    {Name: "x", ClientID: "c"},
		"plain http":      {Name: "x", ClientID: "c", Issuer: "http://id.example"},
		"public suffix":   {Name: "x", ClientID: "c", Issuer: "https://id.example", APIHosts: []string{"*.co.uk"}},
		"host with path":  {Name: "x", ClientID: "c", Issuer: "https://id.example", APIHosts: []string{"https://api.example/x"}},
		"missing secret":  {Name: "x", ClientID: "c", Issuer: "https://id.example", ClientSecretFile: "/nonexistent/secret"},
		"user info in ep": {Name: "x", ClientID: "c", AuthURL: "https://u:p@id.example/a", TokenURL: "https://id.example/t"},
		"twice":           good,
	} {
		ps := []integrations.Provider{p}
		if name == "twice" {
			ps = append(ps, good)
		}
		_, err := integrations.New(integrations.Config{Options: integrations.Options{Providers: ps},
			Store: st, Ring: ring, Owners: owners, BaseURL: "https://e.example"})
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
