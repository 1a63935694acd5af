package e2e

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

var webhookSecret = regexp.MustCompile(`<code id="webhook-secret">(whsec_[A-Za-z0-9_-]+)</code>`)

// The webhooks page adds a subscription through adminWebhookCreate and
// shows its secret on that answer only; it lists and deletes the admin's
// own subscriptions; people without the admin role get none of it; and
// creation is audited.
func TestAdminWebhooksPage(t *testing.T) {
	srv, admin, user := newAdminServer(t, storagetest.Config(t, storage.SQLite).DataDir, accounts.SignupOpen)
	if rec := admin.do("GET", "/admin/webhooks", nil); rec.Code != 200 || !strings.Contains(rec.Body.String(), "no webhook subscription") {
		t.Fatalf("empty page: %d %.300s", rec.Code, rec.Body.String())
	}
	rec := admin.do("POST", "/admin/webhooks", url.Values{"url": {"http://example.com/hook"}})
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), "https") {
		t.Fatalf("http target: %d %.500s", rec.Code, rec.Body.String())
	}
	rec = admin.do("POST", "/admin/webhooks", url.Values{"url": {"https://hooks.example.com/in"}, "events": {"user.created, role.assigned"}, "description": {"pager"}})
	m := webhookSecret.FindStringSubmatch(rec.Body.String())
	if rec.Code != 200 || m == nil {
		t.Fatalf("create: %d %.800s", rec.Code, rec.Body.String())
	}
	page := admin.do("GET", "/admin/webhooks", nil).Body.String()
	if strings.Contains(page, m[1]) || !strings.Contains(page, "https://hooks.example.com/in") || !strings.Contains(page, "user.created, role.assigned") {
		t.Fatalf("list page: %.1500s", page)
	}
	id := regexp.MustCompile(`id="webhook-(wh_[a-z0-9]+)"`).FindStringSubmatch(page)
	if id == nil {
		t.Fatal("no subscription row")
	}
	for _, path := range []string{"/admin/webhooks"} {
		if rec := user.do("GET", path, nil); rec.Code == 200 {
			t.Fatalf("a non-admin opens %s", path)
		}
	}
	if rec := user.do("POST", "/admin/webhooks/"+id[1]+"/delete", url.Values{}); rec.Code == http.StatusSeeOther {
		t.Fatal("a non-admin deletes a subscription")
	}
	if rec := admin.do("POST", "/admin/webhooks/"+id[1]+"/delete", url.Values{}); rec.Code != http.StatusSeeOther {
		t.Fatalf("delete: %d", rec.Code)
	}
	if rec := admin.do("POST", "/admin/webhooks/"+id[1]+"/delete", url.Values{}); rec.Code != http.StatusNotFound {
		t.Fatalf("delete again: %d", rec.Code)
	}
	if page := admin.do("GET", "/admin/webhooks", nil).Body.String(); strings.Contains(page, "hooks.example.com") {
		t.Fatal("deleted subscription still listed")
	}
	got, err := srv.Audit().Query(t.Context(), audit.Filter{Action: "admin_webhook_create"}, storage.PageRequest{Limit: 10})
	if err != nil || len(got.Items) != 2 { // the refused one and the created one
		t.Fatalf("audit: %+v %v", got.Items, err)
	}
}
