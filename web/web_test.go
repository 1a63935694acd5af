package web

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// newTestHandler returns a development handler on s with dev routes on
// and a quiet logger; change opts with edit. Unless edit sets Accounts, an
// accounts service with cheap hashing and opts.Now as its clock is made.
func newTestHandler(t *testing.T, s *storage.Store, edit func(*Options)) *Handler {
	t.Helper()
	opts := Options{Store: s, BaseURL: "http://enclave.test", DevRoutes: true, Logger: quietLogger()}
	if edit != nil {
		edit(&opts)
	}
	if opts.Accounts == nil {
		opts.Accounts = newAccounts(t, s, opts.Now)
	}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newAccounts returns an accounts service on s with cheap hashing.
func newAccounts(t testing.TB, s *storage.Store, now func() time.Time) *accounts.Service {
	t.Helper()
	svc, err := accounts.New(context.Background(), s, accounts.Config{
		Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1},
		Now:    now,
		Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// serve runs h behind a test server stopped when t ends.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// noRedirect is a client that returns redirects instead of following them.
func noRedirect(srv *httptest.Server) *http.Client {
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func checkSecurityHeaders(t *testing.T, what string, hdr http.Header, wantHSTS bool) {
	t.Helper()
	want := map[string]string{
		"Content-Security-Policy": "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'",
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "strict-origin-when-cross-origin",
	}
	for k, v := range want {
		if got := hdr.Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
	}
	if got := hdr.Get("Strict-Transport-Security"); (got != "") != wantHSTS {
		t.Errorf("%s: Strict-Transport-Security = %q, want present=%v", what, got, wantHSTS)
	}
}

// concretePath turns a route pattern into a request path.
func concretePath(pattern string) (method, path string) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = http.MethodGet, pattern
	}
	path = strings.ReplaceAll(path, "{$}", "")
	for {
		i := strings.Index(path, "{")
		if i < 0 {
			break
		}
		j := strings.Index(path[i:], "}")
		path = path[:i] + "1" + path[i+j+1:]
	}
	return method, path
}

// Every route answers with the security headers, HTML or not, and with
// HSTS when the public origin is https; signed out and signed in as an
// admin (so guarded pages render too).
func TestSecurityHeadersOnEveryRoute(t *testing.T) {
	for _, base := range []string{"http://enclave.test", "https://enclave.test"} {
		t.Run(base, func(t *testing.T) {
			s := storagetest.Open(t, storage.SQLite)
			acc := newAccounts(t, s, nil)
			h := newTestHandler(t, s, func(o *Options) {
				o.BaseURL = base
				o.CredentialLimit = Limit{Requests: 1000}
				o.Accounts = acc
				o.OAuth = &fakeApps{}
				o.Lifecycle = newLifecycle(t, s, acc)
				o.Audit = audit.New(s, make([]byte, 32), quietLogger())
			})
			if len(h.patterns) < 30 {
				t.Fatalf("only %d routes registered: %v", len(h.patterns), h.patterns)
			}
			u, err := h.opts.Accounts.Identity.Signup(t.Context(), accounts.SignupInput{Email: "admin@example.com", Username: "boss", Password: "correct horse battery"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.opts.Accounts.Roles.GrantAdminAsOperator(t.Context(), u.ID); err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			if _, err := h.opts.Accounts.Credentials.StartSession(w, httptest.NewRequest("GET", base+"/", nil), u, false); err != nil {
				t.Fatal(err)
			}
			session := w.Result().Cookies()[0]
			rendered := map[string]bool{} // signed-in GET pages answered 200
			for _, signedIn := range []bool{false, true} {
				for _, p := range h.patterns {
					method, path := concretePath(p)
					if strings.HasPrefix(path, "/admin/users/1") {
						path = strings.Replace(path, "/1", "/"+u.StableID, 1) // the admin pages name accounts by stable id
					}
					path = strings.ReplaceAll(path, "/1", "/"+strconv.FormatInt(u.ID, 10))
					for _, m := range []string{method, http.MethodPost} {
						r := httptest.NewRequest(m, base+path, strings.NewReader(""))
						r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
						r.RemoteAddr = "127.0.0.1:5555" // the development mailbox answers loopback clients only
						if signedIn {
							r.AddCookie(session)
						}
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r)
						what := fmt.Sprintf("%s %s (%s, signed in %v) → %d", m, path, p, signedIn, w.Code)
						if signedIn && m == http.MethodGet && w.Code == http.StatusOK {
							rendered[path] = true
						}
						if p == "GET "+stylesheetPath && m == http.MethodGet {
							if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/css") {
								t.Errorf("%s: Content-Type %q", what, ct)
							}
							if w.Header().Get("X-Content-Type-Options") != "nosniff" {
								t.Errorf("%s: no nosniff", what)
							}
							continue
						}
						if w.Code >= 300 && w.Code < 400 {
							continue // redirects carry no page
						}
						checkSecurityHeaders(t, what, w.Header(), strings.HasPrefix(base, "https"))
						if ct := w.Header().Get("Content-Type"); strings.HasPrefix(ct, "text/html") {
							// The only scripts allowed are first-party files,
							// loaded by src (no inline code).
							body := firstPartyScript.ReplaceAllString(w.Body.String(), "")
							if strings.Contains(body, "<script") || strings.Contains(body, " style=") {
								t.Errorf("%s: page has an inline script or style", what)
							}
						}
					}
				}
			}
			for _, path := range []string{"/account", "/account/apps", "/account/export", "/account/delete", "/admin/users",
				"/admin/users/" + u.StableID, "/admin/users/new", "/admin/roles", "/admin/audit", "/dev/mail"} {
				if !rendered[path] {
					t.Errorf("GET %s did not render for a signed-in admin", path)
				}
			}
		})
	}
}

// firstPartyScript matches the tags that load the first-party scripts:
// passkeys, and the connect page's copy buttons.
var firstPartyScript = regexp.MustCompile(`<script src="(/[a-z]+)?/static/(passkey|connect)\.js\?v=[0-9a-f]+" defer></script>`)

// A form posted from another site is refused with 403 before any handler
// runs; the same post from our own origin gets through.
func TestCrossSiteFormPostIsRefused(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	h := newTestHandler(t, s, nil)
	srv := serve(t, h)
	post := func(headers map[string]string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/logout", strings.NewReader("x=1"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := noRedirect(srv).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	tests := []struct {
		name    string
		headers map[string]string
		refused bool
	}{
		{"browser, cross-site", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, true},
		{"browser, same-site other origin", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://other.enclave.test"}, true},
		{"old browser, foreign Origin", map[string]string{"Origin": "https://evil.example"}, true},
		{"browser, same-origin", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": srv.URL}, false},
		{"base URL origin behind a proxy", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://enclave.test"}, false},
		{"non-browser client", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(tt.headers)
			if got := resp.StatusCode == http.StatusForbidden; got != tt.refused {
				t.Fatalf("status %d, refused=%v; want refused=%v", resp.StatusCode, got, tt.refused)
			}
			if tt.refused {
				checkSecurityHeaders(t, "403", resp.Header, false)
			}
		})
	}
}

func TestClientIP(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		remote  string
		xff     []string
		want    string
	}{
		{"no proxies: the peer", nil, "203.0.113.5:1234", []string{"198.51.100.1"}, "203.0.113.5"},
		{"untrusted peer: header ignored", proxies, "203.0.113.5:1234", []string{"198.51.100.1"}, "203.0.113.5"},
		{"trusted peer: last hop", proxies, "10.1.2.3:443", []string{"198.51.100.1"}, "198.51.100.1"},
		{"spoofed left entries ignored", proxies, "10.1.2.3:443", []string{"1.2.3.4, 198.51.100.1"}, "198.51.100.1"},
		{"chain of trusted proxies", proxies, "10.1.2.3:443", []string{"198.51.100.1, 10.9.9.9", "10.8.8.8"}, "198.51.100.1"},
		{"garbage stops at last trusted hop", proxies, "10.1.2.3:443", []string{"nonsense"}, "10.1.2.3"},
		{"trusted peer, no header", proxies, "10.1.2.3:443", nil, "10.1.2.3"},
		{"ipv4-mapped peer", nil, "[::ffff:203.0.113.5]:1", nil, "203.0.113.5"},
		{"ipv6 peer", proxies, "[fd00::1]:443", []string{"2001:db8::7"}, "2001:db8::7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tt.remote
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			got := (&ClientIP{TrustedProxies: tt.trusted}).Addr(r)
			if got.String() != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
	if got := clientBucket(netip.MustParseAddr("2001:db8:1:2:3:4:5:6")); got != "2001:db8:1:2::/64" {
		t.Fatalf("ipv6 bucket %s", got)
	}
}

// The credential limiter answers 429 with Retry-After once the shared
// per-client bucket is spent, whichever credential endpoint is hit, and
// counts clients behind a trusted proxy by their own address.
func TestLimitCredentials(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		clock := newFakeClock()
		h := newTestHandler(t, s, func(o *Options) {
			o.Now = clock.Now
			o.CredentialLimit = Limit{Requests: 4, Window: time.Minute}
			o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		})
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
		mux := http.NewServeMux()
		mux.Handle("/one", h.LimitCredentials(ok))
		mux.Handle("/two", h.LimitCredentials(ok))
		srv := serve(t, mux)
		do := func(method, path, client string) *http.Response {
			req, _ := http.NewRequest(method, srv.URL+path, nil)
			req.Header.Set("X-Forwarded-For", client)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
		// GET is never counted.
		for range 10 {
			if resp := do(http.MethodGet, "/one", "198.51.100.1"); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("GET: %d", resp.StatusCode)
			}
		}
		for i, path := range []string{"/one", "/two", "/one", "/two"} {
			if resp := do(http.MethodPost, path, "198.51.100.1"); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("POST %d: %d", i, resp.StatusCode)
			}
		}
		clock.Advance(15 * time.Second)
		for _, path := range []string{"/one", "/two"} {
			resp := do(http.MethodPost, path, "198.51.100.1")
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("POST %s over the limit: %d", path, resp.StatusCode)
			}
			if got := resp.Header.Get("Retry-After"); got != "45" {
				t.Fatalf("Retry-After %q, want 45", got)
			}
			checkSecurityHeaders(t, "429", resp.Header, false)
		}
		// Another client has its own bucket.
		if resp := do(http.MethodPost, "/one", "198.51.100.2"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("other client: %d", resp.StatusCode)
		}
		clock.Advance(45 * time.Second)
		if resp := do(http.MethodPost, "/one", "198.51.100.1"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("after the window: %d", resp.StatusCode)
		}
	})
}

func TestProductionFailsClosed(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	smtpMailer, err := NewSMTPMailer(SMTPConfig{Addr: "smtp.example.com:587", From: "noreply@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	acc := newAccounts(t, s, nil)
	good := Options{Store: s, Accounts: acc, Production: true, BaseURL: "https://enclave.example", Mailer: smtpMailer, SessionKeysPersistent: true}
	tests := []struct {
		name    string
		edit    func(*Options)
		wantErr string
	}{
		{"all set", func(*Options) {}, ""},
		{"http base URL", func(o *Options) { o.BaseURL = "http://enclave.example" }, "not https"},
		{"default base URL", func(o *Options) { o.BaseURL = "" }, "not https"},
		{"dev routes", func(o *Options) { o.DevRoutes = true }, "development routes"},
		{"no mailer", func(o *Options) { o.Mailer = nil }, "no mailer"},
		{"dev mailer", func(o *Options) { o.Mailer = NewDevMailer(nil) }, "development mailer"},
		{"ephemeral session keys", func(o *Options) { o.SessionKeysPersistent = false }, "session keys"},
		{"no store", func(o *Options) { o.Store = nil }, "Store is required"},
		{"no accounts", func(o *Options) { o.Accounts = nil }, "Accounts is required"},
		{"bad base URL", func(o *Options) { o.BaseURL = "https://enclave.example/?q=1" }, "base URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := good
			tt.edit(&o)
			h, err := New(o)
			if h != nil {
				t.Cleanup(func() { h.Close(context.Background()) })
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

// Development and maintenance paths answer 404 JSON unless they are a
// registered development route, and always in production.
func TestDevAndMaintenancePaths(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	dev := newTestHandler(t, s, nil)
	devProxied := newTestHandler(t, s, func(o *Options) { o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} })
	mailer, _ := NewSMTPMailer(SMTPConfig{Addr: "smtp.example.com:587", From: "noreply@example.com"})
	prod, err := New(Options{Store: s, Accounts: newAccounts(t, s, nil), Logger: quietLogger(), Production: true, BaseURL: "https://enclave.example", Mailer: mailer, SessionKeysPersistent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prod.Close(context.Background()) })
	tests := []struct {
		h      *Handler
		name   string
		method string
		path   string
		status int
		json   bool
		remote string // RemoteAddr; default a loopback client
		xff    string
		host   string // Host; default localhost:8080
	}{
		{dev, "dev mailbox in development", "GET", "/dev/mail", 200, false, "", "", ""},
		{dev, "dev mailbox over IPv6 loopback", "GET", "/dev/mail", 200, false, "[::1]:5555", "", ""},
		{dev, "dev mailbox from another machine", "GET", "/dev/mail", 404, true, "192.0.2.7:5555", "", ""},
		{dev, "dev mailbox from a private network", "GET", "/dev/mail", 404, true, "10.1.2.3:5555", "", ""},
		{devProxied, "dev mailbox through a local proxy for a remote client", "GET", "/dev/mail", 404, true, "127.0.0.1:5555", "198.51.100.9", ""},
		{devProxied, "dev mailbox through a local proxy for a local client", "GET", "/dev/mail", 200, false, "127.0.0.1:5555", "127.0.0.1", ""},
		{dev, "dev mailbox by the base URL's host", "GET", "/dev/mail", 200, false, "", "", "enclave.test"},
		{dev, "dev mailbox by a loopback address", "GET", "/dev/mail", 200, false, "", "", "127.0.0.1:8080"},
		{dev, "dev mailbox by IPv6 loopback", "GET", "/dev/mail", 200, false, "", "", "[::1]:8080"},
		{dev, "dev mailbox by a rebound host name", "GET", "/dev/mail", 404, true, "", "", "attacker.example:8080"},
		{dev, "dev mailbox by a host name ending in localhost", "GET", "/dev/mail", 404, true, "", "", "localhost.attacker.example"},
		{dev, "dev mailbox through an untrusted local tunnel", "GET", "/dev/mail", 404, true, "", "198.51.100.9", ""},
		{dev, "dev mailbox through an untrusted tunnel naming loopback", "GET", "/dev/mail", 404, true, "", "127.0.0.1", ""},
		{dev, "unknown dev path", "GET", "/dev/nothing", 404, true, "", "", ""},
		{dev, "dev root", "GET", "/dev", 404, true, "", "", ""},
		{dev, "post to dev mailbox", "POST", "/dev/mail", 404, true, "", "", ""},
		{dev, "debug path", "GET", "/debug/pprof/", 404, true, "", "", ""},
		{dev, "maintenance path", "POST", "/maintenance/purge", 404, true, "", "", ""},
		{prod, "dev mailbox in production", "GET", "/dev/mail", 404, true, "", "", ""},
		{prod, "unknown dev path in production", "GET", "/dev/x", 404, true, "", "", ""},
		{prod, "maintenance in production", "GET", "/maintenance", 404, true, "", "", ""},
		{prod, "ordinary unknown page", "GET", "/nope", 404, false, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			req := httptest.NewRequest(tt.method, tt.path, nil)
			req.RemoteAddr = cmp.Or(tt.remote, "127.0.0.1:5555")
			req.Host = cmp.Or(tt.host, "localhost:8080")
			if tt.xff != "" {
				req.Header.Set("X-Forwarded-For", tt.xff)
			}
			tt.h.ServeHTTP(w, req)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d", w.Code, tt.status)
			}
			isJSON := w.Header().Get("Content-Type") == "application/json"
			if isJSON != tt.json {
				t.Fatalf("Content-Type %q, want JSON=%v", w.Header().Get("Content-Type"), tt.json)
			}
			if isJSON {
				var body jsonError
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error != "not_found" {
					t.Fatalf("body %q: %v", w.Body.String(), err)
				}
			}
		})
	}
}

func TestDevMailbox(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	h := newTestHandler(t, s, nil)
	link := h.absURL("/verify-email", url.Values{"token": {"abc<def"}})
	if err := h.Mailer().Send(t.Context(), Message{To: "ann@example.com", Subject: "Hello <b>", Text: "Open " + link + "\n"}); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/dev/mail", nil)
	req.RemoteAddr = "127.0.0.1:5555"
	req.Host = "localhost:8080"
	h.ServeHTTP(w, req)
	body := w.Body.String()
	if !strings.Contains(body, "ann@example.com") || !strings.Contains(body, "Hello &lt;b&gt;") {
		t.Fatalf("mailbox does not show the message (escaped):\n%s", body)
	}
	if !strings.Contains(body, `class="mail-link" href="http://enclave.test/verify-email?token=abc%3Cdef"`) {
		t.Fatalf("mailbox does not link the message's link:\n%s", body)
	}
	if m, ok := h.DevMail().Last("ANN@example.com"); !ok || m.Subject != "Hello <b>" {
		t.Fatalf("Last: %+v %v", m, ok)
	}
}
