package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/web"
)

func TestAccountExportJSON(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, storage.SQLite)
	cookies := map[string]*http.Cookie{}
	for _, name := range []string{"alice", "bob"} {
		_, cookies[name] = signedIn(t, srv, name)
	}
	get := func(c *http.Cookie) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/account/export.json", nil)
		if c != nil {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec
	}
	if rec := get(nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("anonymous: %d", rec.Code)
	}
	rec := get(cookies["bob"])
	if rec.Code != 200 || !strings.Contains(rec.Header().Get("Content-Disposition"), "attachment") {
		t.Fatalf("bob: %d %v", rec.Code, rec.Header())
	}
	var m struct {
		SchemaVersion int `json:"schemaVersion"`
		User          struct {
			Username string `json:"username"`
		} `json:"user"`
		Security struct {
			SecretValuesExported bool `json:"secretValuesExported"`
		} `json:"security"`
		Sections []struct {
			Name  string `json:"name"`
			Count int    `json:"count"`
		} `json:"sections"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m.SchemaVersion != 1 || m.User.Username != "bob" || m.Security.SecretValuesExported || len(m.Sections) == 0 {
		t.Fatalf("bob's manifest: %s", rec.Body)
	}
	if strings.Contains(rec.Body.String(), "alice") {
		t.Fatal("bob's manifest mentions alice")
	}
	// Byte for byte what the lifecycle's manifest encodes to (the time
	// it was generated aside), with the same download headers.
	var got lifecycle.Manifest
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	bob, err := srv.Accounts().Identity.UserByUsername(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	want, err := srv.Lifecycle().Manifest(ctx, storage.Owner{ID: bob.ID, StableID: bob.StableID})
	if err != nil {
		t.Fatal(err)
	}
	want.GeneratedAt = got.GeneratedAt
	var wantBody bytes.Buffer
	enc := json.NewEncoder(&wantBody)
	enc.SetIndent("", "  ")
	if err := enc.Encode(want); err != nil {
		t.Fatal(err)
	}
	if rec.Body.String() != wantBody.String() {
		t.Fatalf("bob's manifest differs from the lifecycle's:\n%s\nwant:\n%s", rec.Body, wantBody.String())
	}
	for k, v := range map[string]string{"Content-Type": "application/json", "Content-Disposition": `attachment; filename="enclave-export-manifest.json"`, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"} {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if rec.Header().Get("Content-Security-Policy") == "" {
		t.Error("no security headers")
	}
	forged := *cookies["bob"]
	forged.Value = strings.Replace(forged.Value, "a", "b", 1)
	if rec := get(&forged); rec.Code != http.StatusUnauthorized {
		t.Fatalf("forged cookie: %d", rec.Code)
	}

	// A suspended account's call reaches the registry, which refuses it
	// and records the denial; the answer is the 403 it always was.
	alice, err := srv.Accounts().Identity.UserByUsername(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Accounts().Lifecycle.Suspend(ctx, alice.ID); err != nil {
		t.Fatal(err)
	}
	denials := func() []audit.Event {
		page, err := srv.Audit().Query(ctx, audit.Filter{Category: "capability", Result: "denied", UserHash: srv.Audit().HashUser(alice.StableID)}, storage.PageRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return page.Items
	}
	if d := denials(); len(d) != 0 {
		t.Fatalf("denials before the call: %+v", d)
	}
	rec = get(cookies["alice"])
	if rec.Code != http.StatusForbidden || strings.TrimSpace(rec.Body.String()) != `{"error":"forbidden","message":"This account is suspended."}` {
		t.Fatalf("suspended alice: %d %s", rec.Code, rec.Body)
	}
	d := denials()
	if len(d) != 1 || d[0].Action != "tool:accountExportManifest" || d[0].Reason != "account_suspended" {
		t.Fatalf("the suspended call's audit rows: %+v", d)
	}
}

// Open registration is rate limited per client network, with an OAuth-style
// 429 and Retry-After.
func TestRegistrationIsRateLimited(t *testing.T) {
	srv := newServer(t, storage.SQLite, func(c *enclave.Config) { c.RegistrationLimit = web.Limit{Requests: 2, Window: time.Hour} })
	register := func(remote string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/oauth/register", strings.NewReader(`{"client_name":"a","redirect_uris":["http://127.0.0.1:1234/cb"],"token_endpoint_auth_method":"none"}`))
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec
	}
	for i := range 2 {
		if rec := register("192.0.2.7:1000"); rec.Code != http.StatusCreated {
			t.Fatalf("registration %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	rec := register("192.0.2.7:2000")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), `"error":"slow_down"`) {
		t.Fatalf("third registration: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	// Another network is not affected; an IPv6 /64 is one bucket.
	if rec := register("198.51.100.1:1000"); rec.Code != http.StatusCreated {
		t.Fatalf("another address: %d", rec.Code)
	}
	register("[2001:db8::1]:1000")
	register("[2001:db8::2]:1000")
	if rec := register("[2001:db8::3]:1000"); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("third registration from one /64: %d", rec.Code)
	}
}

// The registration limit finds the client under the same trusted-proxy rule
// as the web shell: behind a trusted proxy, the forwarded address is the
// bucket, not the proxy.
func TestRegistrationLimitTrustsTheSameProxies(t *testing.T) {
	srv := newServer(t, storage.SQLite, func(c *enclave.Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		c.RegistrationLimit = web.Limit{Requests: 1, Window: time.Hour}
	})
	register := func(remote, forwarded string) int {
		req := httptest.NewRequest("POST", "/oauth/register", strings.NewReader(`{"client_name":"a","redirect_uris":["http://127.0.0.1:1234/cb"],"token_endpoint_auth_method":"none"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", forwarded)
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec.Code
	}
	if code := register("10.0.0.1:1000", "192.0.2.7"); code != http.StatusCreated {
		t.Fatalf("first client through the proxy: %d", code)
	}
	if code := register("10.0.0.1:1000", "198.51.100.1"); code != http.StatusCreated {
		t.Fatalf("second client through the same proxy: %d", code)
	}
	if code := register("10.0.0.2:1000", "192.0.2.7"); code != http.StatusTooManyRequests {
		t.Fatalf("first client again, through another proxy: %d", code)
	}
	// An untrusted peer's forwarded header is ignored: the peer is the bucket.
	if code := register("203.0.113.5:1000", "192.0.2.99"); code != http.StatusCreated {
		t.Fatalf("untrusted peer: %d", code)
	}
	if code := register("203.0.113.5:1000", "192.0.2.100"); code != http.StatusTooManyRequests {
		t.Fatalf("untrusted peer again, another forwarded address: %d", code)
	}
}

// The connections page's app form shows a refusal it can correct again
// with the status every form gives it (formRefusal: 422 for a mistake in
// its fields), the reason, and what was typed but the secret.
func TestConnectionAppFormRefusalIs422(t *testing.T) {
	srv := newServer(t, storage.SQLite)
	_, cookie := signedIn(t, srv, "cleo")
	form := url.Values{"app_name": {"mine"}, "app_issuer": {"https://issuer.example.com"}, "app_client_id": {"client-kept"},
		"app_client_secret": {"secret-never-shown"}, "app_hosts": {"10.0.0.1"}}
	req := httptest.NewRequest("POST", "/account/connections/apps", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(cookie)
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	body := rec.Body.String()
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(body, `id="app-error"`) || !strings.Contains(body, "10.0.0.1") {
		t.Fatalf("refused app: %d\n%.2000s", rec.Code, body)
	}
	if !strings.Contains(body, "client-kept") || strings.Contains(body, "secret-never-shown") {
		t.Fatal("the form lost the client id or shows the secret")
	}
}

// A session of an account suspended while its deletion is pending
// (Authenticate answers ErrSuspended with the session) is refused by the
// registry as suspended, and the refusal audited: the export manifest does
// not run for it as it would for an account that is only being deleted.
func TestAccountExportJSONSuspendedWhileDeleting(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, storage.SQLite)
	u, cookie := signedIn(t, srv, "dora")
	if _, err := srv.Accounts().Lifecycle.MarkDeleting(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Accounts().Lifecycle.Suspend(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/account/export.json", nil)
	req.AddCookie(cookie)
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || strings.Contains(rec.Body.String(), "dora") {
		t.Fatalf("suspended, deleting dora: %d %s", rec.Code, rec.Body)
	}
	page, err := srv.Audit().Query(ctx, audit.Filter{Category: "capability", UserHash: srv.Audit().HashUser(u.StableID)}, storage.PageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var denied int
	for _, e := range page.Items {
		if e.Action != "tool:accountExportManifest" {
			continue
		}
		if e.Result != audit.ResultDenied || e.Reason != "account_suspended" {
			t.Fatalf("the manifest ran for a suspended account: %+v", e)
		}
		denied++
	}
	if denied != 1 {
		t.Fatalf("the suspended call's audit rows: %+v", page.Items)
	}
}

// signedIn signs up name (name@example.com) on srv and returns the account
// and the cookie of a session of it, as the sign-in page would set.
func signedIn(t *testing.T, srv *enclave.Server, name string) (accounts.User, *http.Cookie) {
	t.Helper()
	u, err := srv.Accounts().Identity.Signup(t.Context(), accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "a long password for " + name})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	if _, err := srv.Accounts().Credentials.StartSession(rec, httptest.NewRequest("POST", "/login", nil), u, false); err != nil {
		t.Fatal(err)
	}
	return u, rec.Result().Cookies()[0]
}
