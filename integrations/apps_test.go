package integrations_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/internal/egress"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// recorder is an Auditor keeping every event.
type recorder struct {
	mu     sync.Mutex
	events []audit.Event
}

func (r *recorder) Record(_ context.Context, e audit.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	return nil
}

func (r *recorder) HashUser(id string) string { return "h-" + id[:8] }

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, _ := json.Marshal(r.events)
	return string(b)
}

// newAppService is a service whose people's own apps may use plain http
// on loopback (allowLoop, as tests' fake providers are), with the
// operator's providers ps.
func newAppService(t testing.TB, s *storage.Store, allowLoop bool, rec *recorder, ps ...integrations.Provider) *integrations.Service {
	t.Helper()
	ring, err := envelope.Open(context.Background(), s.DB, s.Keeper)
	if err != nil {
		t.Fatal(err)
	}
	cfg := integrations.Config{Options: integrations.Options{Providers: ps, AllowLoopbackHTTP: allowLoop}, Store: s, Ring: ring,
		Owners: owners, BaseURL: "https://enclave.example", Logger: quiet()}
	if rec != nil {
		cfg.Audit = rec
	}
	svc, err := integrations.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// appInput is the fake provider f as a person's own app called name.
func appInput(f *fakeProvider, name string, discover bool) integrations.AppInput {
	in := integrations.AppInput{Name: name, ClientID: clientID, ClientSecret: clientSecret, Scopes: []string{"read write"},
		APIHosts: []string{"api.acme.example"}}
	if discover {
		in.Issuer = f.srv.URL
	} else {
		in.AuthURL, in.TokenURL, in.RevokeURL = f.srv.URL+"/authorize", f.srv.URL+"/token", f.srv.URL+"/revoke"
	}
	return in
}

// authorizeApp plays the browser at the provider for a flow started at
// the app called app, and returns the callback's query.
func authorizeApp(t testing.TB, authURL, app string) url.Values {
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
	if loc.Host != "enclave.example" || loc.Path != integrations.AppCallbackPath+"/"+app {
		t.Fatalf("callback %s is not the app's redirect URI", loc)
	}
	return loc.Query()
}

func TestAppConnectUseRemove(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		for _, discover := range []bool{false, true} {
			f := newFakeProvider(t)
			rec := &recorder{}
			svc := newAppService(t, s, true, rec)
			alice := addUser(t, s, fmt.Sprint("alice-", discover))
			app, err := svc.AddApp(t.Context(), ownerOf(alice), appInput(f, "mine", discover))
			if err != nil {
				t.Fatal(err)
			}
			if app.Name != "mine" || app.AuthURL != f.srv.URL+"/authorize" || app.TokenURL != f.srv.URL+"/token" || app.RevokeURL != f.srv.URL+"/revoke" ||
				!app.HasSecret || !slices.Equal(app.Scopes, []string{"read", "write"}) || !slices.Equal(app.APIHosts, []string{"api.acme.example"}) ||
				app.RedirectURI != "https://enclave.example"+integrations.AppCallbackPath+"/mine" {
				t.Fatalf("app: %+v", app)
			}
			u, err := svc.StartApp(t.Context(), ownerOf(alice), "mine", "", binding)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(u, "code_challenge_method=S256") || !strings.Contains(u, url.QueryEscape(app.RedirectURI)) {
				t.Fatalf("authorization URL: %s", u)
			}
			q := authorizeApp(t, u, "mine")
			conn, err := svc.Finish(t.Context(), ownerOf(alice), binding, integrations.Callback{App: "mine", State: q.Get("state"), Code: q.Get("code")})
			if err != nil {
				t.Fatal(err)
			}
			if conn.Name != "mine" || conn.Provider != "mine" || !conn.OwnApp || conn.Status != integrations.StatusActive {
				t.Fatalf("connection: %+v", conn)
			}
			token := f.lastAccessToken()
			use, err := svc.Use(t.Context(), ownerOf(alice), "mine")
			if err != nil || use.AccessToken != token || !slices.Equal(use.APIHosts, []string{"api.acme.example"}) {
				t.Fatalf("use: %+v %v", use, err)
			}
			// The secret is sealed: no column holds it.
			var rows []map[string]any
			if err := s.DB.NewSelect().Table("integration_apps").Where("user_id = ?", alice.OwnerID).Scan(t.Context(), &rows); err != nil || len(rows) != 1 {
				t.Fatalf("rows: %v %v", rows, err)
			}
			if strings.Contains(fmt.Sprint(rows), clientSecret) {
				t.Fatal("the client secret is stored in clear")
			}
			// Neither the list, the export nor the audit shows the secret.
			list, err := svc.ListApps(t.Context(), ownerOf(alice))
			if err != nil || len(list) != 1 {
				t.Fatalf("list: %+v %v", list, err)
			}
			page, err := storage.ExportRows(t.Context(), s.DB, storage.Table{Name: "integration_apps", OwnerColumn: "user_id", KeyColumn: "id",
				Redact: []string{"client_secret_ciphertext", "key_id"}}, ownerOf(alice), storage.PageRequest{Limit: 10})
			if err != nil || len(page.Items) != 1 || page.Items[0]["client_id"] != clientID || page.Items[0]["client_secret_ciphertext"] != storage.RedactedValue {
				t.Fatalf("export: %+v %v", page, err)
			}
			for what, v := range map[string]string{"list": fmt.Sprint(list), "export": fmt.Sprint(page.Items), "audit": rec.String()} {
				if strings.Contains(v, clientSecret) || strings.Contains(v, token) {
					t.Fatalf("the %s holds the secret or the token: %s", what, v)
				}
			}
			if !strings.Contains(rec.String(), "connection_app_add") {
				t.Fatal("adding an app is not audited")
			}
			// Removing the app disconnects its connections, revoking their
			// tokens at the provider first.
			rm, err := svc.RemoveApp(t.Context(), ownerOf(alice), "mine")
			if err != nil || !rm.Removed || !rm.Revoked || !slices.Equal(rm.Disconnected, []string{"mine"}) {
				t.Fatalf("remove: %+v %v", rm, err)
			}
			if rev := f.revocations(); len(rev) != 2 || rev[1] != token {
				t.Fatalf("revoked: %v", rev)
			}
			if _, err := svc.Use(t.Context(), ownerOf(alice), "mine"); !errors.Is(err, integrations.ErrNotFound) {
				t.Fatalf("use after the app's removal: %v", err)
			}
			if cs, _ := svc.List(t.Context(), ownerOf(alice)); len(cs) != 0 {
				t.Fatalf("connections left: %+v", cs)
			}
		}
	})
}

// Through the registry: adding an app is for the person's web session
// only; bob cannot list, start with, finish into, use or remove alice's
// app, and a callback on another app's path is refused.
func TestAppCapabilities(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeProvider(t)
		rec := &recorder{}
		svc := newAppService(t, s, true, rec)
		reg := capabilities.NewRegistry(capabilities.Options{Logger: quiet()})
		if err := reg.Register(svc.Capabilities()...); err != nil {
			t.Fatal(err)
		}
		alice, bob := addUser(t, s, "alice"), addUser(t, s, "bob")
		web, bobWeb := alice, bob
		web.Session, bobWeb.Session = true, true

		if _, err := invoke[integrations.App](t, reg, alice, "connectionAppAdd", appInput(f, "mine", false)); err == nil {
			t.Fatal("an agent added an app")
		}
		app, err := invoke[integrations.App](t, reg, web, "connectionAppAdd", appInput(f, "mine", false))
		if err != nil || app.Name != "mine" {
			t.Fatalf("add: %+v %v", app, err)
		}
		if _, err := invoke[integrations.App](t, reg, web, "connectionAppAdd", appInput(f, "other", false)); err != nil {
			t.Fatal(err)
		}
		var ce *capabilities.Error
		if _, err := invoke[integrations.App](t, reg, web, "connectionAppAdd", appInput(f, "mine", false)); !errors.As(err, &ce) || ce.Code != capabilities.CodeConflict {
			t.Fatalf("a second app of the same name: %v", err)
		}
		list, err := invoke[integrations.AppListOutput](t, reg, alice, "connectionAppList", struct{}{})
		if err != nil || len(list.Apps) != 2 || list.RedirectURIBase != "https://enclave.example"+integrations.AppCallbackPath+"/" {
			t.Fatalf("alice's apps: %+v %v", list, err)
		}
		if b, _ := json.Marshal(list); strings.Contains(string(b), clientSecret) {
			t.Fatal("connectionAppList shows the secret")
		}
		if list, err := invoke[integrations.AppListOutput](t, reg, bob, "connectionAppList", struct{}{}); err != nil || len(list.Apps) != 0 {
			t.Fatalf("bob's apps: %+v %v", list, err)
		}
		// Bob cannot start a flow with alice's app.
		if _, err := invoke[integrations.StartOutput](t, reg, bobWeb, "connectionConnectStart", integrations.StartInput{App: "mine", Binding: binding}); !errors.As(err, &ce) || ce.Code != capabilities.CodeInvalidInput {
			t.Fatalf("bob starts with alice's app: %v", err)
		}
		// Alice's flow, finished in bob's session (state fixation): refused.
		start := func() url.Values {
			out, err := invoke[integrations.StartOutput](t, reg, web, "connectionConnectStart", integrations.StartInput{App: "mine", Binding: binding})
			if err != nil {
				t.Fatal(err)
			}
			return authorizeApp(t, out.AuthorizationURL, "mine")
		}
		q := start()
		if _, err := invoke[integrations.Connection](t, reg, bobWeb, "connectionConnectFinish", integrations.FinishInput{Binding: binding, App: "mine", State: q.Get("state"), Code: q.Get("code")}); err == nil {
			t.Fatal("bob finished alice's flow")
		}
		// A callback on another app's path, or on a provider's: refused.
		for _, cb := range []integrations.FinishInput{{App: "other"}, {Provider: "mine"}} {
			q = start()
			cb.Binding, cb.State, cb.Code = binding, q.Get("state"), q.Get("code")
			if _, err := invoke[integrations.Connection](t, reg, web, "connectionConnectFinish", cb); err == nil {
				t.Fatalf("finished on another path: %+v", cb)
			}
		}
		// Naming both a provider and an app is refused.
		if _, err := invoke[integrations.StartOutput](t, reg, web, "connectionConnectStart", integrations.StartInput{App: "mine", Provider: "x", Binding: binding}); err == nil {
			t.Fatal("started with a provider and an app")
		}
		q = start()
		conn, err := invoke[integrations.Connection](t, reg, web, "connectionConnectFinish", integrations.FinishInput{Binding: binding, App: "mine", State: q.Get("state"), Code: q.Get("code")})
		if err != nil || !conn.OwnApp {
			t.Fatalf("finish: %+v %v", conn, err)
		}
		if _, err := svc.Use(t.Context(), ownerOf(bob), "mine"); !errors.Is(err, integrations.ErrNotFound) {
			t.Fatalf("bob uses alice's connection: %v", err)
		}
		if _, err := invoke[integrations.AppRemoved](t, reg, bob, "connectionAppRemove", integrations.AppNameInput{Name: "mine"}); !errors.As(err, &ce) || ce.Code != capabilities.CodeNotFound {
			t.Fatalf("bob removes alice's app: %v", err)
		}
		if _, err := svc.Use(t.Context(), ownerOf(alice), "mine"); err != nil || len(f.revocations()) != 0 {
			t.Fatalf("bob's attempt touched alice's connection: %v %v", err, f.revocations())
		}
		// An agent may remove its person's app.
		rm, err := invoke[integrations.AppRemoved](t, reg, alice, "connectionAppRemove", integrations.AppNameInput{Name: "mine"})
		if err != nil || !rm.Removed || len(rm.Disconnected) != 1 {
			t.Fatalf("remove: %+v %v", rm, err)
		}
		if strings.Contains(rec.String(), clientSecret) {
			t.Fatal("an audit event holds the secret")
		}
	})
}

// An app's endpoints and API hosts must be public https: private
// addresses, local names, plain http, credentials in a URL and wildcards
// over public suffixes are refused before anything is fetched, and an
// app cannot take an operator provider's name.
func TestAppValidation(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	f := newFakeProvider(t)
	svc := newAppService(t, s, false, nil, provider(f, false))
	alice := addUser(t, s, "alice")
	good := func() integrations.AppInput {
		return integrations.AppInput{Name: "mine", AuthURL: "https://auth.example.com/authorize", TokenURL: "https://auth.example.com/token",
			ClientID: "cid", ClientSecret: "sec", APIHosts: []string{"api.example.com"}}
	}
	for name, mod := range map[string]func(*integrations.AppInput){
		"operator's name":     func(in *integrations.AppInput) { in.Name = "acme" },
		"bad name":            func(in *integrations.AppInput) { in.Name = "Mine!" },
		"no client id":        func(in *integrations.AppInput) { in.ClientID = "" },
		"no endpoints":        func(in *integrations.AppInput) { in.AuthURL, in.TokenURL = "", "" },
		"plain http":          func(in *integrations.AppInput) { in.TokenURL = "http://auth.example.com/token" },
		"loopback http":       func(in *integrations.AppInput) { in.TokenURL = "http://127.0.0.1:9/token" },
		"loopback":            func(in *integrations.AppInput) { in.TokenURL = "https://127.0.0.1/token" },
		"private":             func(in *integrations.AppInput) { in.TokenURL = "https://10.1.2.3/token" },
		"metadata address":    func(in *integrations.AppInput) { in.RevokeURL = "https://169.254.169.254/latest" },
		"mapped v6":           func(in *integrations.AppInput) { in.TokenURL = "https://[::ffff:127.0.0.1]/token" },
		"localhost":           func(in *integrations.AppInput) { in.TokenURL = "https://localhost/token" },
		"single label":        func(in *integrations.AppInput) { in.TokenURL = "https://vm/token" },
		"internal name":       func(in *integrations.AppInput) { in.Issuer = "https://metadata.google.internal" },
		"credentials":         func(in *integrations.AppInput) { in.AuthURL = "https://u:p@auth.example.com/authorize" },
		"no hosts":            func(in *integrations.AppInput) { in.APIHosts = nil },
		"host wildcard tld":   func(in *integrations.AppInput) { in.APIHosts = []string{"*.com"} },
		"host public suffix":  func(in *integrations.AppInput) { in.APIHosts = []string{"*.co.uk"} },
		"host private ip":     func(in *integrations.AppInput) { in.APIHosts = []string{"10.0.0.1"} },
		"host metadata":       func(in *integrations.AppInput) { in.APIHosts = []string{"169.254.169.254"} },
		"host loopback":       func(in *integrations.AppInput) { in.APIHosts = []string{"127.0.0.1:8443"} },
		"host localhost":      func(in *integrations.AppInput) { in.APIHosts = []string{"localhost"} },
		"host local wildcard": func(in *integrations.AppInput) { in.APIHosts = []string{"*.svc.local"} },
		"host url":            func(in *integrations.AppInput) { in.APIHosts = []string{"https://api.example.com/"} },
		"bad scope":           func(in *integrations.AppInput) { in.Scopes = []string{`a"b`} },
	} {
		in := good()
		mod(&in)
		_, err := svc.AddApp(t.Context(), ownerOf(alice), in)
		var ce *capabilities.Error
		if !errors.As(err, &ce) || ce.Code != capabilities.CodeInvalidInput || ce.Message == "" {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := svc.AddApp(t.Context(), ownerOf(alice), good()); err != nil {
		t.Fatalf("a good app: %v", err)
	}
	if apps, _ := svc.ListApps(t.Context(), ownerOf(alice)); len(apps) != 1 {
		t.Fatalf("apps: %+v", apps)
	}
}

// Discovery: endpoints an issuer's metadata names are checked like the
// person's own (a metadata document pointing the token endpoint at a
// private address is refused); and the exchanges go through the egress
// client, which refuses a loopback https server even when loopback http
// is allowed for tests.
func TestAppSSRF(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	alice := addUser(t, s, "alice")
	var md *httptest.Server
	md = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": md.URL, "authorization_endpoint": "https://auth.example.com/a",
			"token_endpoint": "https://169.254.169.254/token"})
	}))
	t.Cleanup(md.Close)
	svc := newAppService(t, s, true, nil)
	_, err := svc.AddApp(t.Context(), ownerOf(alice), integrations.AppInput{Name: "evil", Issuer: md.URL, ClientID: "c", APIHosts: []string{"api.example.com"}})
	var ce *capabilities.Error
	if !errors.As(err, &ce) || !strings.Contains(ce.Message, "discovered token URL") {
		t.Fatalf("discovered private token endpoint: %v", err)
	}
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("the app client reached loopback") }))
	t.Cleanup(tls.Close)
	for _, allow := range []bool{false, true} {
		_, err := newAppService(t, s, allow, nil).AppClient().Get(tls.URL)
		if !errors.Is(err, egress.ErrForbiddenAddress) {
			t.Fatalf("allowLoop=%v: the app client to a loopback https server: %v", allow, err)
		}
	}
}

// A connection to an own app is renewed by the lane and revoked at the
// account's deletion like one to a provider, through the app's endpoints
// and secret.
func TestAppRefreshAndRevokeAll(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeProvider(t)
		f.ttl = time.Minute // inside RefreshBefore: due at once
		svc := newAppService(t, s, true, nil)
		alice := addUser(t, s, "alice")
		if _, err := svc.AddApp(t.Context(), ownerOf(alice), appInput(f, "mine", true)); err != nil {
			t.Fatal(err)
		}
		u, err := svc.StartApp(t.Context(), ownerOf(alice), "mine", "work", binding)
		if err != nil {
			t.Fatal(err)
		}
		q := authorizeApp(t, u, "mine")
		if _, err := svc.Finish(t.Context(), ownerOf(alice), binding, integrations.Callback{App: "mine", State: q.Get("state"), Code: q.Get("code")}); err != nil {
			t.Fatal(err)
		}
		first := f.lastAccessToken()
		if n, err := svc.RefreshDue(t.Context(), 10); err != nil || n != 1 || f.lastAccessToken() == first {
			t.Fatalf("refresh: %d %v", n, err)
		}
		if err := svc.RevokeAll(t.Context(), ownerOf(alice)); err != nil {
			t.Fatal(err)
		}
		if rev := f.revocations(); len(rev) != 2 || rev[1] != f.lastAccessToken() {
			t.Fatalf("revocations: %v", rev)
		}
	})
}
