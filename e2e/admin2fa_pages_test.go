package e2e

import (
	"context"
	"net/http"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
)

// With --require-admin-2fa every admin page sends an admin without a
// second factor to enrolment before it answers (the feedback triage pages
// included), not only the pages whose capabilities refuse.
func TestEveryAdminPageSendsToEnrolment(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, storage.SQLite, func(c *enclave.Config) { c.RequireAdmin2FA = true })
	u, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "root@example.com", Username: "chief", Password: "a long password for chief", Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Accounts().Roles.GrantAdminAsOperator(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	admin := sessionFor(t, srv, u)
	for _, path := range []string{"/admin/", "/admin/roles", "/admin/audit", "/admin/users", "/admin/users/new", "/admin/users/" + u.StableID,
		"/admin/overview", "/admin/clients", "/admin/invites", "/admin/feedback", "/admin/webhooks"} {
		rec := admin.do("GET", path, nil)
		if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/account/security?notice=admin-2fa" {
			t.Errorf("GET %s without a second factor: %d %q", path, rec.Code, rec.Header().Get("Location"))
		}
	}
	if rec := admin.do("POST", "/admin/feedback/fb_x", nil); rec.Code != http.StatusForbidden {
		t.Errorf("POST /admin/feedback/{id} without a second factor: %d", rec.Code)
	}
}
