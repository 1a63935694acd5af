package oauth_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v3"
	josejwt "github.com/go-jose/go-jose/v3/jwt"
	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/internal/ratelimit"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// docServer serves client metadata documents over https on loopback.
type docServer struct {
	ts      *httptest.Server
	mu      sync.Mutex
	docs    map[string]docAnswer
	fetches atomic.Int64
}

type docAnswer struct {
	status       int
	contentType  string
	cacheControl string
	body         string
	location     string
	delay        time.Duration
}

func newDocServer(t testing.TB) *docServer {
	d := &docServer{docs: map[string]docAnswer{}}
	d.ts = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.fetches.Add(1)
		d.mu.Lock()
		a, ok := d.docs[r.URL.Path]
		d.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		if a.delay > 0 {
			select {
			case <-time.After(a.delay):
			case <-r.Context().Done():
				return
			}
		}
		if a.location != "" {
			http.Redirect(w, r, a.location, http.StatusFound)
			return
		}
		ct := a.contentType
		if ct == "" {
			ct = "application/json"
		}
		w.Header().Set("Content-Type", ct)
		if a.cacheControl != "" {
			w.Header().Set("Cache-Control", a.cacheControl)
		}
		if a.status != 0 {
			w.WriteHeader(a.status)
		}
		_, _ = w.Write([]byte(a.body))
	}))
	t.Cleanup(d.ts.Close)
	return d
}

// url is the client_id of the document at path.
func (d *docServer) url(path string) string { return d.ts.URL + path }

func (d *docServer) set(path string, a docAnswer) {
	d.mu.Lock()
	d.docs[path] = a
	d.mu.Unlock()
}

// setDoc serves a valid document for path with the given redirect URIs
// and Cache-Control, and returns its client_id.
func (d *docServer) setDoc(path, cacheControl string, redirects ...string) string {
	id := d.url(path)
	body, _ := json.Marshal(map[string]any{
		"client_id":                  id,
		"client_name":                "Document Agent",
		"redirect_uris":              redirects,
		"token_endpoint_auth_method": "none",
		"grant_types":                []string{"authorization_code", "refresh_token"},
	})
	d.set(path, docAnswer{body: string(body), cacheControl: cacheControl})
	return id
}

// trust is the TLS configuration that trusts the document server.
func (d *docServer) trust() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(d.ts.Certificate())
	return &tls.Config{RootCAs: pool}
}

// host is the host a consent page shows for the server's documents.
func (d *docServer) host() string {
	u, _ := url.Parse(d.ts.URL)
	return u.Host
}

// cimdEnv starts the authorization server with an error page, allowed to
// fetch documents from the loopback document server (the test switch).
func cimdEnv(t *testing.T, st *storage.Store, docs *docServer) (*env, *pagedLogin) {
	var pages *pagedLogin
	e := newEnv(t, st, func(o *oauth.Options) {
		pages = &pagedLogin{fakeLogin: o.LoginConsent.(*fakeLogin)}
		o.LoginConsent = pages
		o.MetadataAllowPrivate = true
		o.MetadataTLSConfig = docs.trust()
	})
	return e, pages
}

func docClient(e *env, id, redirect string) *oauth2.Config {
	return &oauth2.Config{
		ClientID:    id,
		RedirectURL: redirect,
		Scopes:      []string{"mcp"},
		Endpoint: oauth2.Endpoint{
			AuthURL:   e.ts.URL + "/oauth/authorize",
			TokenURL:  e.ts.URL + "/oauth/token",
			AuthStyle: oauth2.AuthStyleInParams,
		},
	}
}

// A client whose id is the https URL of its metadata document goes through
// the whole flow without registering: the document is fetched once and
// cached, the consent page names its host, the token works, refresh works,
// and the metadata advertises the feature.
func TestClientMetadataDocumentFlow(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		e, _ := cimdEnv(t, st, docs)
		const redirect = "http://127.0.0.1:9/callback"
		id := docs.setDoc("/agent/client.json", "max-age=3600", redirect)
		conf := docClient(e, id, redirect)

		if !e.srv.Metadata().ClientIDMetadataDocumentSupported {
			t.Fatal("metadata does not advertise client_id_metadata_document_supported")
		}
		_, email := e.createUser(userState{})
		u := e.authorize(conf, email, nil)
		e.login.mu.Lock()
		last := e.login.last
		e.login.mu.Unlock()
		if last == nil || last.ClientHost != docs.host() || last.ClientName != "Document Agent" || last.ClientID != id {
			t.Fatalf("consent page saw %+v, want host %s", last, docs.host())
		}
		tok := e.exchange(conf, u.Query().Get("code"), nil)
		if tok.Status != http.StatusOK {
			t.Fatalf("exchange: %d %s %s", tok.Status, tok.Error, tok.Description)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusOK {
			t.Fatal("the token is refused")
		}
		if r := e.refresh(conf, tok.RefreshToken); r.Status != http.StatusOK {
			t.Fatalf("refresh: %d %s", r.Status, r.Error)
		}
		if n := docs.fetches.Load(); n != 1 {
			t.Errorf("%d fetches, want 1 (cached for an hour)", n)
		}

		// A client from registration has no host: the page marks it
		// unverified.
		reg := e.publicClient()
		e.authorize(reg, email, nil)
		e.login.mu.Lock()
		last = e.login.last
		e.login.mu.Unlock()
		if last.ClientHost != "" {
			t.Errorf("registered client shown as from %q", last.ClientHost)
		}

		// Admins see it with its host and last use.
		cs, err := e.srv.Clients(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range cs {
			if c.ID == id {
				found = true
				if c.Kind != oauth.ClientKindMetadataDocument || c.Host != docs.host() || c.Grants != 1 || c.LastUsedAt.IsZero() {
					t.Errorf("listed as %+v", c)
				}
			} else if c.ID == reg.ClientID && c.Kind != oauth.ClientKindRegistered {
				t.Errorf("registered client listed as %+v", c)
			}
		}
		if !found {
			t.Error("the document client is not listed")
		}
	})
}

// Documents are cached for their Cache-Control max-age, bounded to
// [5 min, 24 h]; once expired, the document is fetched again and the new
// one is what counts: a redirect URI it no longer lists is refused.
func TestClientMetadataDocumentCache(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		e, pages := cimdEnv(t, st, docs)
		_, email := e.createUser(userState{})
		const first, second = "http://127.0.0.1:9/first", "http://127.0.0.1:9/second"

		authorizePage := func(conf *oauth2.Config) int {
			t.Helper()
			return e.do(http.MethodGet, e.authURL(conf, nil), nil).StatusCode
		}

		// max-age=10 counts as 5 minutes.
		short := docs.setDoc("/short.json", "public, max-age=10", first)
		if code := authorizePage(docClient(e, short, first)); code != http.StatusOK {
			t.Fatalf("first authorization: %d", code)
		}
		e.clock.Advance(4 * time.Minute)
		authorizePage(docClient(e, short, first))
		if n := docs.fetches.Load(); n != 1 {
			t.Fatalf("%d fetches after 4 minutes, want 1", n)
		}
		e.clock.Advance(2 * time.Minute)
		docs.setDoc("/short.json", "max-age=10", second) // the publisher changed it
		if code := authorizePage(docClient(e, short, first)); code != http.StatusBadRequest || pages.last().Reason != oauth.ErrorRedirectURI {
			t.Fatalf("old redirect after the document changed: %d %+v", code, pages.last())
		}
		if n := docs.fetches.Load(); n != 2 {
			t.Fatalf("%d fetches after 6 minutes, want 2", n)
		}
		conf := docClient(e, short, second)
		u := e.authorize(conf, email, nil)
		if tok := e.exchange(conf, u.Query().Get("code"), nil); tok.Status != http.StatusOK {
			t.Fatalf("new redirect: %d %s", tok.Status, tok.Error)
		}

		// max-age of two days counts as 24 hours; no-store as 5 minutes.
		docs.fetches.Store(0)
		long := docs.setDoc("/long.json", "max-age=172800", first)
		nostore := docs.setDoc("/nostore.json", "no-store, max-age=3600", first)
		authorizePage(docClient(e, long, first))
		authorizePage(docClient(e, nostore, first))
		e.clock.Advance(6 * time.Minute)
		authorizePage(docClient(e, long, first))
		authorizePage(docClient(e, nostore, first))
		if n := docs.fetches.Load(); n != 3 {
			t.Fatalf("%d fetches, want 3 (the no-store document again)", n)
		}
		e.clock.Advance(23 * time.Hour)
		authorizePage(docClient(e, long, first))
		if n := docs.fetches.Load(); n != 3 {
			t.Fatalf("%d fetches after 23 hours, want 3", n)
		}
		e.clock.Advance(time.Hour)
		authorizePage(docClient(e, long, first))
		if n := docs.fetches.Load(); n != 4 {
			t.Fatalf("%d fetches after a day, want 4", n)
		}
	})
}

// Every document that cannot be used is refused: on the authorization
// endpoint with a page naming the document's host and the reason (never a
// redirect: nothing in the document is trusted), at the token endpoint
// with 401 invalid_client.
func TestClientMetadataDocumentRefusals(t *testing.T) {
	docs := newDocServer(t)
	const redirect = "http://127.0.0.1:9/callback"
	valid := func(path string) map[string]any {
		return map[string]any{"client_id": docs.url(path), "client_name": "Bad", "redirect_uris": []string{redirect}}
	}
	with := func(path string, edit func(map[string]any)) string {
		m := valid(path)
		edit(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	cases := []struct {
		name, path string
		answer     docAnswer
		reason     string // in the page and the token endpoint's description
	}{
		{"client_id differs", "/a.json", docAnswer{body: with("/a.json", func(m map[string]any) { m["client_id"] = docs.url("/other.json") })}, "is not the URL it was fetched from"},
		{"no redirect URIs", "/b.json", docAnswer{body: with("/b.json", func(m map[string]any) { delete(m, "redirect_uris") })}, "lists no redirect_uris"},
		{"a secret", "/c.json", docAnswer{body: with("/c.json", func(m map[string]any) { m["client_secret"] = "s3cret" })}, "must not carry a client secret"},
		{"secret auth method", "/d.json", docAnswer{body: with("/d.json", func(m map[string]any) { m["token_endpoint_auth_method"] = "client_secret_basic" })}, "is not allowed"},
		{"private_key_jwt without jwks_uri", "/e.json", docAnswer{body: with("/e.json", func(m map[string]any) {
			m["token_endpoint_auth_method"] = "private_key_jwt"
		})}, "needs an https jwks_uri"},
		{"private_key_jwt with inline keys", "/e2.json", docAnswer{body: with("/e2.json", func(m map[string]any) {
			m["token_endpoint_auth_method"] = "private_key_jwt"
			m["jwks"] = map[string]any{"keys": []any{}}
		})}, "not inline"},
		{"none with keys", "/f.json", docAnswer{body: with("/f.json", func(m map[string]any) { m["jwks_uri"] = docs.url("/jwks.json") })}, "must not publish keys"},
		{"bad redirect URI", "/g.json", docAnswer{body: with("/g.json", func(m map[string]any) { m["redirect_uris"] = []string{"http://evil.example/cb"} })}, "is not allowed"},
		{"too large", "/h.json", docAnswer{body: with("/h.json", func(m map[string]any) { m["client_name"] = strings.Repeat("x", 6<<10) })}, "larger than 5120 bytes"},
		{"not found", "/missing.json", docAnswer{status: http.StatusNotFound, body: "{}"}, "answered HTTP 404"},
		{"not JSON", "/i.json", docAnswer{contentType: "text/html", body: "<html>"}, "not served as JSON"},
		{"malformed", "/j.json", docAnswer{body: "{"}, "not a JSON object"},
		{"redirect to http", "/k.json", docAnswer{location: "http://127.0.0.1:1/x.json"}, "not https"},
	}
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e, pages := cimdEnv(t, st, docs)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if c.path != "/missing.json" {
					docs.set(c.path, c.answer)
				}
				id := docs.url(c.path)
				resp := e.do(http.MethodGet, e.authURL(docClient(e, id, redirect), nil), nil)
				got := pages.last()
				if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" || got.Reason != oauth.ErrorClientMetadata ||
					got.Code != "invalid_client" || !strings.Contains(got.Message, c.reason) || !strings.Contains(got.Message, docs.host()) {
					t.Fatalf("authorize: %d %q %+v, want a client_metadata page saying %q", resp.StatusCode, resp.Header.Get("Location"), got, c.reason)
				}
				tok := e.token(url.Values{"grant_type": {"authorization_code"}, "code": {"x"}, "client_id": {id}, "redirect_uri": {redirect}, "code_verifier": {strings.Repeat("v", 43)}})
				if tok.Status != http.StatusUnauthorized || tok.Error != "invalid_client" || !strings.Contains(tok.Description, c.reason) {
					t.Fatalf("token: %d %s %q", tok.Status, tok.Error, tok.Description)
				}
			})
		}
		// URLs that are no metadata URL at all, or on this server's
		// own host, are refused before any fetch.
		before := docs.fetches.Load()
		for _, id := range []string{
			"https://" + docs.host(),                                        // no path
			"https://" + docs.host() + "/",                                  // root path
			docs.url("/a/../b.json"),                                        // dot segment
			docs.url("/x.json#frag"),                                        // fragment
			"https://user@" + docs.host() + "/x",                            // user info
			"https://сlaude.example/x.json",                                 // a look-alike Unicode host
			"HTTPS://" + docs.host() + "/x.json",                            // not canonical
			strings.Replace(e.ts.URL, "http://", "https://", 1) + "/x.json", // this server's own host
		} {
			resp := e.do(http.MethodGet, e.authURL(docClient(e, id, redirect), nil), nil)
			if resp.StatusCode != http.StatusBadRequest || pages.last().Reason != oauth.ErrorClientMetadata {
				t.Errorf("%s: %d %+v", id, resp.StatusCode, pages.last())
			}
		}
		if n := docs.fetches.Load(); n != before {
			t.Errorf("%d fetches for malformed client ids", n-before)
		}
		own := strings.Replace(e.ts.URL, "http://", "https://", 1) + "/x.json"
		e.do(http.MethodGet, e.authURL(docClient(e, own, redirect), nil), nil)
		if got := pages.last(); !strings.Contains(got.Message, "must not be on this server") {
			t.Errorf("a client_id on this server: %+v", got)
		}
		// A document too slow to arrive within 5 s.
		if st.Dialect() == storage.SQLite {
			docs.set("/slow.json", docAnswer{delay: 7 * time.Second, body: with("/slow.json", func(map[string]any) {})})
			start := time.Now()
			e.do(http.MethodGet, e.authURL(docClient(e, docs.url("/slow.json"), redirect), nil), nil)
			if got := pages.last(); got.Reason != oauth.ErrorClientMetadata || !strings.Contains(got.Message, "did not arrive in time") {
				t.Errorf("slow document: %+v", got)
			}
			if d := time.Since(start); d > 6500*time.Millisecond {
				t.Errorf("the slow fetch took %s", d)
			}
		}
	})
}

// A failed fetch is remembered for a short while, so requests naming a
// broken URL do not each make the server fetch it.
func TestClientMetadataDocumentFailureCache(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		e, _ := cimdEnv(t, st, docs)
		conf := docClient(e, docs.url("/nothing.json"), "http://127.0.0.1:9/cb")
		for range 5 {
			e.do(http.MethodGet, e.authURL(conf, nil), nil)
		}
		if n := docs.fetches.Load(); n != 1 {
			t.Fatalf("%d fetches, want 1", n)
		}
		e.clock.Advance(time.Minute)
		e.do(http.MethodGet, e.authURL(conf, nil), nil)
		if n := docs.fetches.Load(); n != 2 {
			t.Fatalf("%d fetches after a minute, want 2", n)
		}
	})
}

// By default documents are fetched only from public addresses: a client id
// on loopback (or one that resolves there) is refused without a request
// reaching it, even with its certificate trusted.
func TestClientMetadataDocumentPublicOnly(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		var pages *pagedLogin
		e := newEnv(t, st, func(o *oauth.Options) {
			pages = &pagedLogin{fakeLogin: o.LoginConsent.(*fakeLogin)}
			o.LoginConsent = pages
			o.MetadataTLSConfig = docs.trust()
		})
		id := docs.setDoc("/client.json", "", "http://127.0.0.1:9/cb")
		for _, cid := range []string{id, strings.Replace(id, "127.0.0.1", "localhost", 1)} {
			resp := e.do(http.MethodGet, e.authURL(docClient(e, cid, "http://127.0.0.1:9/cb"), nil), nil)
			if got := pages.last(); resp.StatusCode != http.StatusBadRequest || got.Reason != oauth.ErrorClientMetadata ||
				!strings.Contains(got.Message, "does not lead to a public address") {
				t.Fatalf("%s: %d %+v", cid, resp.StatusCode, got)
			}
		}
		if n := docs.fetches.Load(); n != 0 {
			t.Fatalf("the loopback server was reached %d times", n)
		}
		// And it can be turned off: then such an id is an unknown client.
		off := newEnv(t, st, func(o *oauth.Options) {
			pages = &pagedLogin{fakeLogin: o.LoginConsent.(*fakeLogin)}
			o.LoginConsent = pages
			o.DisableClientMetadataDocuments = true
		})
		if off.srv.Metadata().ClientIDMetadataDocumentSupported {
			t.Error("advertised while disabled")
		}
		off.do(http.MethodGet, off.authURL(docClient(off, id, "http://127.0.0.1:9/cb"), nil), nil)
		if got := pages.last(); got.Reason != oauth.ErrorUnknownClient {
			t.Fatalf("disabled: %+v", got)
		}
	})
}

// A document's redirect URIs match exactly: no other loopback port, no
// other spelling.
func TestClientMetadataDocumentRedirectExact(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		e, pages := cimdEnv(t, st, docs)
		id := docs.setDoc("/client.json", "", "http://127.0.0.1:9/cb")
		for _, r := range []string{"http://127.0.0.1:10/cb", "http://localhost:9/cb", "http://127.0.0.1:9/cb/", "http://127.0.0.1:9/cb?x=1"} {
			resp := e.do(http.MethodGet, e.authURL(docClient(e, id, r), nil), nil)
			if resp.StatusCode != http.StatusBadRequest || pages.last().Reason != oauth.ErrorRedirectURI {
				t.Errorf("%s: %d %+v", r, resp.StatusCode, pages.last())
			}
		}
	})
}

// Admins block a document client by its URL (even before it was ever
// used: nothing is fetched) or every client of a host; a block ends the
// client's tokens at once, and lifting it restores them.
func TestClientMetadataDocumentBlocks(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		e, pages := cimdEnv(t, st, docs)
		const redirect = "http://127.0.0.1:9/cb"
		ctx := t.Context()

		// Blocked before first use: never fetched.
		early := docs.setDoc("/early.json", "", redirect)
		if changed, err := e.srv.SetClientBlocked(ctx, early, true); err != nil || !changed {
			t.Fatalf("block unseen URL: %v %v", changed, err)
		}
		e.do(http.MethodGet, e.authURL(docClient(e, early, redirect), nil), nil)
		if pages.last().Reason != oauth.ErrorBlockedClient || docs.fetches.Load() != 0 {
			t.Fatalf("blocked URL: %+v, %d fetches", pages.last(), docs.fetches.Load())
		}

		id := docs.setDoc("/client.json", "", redirect)
		conf := docClient(e, id, redirect)
		_, email := e.createUser(userState{})
		u := e.authorize(conf, email, nil)
		tok := e.exchange(conf, u.Query().Get("code"), nil)
		if tok.Status != http.StatusOK {
			t.Fatalf("exchange: %d %s", tok.Status, tok.Error)
		}
		host, err := oauth.NormalizeHost(docs.host())
		if err != nil {
			t.Fatal(err)
		}
		if changed, err := e.srv.SetHostBlocked(ctx, host, true); err != nil || !changed {
			t.Fatalf("block host: %v %v", changed, err)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusUnauthorized {
			t.Error("a token of a blocked host still works")
		}
		e.do(http.MethodGet, e.authURL(conf, nil), nil)
		if pages.last().Reason != oauth.ErrorBlockedClient {
			t.Errorf("blocked host: %+v", pages.last())
		}
		if r := e.refresh(conf, tok.RefreshToken); r.Status != http.StatusUnauthorized || r.Error != "invalid_client" {
			t.Errorf("refresh of a blocked host: %d %s", r.Status, r.Error)
		}
		blocks, err := e.srv.ClientBlocks(ctx)
		if err != nil || len(blocks) != 2 {
			t.Fatalf("blocks %+v %v", blocks, err)
		}
		// Lifting the URL block of another client leaves this one blocked.
		if _, err := e.srv.SetClientBlocked(ctx, early, false); err != nil {
			t.Fatal(err)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusUnauthorized {
			t.Error("unblocking another URL unblocked the host")
		}
		if changed, err := e.srv.SetHostBlocked(ctx, host, false); err != nil || !changed {
			t.Fatalf("unblock host: %v %v", changed, err)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusOK {
			t.Error("the token does not work again after the unblock")
		}
		// Blocked by its own URL while its host is blocked too: lifting
		// the host block keeps it blocked.
		if _, err := e.srv.SetClientBlocked(ctx, id, true); err != nil {
			t.Fatal(err)
		}
		if _, err := e.srv.SetHostBlocked(ctx, host, true); err != nil {
			t.Fatal(err)
		}
		if _, err := e.srv.SetHostBlocked(ctx, host, false); err != nil {
			t.Fatal(err)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusUnauthorized {
			t.Error("lifting the host block lifted the URL block")
		}
		for _, bad := range []string{"", "a/b", "x y", "user@host"} {
			if _, err := oauth.NormalizeHost(bad); err == nil {
				t.Errorf("NormalizeHost(%q) accepted", bad)
			}
		}
	})
}

// Fetches (not cache hits) count against the requesting network's
// registration bucket: anyone can make the server fetch a URL, as anyone
// can register.
func TestClientMetadataDocumentFetchLimit(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		var pages *pagedLogin
		e := newEnv(t, st, func(o *oauth.Options) {
			pages = &pagedLogin{fakeLogin: o.LoginConsent.(*fakeLogin)}
			o.LoginConsent = pages
			o.MetadataAllowPrivate = true
			o.MetadataTLSConfig = docs.trust()
			o.RegistrationLimiter = ratelimit.New(st, nil)
			o.RegistrationLimit = ratelimit.Limit{Requests: 2, Window: time.Hour}
		})
		const redirect = "http://127.0.0.1:9/cb"
		ids := []string{docs.setDoc("/1.json", "", redirect), docs.setDoc("/2.json", "", redirect), docs.setDoc("/3.json", "", redirect)}
		for _, id := range ids[:2] {
			if code := e.do(http.MethodGet, e.authURL(docClient(e, id, redirect), nil), nil).StatusCode; code != http.StatusOK {
				t.Fatalf("%s: %d", id, code)
			}
		}
		// Cached: no fetch, no count.
		if code := e.do(http.MethodGet, e.authURL(docClient(e, ids[0], redirect), nil), nil).StatusCode; code != http.StatusOK {
			t.Fatalf("cached: %d", code)
		}
		resp := e.do(http.MethodGet, e.authURL(docClient(e, ids[2], redirect), nil), nil)
		if got := pages.last(); resp.StatusCode != http.StatusBadRequest || got.Reason != oauth.ErrorClientMetadata || !strings.Contains(got.Message, "too many") {
			t.Fatalf("third fetch: %d %+v", resp.StatusCode, got)
		}
		if n := docs.fetches.Load(); n != 2 {
			t.Fatalf("%d fetches, want 2", n)
		}
	})
}

// assertion signs a private_key_jwt client assertion for clientID.
func assertion(t *testing.T, key *rsa.PrivateKey, clientID, aud, jti string, exp time.Time) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := josejwt.Signed(signer).Claims(map[string]any{
		"iss": clientID, "sub": clientID, "aud": aud, "jti": jti,
		"iat": time.Now().Unix(), "exp": exp.Unix(),
	}).CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A document client may authenticate with private_key_jwt: its keys come
// from its jwks_uri (through the same egress client), each assertion's jti
// is accepted once, and an assertion for another audience, signed by
// another key, or lasting more than an hour is refused.
func TestClientMetadataDocumentPrivateKeyJWT(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		e, _ := cimdEnv(t, st, docs)
		const redirect = "http://127.0.0.1:9/callback"
		jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
		docs.set("/jwks.json", docAnswer{body: string(jwks)})
		id := docs.url("/confidential.json")
		body, _ := json.Marshal(map[string]any{
			"client_id": id, "client_name": "Confidential", "redirect_uris": []string{redirect},
			"token_endpoint_auth_method": "private_key_jwt", "jwks_uri": docs.url("/jwks.json"),
		})
		docs.set("/confidential.json", docAnswer{body: string(body)})
		conf := docClient(e, id, redirect)
		_, email := e.createUser(userState{})
		tokenURL := e.ts.URL + "/oauth/token"
		code := func() string {
			return e.authorize(conf, email, nil).Query().Get("code")
		}
		withAssertion := func(a string) url.Values {
			return url.Values{
				"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
				"client_assertion":      {a},
				"client_id":             {id},
			}
		}
		// Without an assertion the client is not authenticated.
		if tok := e.exchange(conf, code(), nil); tok.Status != http.StatusUnauthorized || tok.Error != "invalid_client" {
			t.Fatalf("no assertion: %d %s", tok.Status, tok.Error)
		}
		a := assertion(t, key, id, tokenURL, "jti-1", time.Now().Add(5*time.Minute))
		tok := e.exchange(conf, code(), withAssertion(a))
		if tok.Status != http.StatusOK {
			t.Fatalf("exchange: %d %s %s", tok.Status, tok.Error, tok.Description)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusOK {
			t.Fatal("token refused")
		}
		// The same assertion again: refused.
		if r := e.exchange(conf, code(), withAssertion(a)); r.Status != http.StatusUnauthorized || r.Error != "invalid_client" || !strings.Contains(r.Description, "jti") {
			t.Fatalf("replayed assertion: %d %s %s", r.Status, r.Error, r.Description)
		}
		for name, bad := range map[string]string{
			"other audience":  assertion(t, key, id, e.ts.URL, "jti-2", time.Now().Add(5*time.Minute)),
			"other key":       assertion(t, other, id, tokenURL, "jti-3", time.Now().Add(5*time.Minute)),
			"too long-lived":  assertion(t, key, id, tokenURL, "jti-4", time.Now().Add(2*time.Hour)),
			"expired":         assertion(t, key, id, tokenURL, "jti-5", time.Now().Add(-time.Minute)),
			"another subject": assertion(t, key, docs.url("/other.json"), tokenURL, "jti-6", time.Now().Add(5*time.Minute)),
		} {
			if r := e.exchange(conf, code(), withAssertion(bad)); r.Status != http.StatusUnauthorized || r.Error != "invalid_client" {
				t.Errorf("%s: %d %s %s, want 401 invalid_client", name, r.Status, r.Error, r.Description)
			}
		}
		// A refresh authenticates the same way.
		r := e.token(url.Values{
			"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}, "client_id": {id},
			"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
			"client_assertion":      {assertion(t, key, id, tokenURL, "jti-7", time.Now().Add(5*time.Minute))},
		})
		if r.Status != http.StatusOK {
			t.Fatalf("refresh: %d %s %s", r.Status, r.Error, r.Description)
		}
	})
}
