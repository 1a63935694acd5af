package web_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/web"
)

const guardPassword = "guard test passphrase"

type guardFixture struct {
	svc    *accounts.Service
	guards *web.Guards
	store  *storage.Store
}

func newGuardFixture(t *testing.T, s *storage.Store) *guardFixture {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := accounts.New(context.Background(), s, accounts.Config{
		Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &guardFixture{svc: svc, store: s, guards: web.NewGuards(svc, web.GuardOptions{Logger: quiet})}
}

func (f *guardFixture) user(t *testing.T, name string, roles ...string) (accounts.User, *http.Cookie) {
	t.Helper()
	ctx := context.Background()
	u, err := f.svc.Identity.Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: guardPassword})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roles {
		if _, err := assignOrGrant(f.svc, ctx, u.ID, r); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	if _, err := f.svc.Credentials.StartSession(rec, httptest.NewRequest(http.MethodGet, "/", nil), u, false); err != nil {
		t.Fatal(err)
	}
	return u, rec.Result().Cookies()[0]
}

// okHandler answers 200 with the principal's username.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	p := web.PrincipalFrom(r.Context())
	if p == nil {
		http.Error(w, "no principal", http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, p.Session.User.Username)
})

func guardRequest(h http.Handler, target, accept string, c *http.Cookie) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	if c != nil {
		r.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func TestGuardsSignedOut(t *testing.T) {
	f := newGuardFixture(t, storagetest.Open(t, storage.SQLite))
	h := f.guards.RequireUser(okHandler)
	for _, tc := range []struct {
		name, target, accept string
		wantJSON             bool
		wantRedirectTo       string
	}{
		{"browser", "/account/settings?tab=2", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", false, "/account/settings?tab=2"},
		{"fetch json", "/account.json", "application/json", true, ""},
		{"json preferred by q", "/x", "text/html;q=0.5, application/json", true, ""},
		{"html preferred by q", "/x", "application/json;q=0.4, text/html", false, "/x"},
		{"problem+json", "/x", "application/problem+json", true, ""},
		{"wildcard only", "/x", "*/*", false, "/x"},
		{"no accept", "/x", "", false, "/x"},
		{"protocol-relative path", "//evil.example/steal", "text/html", false, "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := guardRequest(h, tc.target, tc.accept, nil)
			if tc.wantJSON {
				var body map[string]string
				if rec.Code != http.StatusUnauthorized || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body["error"] != "unauthenticated" {
					t.Fatalf("got %d %q, want 401 JSON", rec.Code, rec.Body.String())
				}
				return
			}
			if rec.Code != http.StatusSeeOther {
				t.Fatalf("got %d, want a redirect", rec.Code)
			}
			loc, err := url.Parse(rec.Header().Get("Location"))
			if err != nil || loc.Path != "/login" || loc.Host != "" {
				t.Fatalf("Location %q", rec.Header().Get("Location"))
			}
			if got := loc.Query().Get("redirectTo"); got != tc.wantRedirectTo {
				t.Fatalf("redirectTo %q, want %q", got, tc.wantRedirectTo)
			}
		})
	}
	// A forged cookie is no session, and is cleared.
	rec := guardRequest(h, "/x", "application/json", &http.Cookie{Name: accounts.SessionCookieName, Value: "s1.k00.abc.1.0.AAAA"})
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("forged cookie: %d", rec.Code)
	}
	if cs := rec.Result().Cookies(); len(cs) != 1 || cs[0].Name != accounts.SessionCookieName || cs[0].MaxAge >= 0 {
		t.Fatalf("forged cookie not cleared: %+v", cs)
	}
	// The login path is configurable (a site under a path prefix).
	prefixed := web.NewGuards(f.svc, web.GuardOptions{LoginPath: "/enclave/login"}).RequireUser(okHandler)
	if loc := guardRequest(prefixed, "/enclave/account", "text/html", nil).Header().Get("Location"); loc != "/enclave/login?redirectTo=%2Fenclave%2Faccount" {
		t.Fatalf("prefixed Location %q", loc)
	}
}

func TestGuardsRolesAndPermissions(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := newGuardFixture(t, s)
		_, alice := f.user(t, "alice")
		bob, bobCookie := f.user(t, "bob", capabilities.RoleAdmin)
		f.user(t, "carol", capabilities.RoleAdmin) // so bob is not the last admin

		user := f.guards.RequireUser(okHandler)
		admin := f.guards.RequireRole(capabilities.RoleAdmin)(okHandler)
		readAny := f.guards.RequirePermission(capabilities.ReadUserAny)(okHandler)
		readOwn := f.guards.RequirePermission(capabilities.ReadUserOwn)(okHandler)
		chained := f.guards.RequireUser(f.guards.RequireRole(capabilities.RoleAdmin)(okHandler))

		for _, tc := range []struct {
			name   string
			h      http.Handler
			cookie *http.Cookie
			want   int
		}{
			{"user: require user", user, alice, 200},
			{"user: require own permission", readOwn, alice, 200},
			{"user: require admin", admin, alice, 403},
			{"user: require any permission", readAny, alice, 403},
			{"user: chained admin", chained, alice, 403},
			{"admin: require admin", admin, bobCookie, 200},
			{"admin: require any permission", readAny, bobCookie, 200},
			{"admin: chained", chained, bobCookie, 200},
		} {
			t.Run(tc.name, func(t *testing.T) {
				rec := guardRequest(tc.h, "/admin", "text/html", tc.cookie)
				if rec.Code != tc.want {
					t.Fatalf("got %d %q, want %d", rec.Code, rec.Body.String(), tc.want)
				}
			})
		}
		if rec := guardRequest(admin, "/admin.json", "application/json", alice); rec.Code != 403 || rec.Header().Get("Content-Type") != "application/json; charset=utf-8" {
			t.Fatalf("JSON 403: %d %q", rec.Code, rec.Header().Get("Content-Type"))
		}
		if rec := guardRequest(user, "/", "", bobCookie); rec.Body.String() != "bob" {
			t.Fatalf("principal is %q, want bob", rec.Body.String())
		}

		// Roles are loaded per request: a revocation applies to the very
		// next request made with the same cookie.
		if _, err := f.svc.Roles.RevokeAdminAsOperator(ctx, bob.ID); err != nil {
			t.Fatal(err)
		}
		if rec := guardRequest(admin, "/admin", "text/html", bobCookie); rec.Code != 403 {
			t.Fatalf("after revocation: %d", rec.Code)
		}

		// Suspended and deleting accounts are signed out; the cookie is
		// kept, so that it works again after an unsuspension.
		if _, err := f.svc.Lifecycle.Suspend(ctx, bob.ID); err != nil {
			t.Fatal(err)
		}
		rec := guardRequest(user, "/account", "application/json", bobCookie)
		if rec.Code != 401 {
			t.Fatalf("suspended: %d", rec.Code)
		}
		if cs := rec.Result().Cookies(); len(cs) != 0 {
			t.Fatalf("suspended: cookie changed: %+v", cs)
		}
		if _, err := f.svc.Lifecycle.Unsuspend(ctx, bob.ID); err != nil {
			t.Fatal(err)
		}
		if rec := guardRequest(user, "/account", "application/json", bobCookie); rec.Code != 200 {
			t.Fatalf("unsuspended: %d", rec.Code)
		}
		if _, err := f.svc.Lifecycle.MarkDeleting(ctx, bob.ID); err != nil {
			t.Fatal(err)
		}
		if rec := guardRequest(user, "/account", "application/json", bobCookie); rec.Code != 401 {
			t.Fatalf("deleting: %d", rec.Code)
		}

		// Fail closed: when roles cannot be loaded, the person is signed in
		// but holds nothing.
		if _, err := s.DB.ExecContext(ctx, "DROP TABLE role_permissions"); err != nil {
			t.Fatal(err)
		}
		if rec := guardRequest(user, "/", "", alice); rec.Code != 200 {
			t.Fatalf("require user with failing role lookup: %d", rec.Code)
		}
		if rec := guardRequest(readOwn, "/", "", alice); rec.Code != 403 {
			t.Fatalf("require permission with failing role lookup: %d, want 403", rec.Code)
		}
	})
}

func TestGuardsRevokedByPasswordChange(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newGuardFixture(t, s)
		u, c := f.user(t, "dana")
		h := f.guards.RequireUser(okHandler)
		if rec := guardRequest(h, "/", "application/json", c); rec.Code != 200 {
			t.Fatalf("before: %d", rec.Code)
		}
		if _, err := f.svc.Credentials.ChangePassword(context.Background(), u.ID, guardPassword, "a different passphrase"); err != nil {
			t.Fatal(err)
		}
		if rec := guardRequest(h, "/", "application/json", c); rec.Code != 401 {
			t.Fatalf("after password change: %d, want 401", rec.Code)
		}
	})
}

func TestGuardsForbiddenPage(t *testing.T) {
	f := newGuardFixture(t, storagetest.Open(t, storage.SQLite))
	_, c := f.user(t, "erin")
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, "<p>styled</p>")
	})
	g := web.NewGuards(f.svc, web.GuardOptions{Forbidden: page})
	if rec := guardRequest(g.RequireRole(capabilities.RoleAdmin)(okHandler), "/admin", "text/html", c); rec.Code != 403 || rec.Body.String() != "<p>styled</p>" {
		t.Fatalf("got %d %q", rec.Code, rec.Body.String())
	}
}

func TestPrincipalCaller(t *testing.T) {
	f := newGuardFixture(t, storagetest.Open(t, storage.SQLite))
	_, c := f.user(t, "fay")
	var caller capabilities.Caller
	h := f.guards.RequireUser(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller = web.PrincipalFrom(r.Context()).Caller()
	}))
	guardRequest(h, "/", "", c)
	if caller.Username != "fay" || !caller.Interactive || !caller.AllScopes || caller.State != capabilities.AccountActive || !caller.HasRole(capabilities.RoleUser) {
		t.Fatalf("caller %+v", caller)
	}
}

func TestSafeRedirectPath(t *testing.T) {
	for in, want := range map[string]string{
		"/account":               "/account",
		"/account?tab=1#x":       "/account?tab=1#x",
		"/a/b/c?next=//evil":     "/a/b/c?next=//evil",
		"":                       "/",
		"account":                "/",
		"//evil.example":         "/",
		"///evil.example":        "/",
		"/\\evil.example":        "/",
		"/%2F%2Fevil.example":    "/",
		"https://evil.example/":  "/",
		"javascript:alert(1)":    "/",
		"/ok\r\nSet-Cookie: x=1": "/",
		"/tab\there":             "/",
		"\\\\evil.example":       "/",
		"/" + string(rune(0x7f)): "/",
	} {
		if got := web.SafeRedirectPath(in); got != want {
			t.Errorf("SafeRedirectPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrefersJSON(t *testing.T) {
	for _, tc := range []struct {
		accept, contentType string
		want                bool
	}{
		{"application/json", "", true},
		{"application/json, text/plain, */*", "", true},
		{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "", false},
		{"text/html, application/json", "", false}, // a tie goes to HTML
		{"application/json;q=0", "", false},
		{"application/vnd.api+json", "", true},
		{"*/*", "", false},
		{"", "application/json", true},
		{"", "application/x-www-form-urlencoded", false},
		{"", "", false},
		{"garbage;;;", "", false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if tc.accept != "" {
			r.Header.Set("Accept", tc.accept)
		}
		if tc.contentType != "" {
			r.Header.Set("Content-Type", tc.contentType)
		}
		if got := web.PrefersJSON(r); got != tc.want {
			t.Errorf("PrefersJSON(Accept %q, Content-Type %q) = %v, want %v", tc.accept, tc.contentType, got, tc.want)
		}
	}
}

// assignOrGrant gives role to userID: the admin role through the
// operator's path, any other through AssignRole.
func assignOrGrant(svc *accounts.Service, ctx context.Context, userID int64, role string) (bool, error) {
	if role == capabilities.RoleAdmin {
		return svc.Roles.GrantAdminAsOperator(ctx, userID)
	}
	return svc.Roles.AssignRole(ctx, userID, role)
}
