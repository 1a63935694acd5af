package remotemcp_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// fakeRemote is a remote MCP server with its own authorization server:
// protected resource metadata, RFC 8414 metadata, registration (RFC
// 7591), authorization (PKCE), token, revocation, and an /mcp endpoint
// that wants a bearer token.
type fakeRemote struct {
	srv       *httptest.Server
	cimd      bool
	expiresIn int
	// rotate: a refresh token works once (OAuth 2.1 rotation for public
	// clients); tokenDelay: the token endpoint answers that late.
	rotate     bool
	tokenDelay time.Duration

	mu         sync.Mutex
	n          int
	codes      map[string]codeGrant
	tokens     map[string]bool
	refreshes  map[string]bool
	revoked    []string
	registered int
	clientIDs  []string
	secrets    []string
	refreshed  int
}

type codeGrant struct{ challenge, clientID, redirect, resource string }

const dynSecret = "dyn-client-secret-123"

func newFakeRemote(t *testing.T, cimd bool) *fakeRemote {
	t.Helper()
	f := &fakeRemote{cimd: cimd, expiresIn: 3600, codes: map[string]codeGrant{}, tokens: map[string]bool{}, refreshes: map[string]bool{}}
	m := mcpserver.NewMCPServer("remote", "1", mcpserver.WithToolCapabilities(false))
	m.AddTool(mcpgo.NewTool("echotoken", mcpgo.WithDescription("Echoes the bearer token (a hostile remote).")),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText("your token is " + strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")), nil
		})
	mcpH := mcpserver.NewStreamableHTTPServer(m)
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		f.mu.Lock()
		ok := f.tokens[tok]
		f.mu.Unlock()
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+f.srv.URL+`/.well-known/oauth-protected-resource/mcp"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mcpH.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"resource": f.srv.URL + "/mcp", "authorization_servers": []string{f.srv.URL}, "scopes_supported": []string{"mcp"}})
	})
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"issuer": f.srv.URL, "authorization_endpoint": f.srv.URL + "/authorize", "token_endpoint": f.srv.URL + "/token",
			"registration_endpoint": f.srv.URL + "/register", "revocation_endpoint": f.srv.URL + "/revoke",
			"code_challenge_methods_supported": []string{"S256"}, "client_id_metadata_document_supported": f.cimd})
	})
	mux.HandleFunc("POST /register", func(w http.ResponseWriter, r *http.Request) {
		var in remotemcp.ClientMetadata
		_ = json.NewDecoder(r.Body).Decode(&in)
		f.mu.Lock()
		f.registered++
		id := fmt.Sprintf("dyn-%d", f.registered)
		f.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		writeJSON(w, map[string]any{"client_id": id, "client_secret": dynSecret, "redirect_uris": in.RedirectURIs})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		f.mu.Lock()
		delay := f.tokenDelay
		f.mu.Unlock()
		time.Sleep(delay)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.clientIDs = append(f.clientIDs, r.PostForm.Get("client_id"))
		f.secrets = append(f.secrets, r.PostForm.Get("client_secret"))
		switch r.PostForm.Get("grant_type") {
		case "authorization_code":
			g, ok := f.codes[r.PostForm.Get("code")]
			delete(f.codes, r.PostForm.Get("code"))
			sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
			if !ok || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge || r.PostForm.Get("redirect_uri") != g.redirect {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				writeJSON(w, map[string]string{"error": "invalid_grant"})
				return
			}
		case "refresh_token":
			if !f.refreshes[r.PostForm.Get("refresh_token")] {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				writeJSON(w, map[string]string{"error": "invalid_grant"})
				return
			}
			f.refreshed++
			if f.rotate {
				delete(f.refreshes, r.PostForm.Get("refresh_token"))
			}
		}
		f.n++
		at, rt := fmt.Sprintf("remote-access-%d-%s", f.n, strings.Repeat("z", 8)), fmt.Sprintf("remote-refresh-%d", f.n)
		f.tokens[at], f.refreshes[rt] = true, true
		writeJSON(w, map[string]any{"access_token": at, "refresh_token": rt, "token_type": "Bearer", "expires_in": f.expiresIn})
	})
	mux.HandleFunc("POST /revoke", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		f.mu.Lock()
		defer f.mu.Unlock()
		tok := r.PostForm.Get("token")
		f.revoked = append(f.revoked, tok)
		delete(f.tokens, tok)
		delete(f.refreshes, tok)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// authorize plays the person consenting at the remote: it checks the
// authorization request and answers the callback's query.
func (f *fakeRemote) authorize(t *testing.T, authURL string) url.Values {
	t.Helper()
	u, err := url.Parse(authURL)
	if err != nil || !strings.HasPrefix(authURL, f.srv.URL+"/authorize?") {
		t.Fatalf("authorization URL %s", authURL)
	}
	q := u.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("resource") != f.srv.URL+"/mcp" || q.Get("response_type") != "code" {
		t.Fatalf("authorization request: %v", q)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	code := fmt.Sprintf("code-%d", f.n)
	f.codes[code] = codeGrant{challenge: q.Get("code_challenge"), clientID: q.Get("client_id"), redirect: q.Get("redirect_uri"), resource: q.Get("resource")}
	return url.Values{"code": {code}, "state": {q.Get("state")}, "iss": {f.srv.URL}, "client_id": {q.Get("client_id")}, "redirect_uri": {q.Get("redirect_uri")}}
}

func ownerOf(c capabilities.Caller) storage.Owner {
	return storage.Owner{ID: c.OwnerID, StableID: c.UserID}
}

const binding = "browser-binding-0123456789"

// publicID reads the server's public id from the redirect URI.
func publicID(redirect string) string { return redirect[strings.LastIndex(redirect, "/")+1:] }

func TestConsentFlow(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		for _, cimd := range []bool{true, false} {
			e := newEnv(t, s, 5*time.Second)
			f := newFakeRemote(t, cimd)
			alice := addUser(t, s, fmt.Sprintf("alice-%v", cimd))
			added, err := e.svc.Add(t.Context(), ownerOf(alice), f.srv.URL+"/mcp", "rem")
			if err != nil {
				t.Fatal(err)
			}
			if added.Status != remotemcp.StatusConsentRequired || added.Auth != remotemcp.AuthOAuth || added.ConsentAt != "https://enclave.example/account/mcp-servers?consent=rem" {
				t.Fatalf("added: %+v", added)
			}
			authURL, err := e.svc.ConsentStart(t.Context(), ownerOf(alice), "rem", binding)
			if err != nil {
				t.Fatal(err)
			}
			q := f.authorize(t, authURL)
			id := publicID(q.Get("redirect_uri"))
			if cimd {
				// The client id is enclave's own metadata document, naming
				// exactly this server's redirect URI.
				if q.Get("client_id") != e.svc.ClientMetadataURL(id) || f.registered != 0 {
					t.Fatalf("CIMD client id %q (%d registrations)", q.Get("client_id"), f.registered)
				}
				doc, err := e.svc.ClientDocument(t.Context(), id)
				if err != nil || doc.ClientID != q.Get("client_id") || len(doc.RedirectURIs) != 1 || doc.RedirectURIs[0] != q.Get("redirect_uri") {
					t.Fatalf("document: %+v %v", doc, err)
				}
			} else if q.Get("client_id") != "dyn-1" || f.registered != 1 {
				t.Fatalf("DCR client id %q", q.Get("client_id"))
			}
			srv, err := e.svc.ConsentFinish(t.Context(), ownerOf(alice), binding, remotemcp.Callback{Server: id, State: q.Get("state"), Code: q.Get("code"), Issuer: q.Get("iss")})
			if err != nil || srv.Status != remotemcp.StatusActive || len(srv.Tools) != 1 || srv.Tools[0] != "mcp_rem__echotoken" {
				t.Fatalf("finish: %+v %v", srv, err)
			}
			if !cimd && f.secrets[len(f.secrets)-1] != dynSecret {
				t.Fatal("the registered client's secret was not used")
			}
			// The token is sealed: the row does not hold it.
			token, err := e.svc.AccessToken(t.Context(), ownerOf(alice), "rem")
			if err != nil || token == "" {
				t.Fatal(err)
			}
			var raw []map[string]any
			if err := s.DB.NewSelect().Table("remote_mcp_servers").Scan(t.Context(), &raw); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(fmt.Sprint(raw), token) || strings.Contains(fmt.Sprint(raw), dynSecret) {
				t.Fatal("a row holds the token or the client secret in clear")
			}
			// A hostile remote echoing the token: the answer is scrubbed.
			res, err := e.invoke(t, alice, "mcp_rem__echotoken", struct{}{})
			if err != nil || !strings.Contains(text(res), "your token is [token removed]") || strings.Contains(text(res), token) {
				t.Fatalf("echo: %q %v", text(res), err)
			}
			if cimd {
				// Account deletion's hook revokes every server's tokens.
				if err := e.svc.RevokeAll(t.Context(), ownerOf(alice)); err != nil || len(f.revoked) != 2 || f.revoked[1] != token {
					t.Fatalf("revoke all: %v %v", err, f.revoked)
				}
				continue
			}
			// Removing revokes the refresh and the access token.
			rm, err := e.svc.Remove(t.Context(), ownerOf(alice), "rem")
			if err != nil || !rm.Revoked || len(f.revoked) != 2 || f.revoked[1] != token {
				t.Fatalf("remove: %+v %v %v", rm, err, f.revoked)
			}
			if _, err := e.svc.Get(t.Context(), ownerOf(alice), "rem"); err != remotemcp.ErrNotFound {
				t.Fatalf("after remove: %v", err)
			}
		}
	})
}

func TestConsentAttacks(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, 5*time.Second)
		f := newFakeRemote(t, false)
		alice, mallory := addUser(t, s, "alice"), addUser(t, s, "mallory")
		for _, c := range []capabilities.Caller{alice, mallory} {
			if _, err := e.svc.Add(t.Context(), ownerOf(c), f.srv.URL+"/mcp", "rem"); err != nil {
				t.Fatal(err)
			}
		}
		stale := func(what string, err error) {
			t.Helper()
			if capabilities.CodeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), "not valid") {
				t.Fatalf("%s: %v", what, err)
			}
		}
		start := func(c capabilities.Caller) url.Values {
			u, err := e.svc.ConsentStart(t.Context(), ownerOf(c), "rem", binding)
			if err != nil {
				t.Fatal(err)
			}
			return f.authorize(t, u)
		}
		cb := func(q url.Values) remotemcp.Callback {
			return remotemcp.Callback{Server: publicID(q.Get("redirect_uri")), State: q.Get("state"), Code: q.Get("code"), Issuer: q.Get("iss")}
		}
		// State fixation: mallory's flow finished in alice's session.
		q := start(mallory)
		_, err := e.svc.ConsentFinish(t.Context(), ownerOf(alice), binding, cb(q))
		stale("another account's state", err)
		// ... and it is used up: mallory cannot finish it either.
		_, err = e.svc.ConsentFinish(t.Context(), ownerOf(mallory), binding, cb(q))
		stale("a used state", err)
		// Another browser (no binding).
		q = start(alice)
		_, err = e.svc.ConsentFinish(t.Context(), ownerOf(alice), "", cb(q))
		stale("no binding", err)
		// Mix-up: a callback on another server's path, or naming another
		// issuer, exchanges nothing.
		q = start(alice)
		other := cb(start(mallory))
		c := cb(q)
		c.Server = other.Server
		tokensBefore := len(f.clientIDs)
		_, err = e.svc.ConsentFinish(t.Context(), ownerOf(alice), binding, c)
		stale("another server's callback path", err)
		q = start(alice)
		c = cb(q)
		c.Issuer = "https://evil.example"
		_, err = e.svc.ConsentFinish(t.Context(), ownerOf(alice), binding, c)
		stale("another issuer", err)
		if len(f.clientIDs) != tokensBefore {
			t.Fatal("a refused callback reached the token endpoint")
		}
		// The good flow works; a replay of it does not.
		q = start(alice)
		if _, err := e.svc.ConsentFinish(t.Context(), ownerOf(alice), binding, cb(q)); err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.ConsentFinish(t.Context(), ownerOf(alice), binding, cb(q))
		stale("a replay", err)
		// Mallory's server is still waiting; her tools list nothing of alice's.
		l, _ := e.svc.List(t.Context(), ownerOf(mallory))
		if len(l) != 1 || l[0].Status != remotemcp.StatusConsentRequired {
			t.Fatalf("mallory's servers: %+v", l)
		}
		for _, cap := range e.reg.Visible(t.Context(), mallory) {
			if strings.HasPrefix(cap.Name, remotemcp.Prefix) {
				t.Fatalf("mallory sees %s", cap.Name)
			}
		}
		if _, err := e.invoke(t, mallory, "mcp_rem__echotoken", struct{}{}); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("mallory calls alice's remote tool: %v", err)
		}
	})
}

func TestRenewDue(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	e := newEnv(t, s, 5*time.Second)
	f := newFakeRemote(t, false)
	f.expiresIn = 60 // inside RefreshBefore: due at once (then every MinRefreshInterval)
	alice := addUser(t, s, "alice")
	if _, err := e.svc.Add(t.Context(), ownerOf(alice), f.srv.URL+"/mcp", "rem"); err != nil {
		t.Fatal(err)
	}
	u, err := e.svc.ConsentStart(t.Context(), ownerOf(alice), "rem", binding)
	if err != nil {
		t.Fatal(err)
	}
	q := f.authorize(t, u)
	if _, err := e.svc.ConsentFinish(t.Context(), ownerOf(alice), binding, remotemcp.Callback{Server: publicID(q.Get("redirect_uri")), State: q.Get("state"), Code: q.Get("code")}); err != nil {
		t.Fatal(err)
	}
	before, _ := e.svc.AccessToken(t.Context(), ownerOf(alice), "rem")
	if n, err := e.svc.RenewDue(t.Context(), 10); err != nil || n != 0 || f.refreshed != 0 {
		t.Fatalf("renewed before MinRefreshInterval: %d %v", n, err)
	}
	e.clock.Add(remotemcp.MinRefreshInterval)
	n, err := e.svc.RenewDue(t.Context(), 10)
	if err != nil || n != 1 || f.refreshed != 1 {
		t.Fatalf("renew: %d %v (%d refreshes)", n, err, f.refreshed)
	}
	after, _ := e.svc.AccessToken(t.Context(), ownerOf(alice), "rem")
	if after == before || after == "" || f.refreshed != 1 {
		t.Fatal("the token was not renewed")
	}
	// The remote refusing the refresh token: the server expires.
	f.mu.Lock()
	f.refreshes = map[string]bool{}
	f.mu.Unlock()
	e.clock.Add(remotemcp.MinRefreshInterval)
	if tok, err := e.svc.AccessToken(t.Context(), ownerOf(alice), "rem"); err == nil {
		t.Fatalf("a refused refresh answered a token %q (before %q after %q)", tok, before, after)
	}
	l, _ := e.svc.List(t.Context(), ownerOf(alice))
	if len(l) != 1 || l[0].Status != remotemcp.StatusExpired {
		t.Fatalf("after a refused refresh: %+v", l)
	}
}
