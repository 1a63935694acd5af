package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
)

// The secrets page shows names to their owner, reveals a value only on the
// owner's POST, and never another user's.
func TestSecretsPage(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, storage.SQLite)
	cookies := map[string]*http.Cookie{}
	for _, name := range []string{"alice", "bob"} {
		u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "a long password for " + name})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		if _, err := srv.Accounts().Credentials.StartSession(rec, httptest.NewRequest("POST", "/login", nil), u, false); err != nil {
			t.Fatal(err)
		}
		cookies[name] = rec.Result().Cookies()[0]
		if name == "alice" {
			if _, _, err := srv.Secrets().Set(ctx, storage.Owner{ID: u.ID, StableID: u.StableID}, "openai", "model calls", []byte("sk-alice-secret")); err != nil {
				t.Fatal(err)
			}
		}
	}
	do := func(method, who string, form url.Values) *httptest.ResponseRecorder {
		var req *http.Request
		if form != nil {
			req = httptest.NewRequest(method, "/account/secrets/reveal", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		} else {
			req = httptest.NewRequest(method, "/account/secrets", nil)
		}
		req.AddCookie(cookies[who])
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec
	}
	rec := do("GET", "alice", nil)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "openai") || strings.Contains(rec.Body.String(), "sk-alice-secret") {
		t.Fatalf("list: %d, value shown or name missing", rec.Code)
	}
	if !strings.Contains(rec.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Fatalf("secrets page without the security headers: %v", rec.Header())
	}
	rec = do("POST", "alice", url.Values{"name": {"openai"}})
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "sk-alice-secret") || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("reveal: %d %q", rec.Code, rec.Header().Get("Cache-Control"))
	}
	rec = do("POST", "bob", url.Values{"name": {"openai"}})
	if rec.Code != http.StatusNotFound || strings.Contains(rec.Body.String(), "sk-alice-secret") {
		t.Fatalf("bob reveals alice's secret: %d", rec.Code)
	}
	if rec := do("GET", "bob", nil); strings.Contains(rec.Body.String(), "openai") {
		t.Fatal("bob sees alice's secret name")
	}
	// Cross-site posts are refused before the handler runs.
	req := httptest.NewRequest("POST", "/account/secrets/reveal", strings.NewReader("name=openai"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.AddCookie(cookies["alice"])
	rec = httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || strings.Contains(rec.Body.String(), "sk-alice") {
		t.Fatalf("cross-site reveal: %d", rec.Code)
	}
}
