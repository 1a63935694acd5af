package e2e

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/feedback"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The feedback pages: the form leads to a preview of the exact text, only
// the preview's send button stores it; the person's list shows it; the
// admin page shows it as untrusted and triages it; a non-admin gets no
// admin page.
func TestFeedbackPages(t *testing.T) {
	srv, admin, user := newAdminServer(t, storagetest.Config(t, storage.SQLite).DataDir, accounts.SignupOpen)
	if rec := user.do("GET", "/account/feedback", nil); rec.Code != 200 || !strings.Contains(rec.Body.String(), "Review before sending") {
		t.Fatalf("form: %d %.300s", rec.Code, rec.Body.String())
	}
	form := url.Values{"category": {"bug"}, "summary": {"  Search <b>misses</b> notes  "}, "details": {"Steps: search for x."}}
	rec := user.do("POST", "/account/feedback/preview", form)
	body := rec.Body.String()
	if rec.Code != 200 || !strings.Contains(body, `<span id="preview-summary">Search &lt;b&gt;misses&lt;/b&gt; notes</span>`) || !strings.Contains(body, `name="confirm" value="yes"`) {
		t.Fatalf("preview: %d %.1500s", rec.Code, body)
	}
	if n := feedbackCount(t, srv); n != 0 {
		t.Fatal("the preview stored the feedback")
	}
	// Without the preview's confirmation nothing is stored.
	if rec := user.do("POST", "/account/feedback", form); rec.Code != http.StatusUnprocessableEntity || feedbackCount(t, srv) != 0 {
		t.Fatalf("unconfirmed send: %d", rec.Code)
	}
	if rec := user.do("POST", "/account/feedback/preview", url.Values{"category": {"bug"}, "summary": {strings.Repeat("x", 201)}}); rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), "at most 200") {
		t.Fatalf("too long: %d", rec.Code)
	}
	form.Set("summary", "Search <b>misses</b> notes")
	form.Set("confirm", "yes")
	if rec := user.do("POST", "/account/feedback", form); rec.Code != http.StatusSeeOther {
		t.Fatalf("send: %d %.500s", rec.Code, rec.Body.String())
	}
	if page := user.do("GET", "/account/feedback?notice=feedback_sent", nil).Body.String(); !strings.Contains(page, "Search &lt;b&gt;misses&lt;/b&gt; notes") || !strings.Contains(page, "open") {
		t.Fatalf("own list: %.1500s", page)
	}
	if rec := user.do("GET", "/admin/feedback", nil); rec.Code == 200 {
		t.Fatal("a non-admin opens the triage page")
	}
	page := admin.do("GET", "/admin/feedback", nil).Body.String()
	if !strings.Contains(page, feedback.ContentWarning[:40]) || !strings.Contains(page, "Search &lt;b&gt;misses&lt;/b&gt;") || !strings.Contains(page, "plain@example.com") {
		t.Fatalf("triage page: %.2000s", page)
	}
	id := regexp.MustCompile(`id="feedback-(fb_[a-z0-9]+)"`).FindStringSubmatch(page)
	if id == nil {
		t.Fatal("no feedback on the triage page")
	}
	// The list shows summaries; the details are on the feedback's own page.
	if strings.Contains(page, "Steps: search for x.") || !strings.Contains(page, `href="/admin/feedback/`+id[1]+`"`) {
		t.Fatalf("the triage list shows the details, or no link to them: %.2000s", page)
	}
	if rec := user.do("GET", "/admin/feedback/"+id[1], nil); rec.Code == 200 || strings.Contains(rec.Body.String(), "Steps: search") {
		t.Fatal("a non-admin opens a feedback's page")
	}
	if item := admin.do("GET", "/admin/feedback/"+id[1], nil).Body.String(); !strings.Contains(item, "Steps: search for x.") || !strings.Contains(item, feedback.ContentWarning[:40]) {
		t.Fatalf("feedback page: %.2000s", item)
	}
	if rec := admin.do("GET", "/admin/feedback/fb_nosuchone", nil); rec.Code != http.StatusNotFound {
		t.Fatalf("unknown feedback: %d", rec.Code)
	}
	// The audit row names the id the admin asked for, which is not
	// validated: no line break or format character reaches the log as is.
	admin.do("GET", "/admin/feedback/"+url.PathEscape("fb_x\nadmin_grant result=success\u202e"), nil)
	events, err := srv.Audit().Query(context.Background(), audit.Filter{Action: "admin_feedback_get"}, storage.PageRequest{Limit: 10})
	if err != nil || len(events.Items) == 0 {
		t.Fatalf("audit of admin_feedback_get: %v %v", events, err)
	}
	for _, e := range events.Items {
		if strings.IndexFunc(e.Reason, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }) >= 0 {
			t.Fatalf("audit reason %q: control characters reach the audit log", e.Reason)
		}
	}
	if rec := user.do("POST", "/admin/feedback/"+id[1], url.Values{"status": {"resolved"}}); rec.Code == http.StatusSeeOther {
		t.Fatal("a non-admin triages")
	}
	if rec := admin.do("POST", "/admin/feedback/"+id[1], url.Values{"status": {"resolved"}, "note": {"fixed in 1.2"}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("resolve: %d %.500s", rec.Code, rec.Body.String())
	}
	if rec := admin.do("POST", "/admin/feedback/"+id[1], url.Values{"status": {"triaged"}}); rec.Code != http.StatusConflict {
		t.Fatalf("reopen a resolved feedback: %d", rec.Code)
	}
	if page := user.do("GET", "/account/feedback", nil).Body.String(); !strings.Contains(page, "resolved") || strings.Contains(page, "fixed in 1.2") {
		t.Fatalf("own list after resolution: %.1500s", page)
	}
}

func feedbackCount(t *testing.T, srv interface {
	Store() *storage.Store
}) int {
	t.Helper()
	n, err := srv.Store().DB.NewSelect().Table("platform_feedback").Count(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}
