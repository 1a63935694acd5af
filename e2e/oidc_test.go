package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// oidcDocServer serves a client ID metadata document over https on
// loopback: the client's identity, as a desktop host would publish it.
func oidcDocServer(t *testing.T, redirect string) (*httptest.Server, *atomic.Int64) {
	var fetches atomic.Int64
	var ts *httptest.Server
	ts = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/oauth/client.json" {
			http.NotFound(w, r)
			return
		}
		fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=600")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"client_id":                  ts.URL + "/oauth/client.json",
			"client_name":                "Go SDK desktop host",
			"redirect_uris":              []string{redirect},
			"grant_types":                []string{"authorization_code", "refresh_token"},
			"response_types":             []string{"code"},
			"token_endpoint_auth_method": "none",
		})
	}))
	t.Cleanup(ts.Close)
	return ts, &fetches
}

var oidcFormAction = regexp.MustCompile(`<form[^>]*method="post"[^>]*action="([^"]*/oauth/authorize[^"]*)"`)

// oidcBrowser plays the person in the browser the SDK would open: it
// signs in on the authorization page and approves, and returns the
// redirect's parameters (the loopback listener is not needed: the
// answer's Location carries them). consentPage receives the consent
// page's HTML.
func oidcBrowser(s *enclavetest.Server, u *enclavetest.User, consentPage *string) auth.AuthorizationCodeFetcher {
	return func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		jar, _ := cookiejar.New(nil)
		b := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		form := func(step string, resp *http.Response, err error) (string, string, error) {
			if err != nil {
				return "", "", err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			m := oidcFormAction.FindSubmatch(body)
			if resp.StatusCode != http.StatusOK || m == nil {
				return "", "", fmt.Errorf("%s: status %d, no authorization form: %.300s", step, resp.StatusCode, body)
			}
			return s.URL + html.UnescapeString(string(m[1])), string(body), nil
		}
		resp, err := b.Get(args.URL)
		action, _, err := form("authorize", resp, err)
		if err != nil {
			return nil, err
		}
		resp, err = b.PostForm(action, url.Values{"email": {u.Email}, "password": {u.Password}})
		action, page, err := form("sign-in", resp, err)
		if err != nil {
			return nil, err
		}
		*consentPage = page
		resp, err = b.PostForm(action, url.Values{"decision": {"approve"}})
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		loc, err := url.Parse(resp.Header.Get("Location"))
		if err != nil || loc.Query().Get("code") == "" {
			return nil, fmt.Errorf("consent: status %d, location %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		return &auth.AuthorizationResult{Code: loc.Query().Get("code"), State: loc.Query().Get("state"), Iss: loc.Query().Get("iss")}, nil
	}
}

// The official Go SDK's client connects with a client ID metadata
// document: it sees client_id_metadata_document_supported in the
// authorization server metadata, uses its document's URL as client_id
// (no registration), the person sees "App from <host>" on the consent
// page, and the token it gets calls a tool over MCP.
func TestOIDCClientMetadataDocumentGoSDK(t *testing.T) {
	const redirect = "http://127.0.0.1:9/callback"
	docs, fetches := oidcDocServer(t, redirect)
	pool := x509.NewCertPool()
	pool.AddCert(docs.Certificate())
	var cfg enclave.Config
	// The test switch: documents may come from loopback, over a
	// certificate the test trusts. The production default fetches from
	// public addresses only.
	cfg.OAuth.MetadataAllowPrivate = true
	cfg.OAuth.MetadataTLSConfig = &tls.Config{RootCAs: pool}
	enclavetest.Each(t, enclavetest.Options{Config: cfg}, func(t *testing.T, s *enclavetest.Server) {
		fetches.Store(0)
		alice := s.CreateUser(t, "alice")
		clientID := docs.URL + "/oauth/client.json"
		var consent string
		h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
			ClientIDMetadataDocumentConfig: &auth.ClientIDMetadataDocumentConfig{URL: clientID},
			RedirectURL:                    redirect,
			AuthorizationCodeFetcher:       oidcBrowser(s, alice, &consent),
		})
		if err != nil {
			t.Fatal(err)
		}
		client := mcp.NewClient(&mcp.Implementation{Name: "oidc-e2e", Version: "1.0.0"}, nil)
		session, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: s.URL + "/mcp", OAuthHandler: h}, nil)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer session.Close()
		res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			t.Fatalf("whoami: %v %+v", err, res)
		}
		out, _ := json.Marshal(res.StructuredContent)
		if !strings.Contains(string(out), alice.StableID) && !strings.Contains(string(out), alice.Username) {
			t.Errorf("whoami answered %s, want alice", out)
		}
		host := strings.TrimPrefix(docs.URL, "https://")
		if !strings.Contains(consent, "App from <strong>"+host+"</strong>") || strings.Contains(consent, "Unverified app") {
			t.Errorf("the consent page does not say who the app is:\n%s", consent)
		}
		if n := fetches.Load(); n != 1 {
			t.Errorf("the document was fetched %d times, want 1", n)
		}
		// No client was registered: the only client is the document's.
		cs, err := s.OAuth().Clients(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 1 || cs[0].ID != clientID || cs[0].Kind != "metadataDocument" || cs[0].Grants != 1 {
			t.Errorf("clients %+v", cs)
		}

		// An admin blocks it on /admin/clients, by its URL and by its
		// host: the token the SDK holds stops working, and comes back
		// when the block is lifted.
		ts, err := h.TokenSource(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		tok, err := ts.Token()
		if err != nil {
			t.Fatal(err)
		}
		s.CreateUser(t, "carol", "admin")
		admin := oidcSession(t, s, "carol@example.com")
		list := admin.do(t, "GET", "/admin/clients", nil)
		if !strings.Contains(list, "app from "+host) || !strings.Contains(list, "block host") {
			t.Fatalf("the clients page does not show the document client:\n%s", list)
		}
		check := func(step string, want int) {
			t.Helper()
			if got := oidcMCPStatus(t, s, tok.AccessToken); got != want {
				t.Fatalf("%s: /mcp answered %d, want %d", step, got, want)
			}
		}
		check("before any block", http.StatusOK)
		admin.do(t, "POST", "/admin/clients/"+url.PathEscape(clientID)+"/block", url.Values{})
		check("blocked by URL", http.StatusUnauthorized)
		admin.do(t, "POST", "/admin/clients/"+url.PathEscape(clientID)+"/unblock", url.Values{})
		check("URL unblocked", http.StatusOK)
		admin.do(t, "POST", "/admin/client-hosts/block", url.Values{"host": {host}})
		check("blocked by host", http.StatusUnauthorized)
		if list := admin.do(t, "GET", "/admin/clients", nil); !strings.Contains(list, "host: "+host) || !strings.Contains(list, "unblock host") {
			t.Fatalf("the clients page does not list the host block:\n%s", list)
		}
		admin.do(t, "POST", "/admin/client-hosts/unblock", url.Values{"host": {host}})
		check("host unblocked", http.StatusOK)
	})
}

// oidcPage is a signed-in web session on s.
type oidcPage struct {
	s      *enclavetest.Server
	cookie *http.Cookie
}

func oidcSession(t *testing.T, s *enclavetest.Server, email string) oidcPage {
	t.Helper()
	u, err := s.Accounts().Identity.UserByEmail(t.Context(), email)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	if _, err := s.Accounts().Credentials.StartSession(rec, httptest.NewRequest("POST", "/login", nil), u, false); err != nil {
		t.Fatal(err)
	}
	return oidcPage{s: s, cookie: rec.Result().Cookies()[0]}
}

// do sends a request as the signed-in person (redirects not followed) and
// returns the body; anything but 200 or 303 fails the test.
func (p oidcPage) do(t *testing.T, method, path string, form url.Values) string {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, p.s.URL+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.AddCookie(p.cookie)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("%s %s: %d %.300s", method, path, resp.StatusCode, b)
	}
	return string(b)
}

// oidcMCPStatus is the status of an MCP initialize with token.
func oidcMCPStatus(t *testing.T, s *enclavetest.Server, token string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+enclavetest.ProtocolVersion+`","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
