package e2e

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The secrets page stores a secret with its allowed hosts and expiry,
// edits the policy and deletes, for its owner only; the export lists the
// policy but never the value; account deletion removes it all.
func TestSecretPolicyPage(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := newServer(t, d)
			cookies := map[string]*http.Cookie{}
			owners := map[string]storage.Owner{}
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
				owners[name] = storage.Owner{ID: u.ID, StableID: u.StableID}
			}
			do := func(who, path string, form url.Values) *httptest.ResponseRecorder {
				req := httptest.NewRequest("GET", path, nil)
				if form != nil {
					req = httptest.NewRequest("POST", path, strings.NewReader(form.Encode()))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				req.AddCookie(cookies[who])
				rec := httptest.NewRecorder()
				srv.Handler().ServeHTTP(rec, req)
				return rec
			}
			rec := do("alice", "/account/secrets", url.Values{"name": {"gh"}, "value": {"ghp-alice-value"}, "description": {"CI"},
				"allowedHosts": {"API.github.com\n*.github.com"}, "expiresAt": {"2099-01-02T03:04"}})
			if rec.Code != http.StatusSeeOther {
				t.Fatalf("set: %d %s", rec.Code, rec.Body.String())
			}
			page := do("alice", "/account/secrets", nil).Body.String()
			for _, want := range []string{"api.github.com, *.github.com", "2099-01-02 03:04 UTC", `value="2099-01-02T03:04"`} {
				if !strings.Contains(page, want) {
					t.Fatalf("page lacks %q", want)
				}
			}
			if strings.Contains(page, "ghp-alice-value") {
				t.Fatal("the page shows the value")
			}
			// Bad hosts: a clear 400 that names the host; nothing changes.
			rec = do("alice", "/account/secrets/policy", url.Values{"name": {"gh"}, "allowedHosts": {"https://evil.example/x"}})
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "evil.example") {
				t.Fatalf("bad host: %d %s", rec.Code, rec.Body.String())
			}
			// Cross-user: bob cannot approve a host for alice's secret.
			rec = do("bob", "/account/secrets/policy", url.Values{"name": {"gh"}, "allowedHosts": {"evil.example"}})
			if rec.Code != http.StatusNotFound {
				t.Fatalf("bob's policy change: %d", rec.Code)
			}
			if u, err := srv.Secrets().Use(ctx, owners["alice"], "gh", time.Now()); err != nil || strings.Join(u.AllowedHosts, ",") != "api.github.com,*.github.com" {
				t.Fatalf("alice's policy: %+v %v", u.Secret, err)
			}
			// The owner narrows it and drops the expiry.
			if rec = do("alice", "/account/secrets/policy", url.Values{"name": {"gh"}, "allowedHosts": {"api.github.com"}, "expiresAt": {""}}); rec.Code != http.StatusSeeOther {
				t.Fatalf("policy: %d %s", rec.Code, rec.Body.String())
			}
			if page := do("alice", "/account/secrets", nil).Body.String(); strings.Contains(page, "*.github.com") || !strings.Contains(page, "never") {
				t.Fatal("the policy change is not shown")
			}
			// The export lists the policy, never the value.
			var buf bytes.Buffer
			if err := srv.Lifecycle().WriteExport(ctx, owners["alice"], &buf); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), "api.github.com") || !strings.Contains(buf.String(), "allowed_hosts") || !strings.Contains(buf.String(), "expires_at") ||
				strings.Contains(buf.String(), "ghp-alice-value") {
				t.Fatalf("export: %s", buf.String())
			}
			// Delete from the page, then a second secret goes with the account.
			if rec = do("alice", "/account/secrets/delete", url.Values{"name": {"gh"}}); rec.Code != http.StatusSeeOther {
				t.Fatalf("delete: %d", rec.Code)
			}
			if page := do("alice", "/account/secrets", nil).Body.String(); strings.Contains(page, "api.github.com") {
				t.Fatal("deleted secret still listed")
			}
			if rec = do("alice", "/account/secrets", url.Values{"name": {"other"}, "value": {"v"}, "allowedHosts": {"example.com"}}); rec.Code != http.StatusSeeOther {
				t.Fatalf("set other: %d", rec.Code)
			}
			if u, err := srv.Secrets().Use(ctx, owners["alice"], "other", time.Now()); err != nil || u.AllowedHosts[0] != "example.com" {
				t.Fatalf("other: %+v %v", u.Secret, err)
			}
			if _, err := srv.Lifecycle().Delete(ctx, owners["alice"]); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := srv.Store().DB.NewSelect().Table("user_secrets").ColumnExpr("count(*)").Where("user_id = ?", owners["alice"].ID).Scan(ctx, &n); err != nil || n != 0 {
				t.Fatalf("alice's secrets after deletion: %d %v", n, err)
			}
		})
	}
}
