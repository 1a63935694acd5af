package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A NUL byte or invalid UTF-8 in a form field is refused with 400 on both
// databases (found by FuzzWebForms: an admin form answered 500).
func TestFormsRefuseNULAndInvalidUTF8(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := newServer(t, d)
			u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: "carol@example.com", Username: "carol", Password: "a long password for carol"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Accounts().Roles.GrantAdminAsOperator(ctx, u.ID); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			if _, err := srv.Accounts().Credentials.StartSession(rec, httptest.NewRequest("POST", "/login", nil), u, false); err != nil {
				t.Fatal(err)
			}
			cookie := rec.Result().Cookies()[0]
			for _, c := range []struct{ path, body string }{
				{fmt.Sprintf("/admin/users/%d/roles/remove", u.ID), "role=%00"},
				{fmt.Sprintf("/admin/users/%d/roles", u.ID), "role=user%00"},
				{"/account/email", "email=carol%00@example.com"},
				{"/account/secrets/reveal", "name=%ff%fe"},
			} {
				req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.AddCookie(cookie)
				rec := httptest.NewRecorder()
				srv.Handler().ServeHTTP(rec, req)
				if rec.Code != http.StatusBadRequest {
					t.Errorf("POST %s %q: %d, want 400", c.path, c.body, rec.Code)
				}
			}
			// The admin user search reads its query string, not a form.
			for _, q := range []string{"q=carol%00", "role=%00", "q=%ff%fe"} {
				req := httptest.NewRequest(http.MethodGet, "/admin/users?"+q, nil)
				req.AddCookie(cookie)
				rec := httptest.NewRecorder()
				srv.Handler().ServeHTTP(rec, req)
				if rec.Code != http.StatusBadRequest {
					t.Errorf("GET /admin/users?%s: %d, want 400", q, rec.Code)
				}
			}
		})
	}
}
