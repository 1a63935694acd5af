package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave/internal/chromiumtest"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// A person sends feedback in a real browser, with no script: the form
// leads to a preview of the exact text, Send stores it, their list shows
// it; an admin resolves it on the triage page.
func TestChromiumFeedbackJourney(t *testing.T) {
	bin := chromiumtest.Bin(t)
	s := enclavetest.Start(t, enclavetest.Options{})
	ann := s.CreateUser(t, "ann")
	ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)

	browserCtx, ctx := chromiumtest.Start(t, bin, 2*time.Minute)
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			loc, _ := chromedp.Run(browserCtx, chromedp.Location())
			t.Fatalf("%s (at %s): %v", name, loc, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	submit := func(action string) chromedp.Action[chromedp.Void] {
		return chromedp.Click(chromedp.CSS(`form[action="` + action + `"] button[type="submit"]`))
	}
	signIn := func(u *enclavetest.User) {
		step("sign in as "+u.Username,
			chromedp.Navigate(s.URL+"/login"),
			chromedp.SendKeys(chromedp.ID("email"), u.Email),
			chromedp.SendKeys(chromedp.ID("password"), u.Password),
			submit("/login"),
			chromedp.WaitVisible(chromedp.CSS(`form[action="/logout"]`)),
		)
	}

	signIn(ann)
	step("write feedback",
		chromedp.Navigate(s.URL+"/account/feedback"),
		chromedp.SetValue(chromedp.ID("category"), "bug"),
		chromedp.SendKeys(chromedp.ID("summary"), "  Export <fails> on large notes "),
		chromedp.SendKeys(chromedp.ID("details"), "Steps: export.\nResult: 500."),
		submit("/account/feedback/preview"),
		chromedp.WaitVisible(chromedp.ID("feedback-preview")),
	)
	if got := text("#preview-summary"); got != "Export <fails> on large notes" {
		t.Fatalf("preview shows %q", got)
	}
	if got := text("#preview-category"); got != "bug" {
		t.Fatalf("preview category %q", got)
	}
	if n, _ := s.Store().DB.NewSelect().Table("platform_feedback").Count(ctx); n != 0 {
		t.Fatal("the preview stored the feedback")
	}
	step("send", chromedp.Click(chromedp.ID("send-feedback")), chromedp.WaitVisible(chromedp.ID("my-feedback")))
	if got := text("#my-feedback tbody"); !strings.Contains(got, "Export <fails> on large notes") || !strings.Contains(got, "open") {
		t.Fatalf("own list: %q", got)
	}

	step("sign out", submit("/logout"), chromedp.WaitVisible(chromedp.CSS(`a[href="/login"]`)))
	signIn(ada)
	step("open the triage page", chromedp.Navigate(s.URL+"/admin/feedback"), chromedp.WaitVisible(chromedp.ID("content-warning")))
	if got := text("section.card .untrusted"); !strings.Contains(got, "Export <fails> on large notes") {
		t.Fatalf("triage page shows %q", got)
	}
	step("read the details", chromedp.Click(chromedp.CSS(`section.card a[href^="/admin/feedback/fb_"]`)), chromedp.WaitVisible(chromedp.ID("details")))
	if got := text("#details"); got != "Steps: export.\nResult: 500." {
		t.Fatalf("details page shows %q", got)
	}
	step("resolve",
		chromedp.SetValue(chromedp.CSS(`section.card select[name="status"]`), "resolved"),
		chromedp.SendKeys(chromedp.CSS(`section.card input[name="note"]`), "fixed"),
		chromedp.Click(chromedp.CSS(`section.card form button[type="submit"]`)),
		// The page after the update carries its notice (the triage page
		// before it has the content warning too).
		chromedp.WaitVisible(chromedp.CSS(`p.notice`)),
	)
	var status, note string
	if err := s.Store().DB.NewSelect().Table("platform_feedback").Column("status", "admin_note").Scan(ctx, &status, &note); err != nil || status != "resolved" || note != "fixed" {
		t.Fatalf("after triage: %q %q %v", status, note, err)
	}
}
