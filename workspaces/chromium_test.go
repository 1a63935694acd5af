package workspaces_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave/internal/chromiumtest"

	"github.com/enclave-mcp/enclave/enclavetest"
)

// TestChromiumWorkspacePages: a person signs in in a real Chromium,
// creates a workspace, creates an API key (shown once) and deletes the
// workspace in two steps, through the pages' forms under their CSP.
func TestChromiumWorkspacePages(t *testing.T) {
	bin := chromiumtest.Bin(t)
	s := enclavetest.Start(t, workspaceServer())
	u := s.CreateUser(t, "pat")

	browserCtx, ctx := chromiumtest.Start(t, bin, 2*time.Minute)
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			chromiumtest.Screenshot(t, browserCtx, "workspaces-"+name)
			t.Fatalf("%s: %v", name, err)
		}
	}
	submit := func(action string) chromedp.Action[chromedp.Void] {
		return chromedp.Click(chromedp.CSS(`form[action$="` + action + `"] button[type="submit"]`))
	}
	step("sign in",
		chromedp.Navigate(s.URL+"/login"),
		chromedp.SendKeys(chromedp.ID("email"), u.Email),
		chromedp.SendKeys(chromedp.ID("password"), u.Password),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type="submit"]`)),
		chromedp.WaitNotPresent(chromedp.ID("password")),
	)
	step("create a workspace",
		chromedp.Navigate(s.URL+"/workspaces"),
		chromedp.SendKeys(chromedp.ID("name"), "Browser fest"),
		submit("/workspaces"),
		chromedp.WaitVisible(chromedp.ID("role")),
	)
	role, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("role")))
	if err != nil || role != "owner" {
		t.Fatalf("role %q, %v", role, err)
	}
	step("create an API key",
		chromedp.SendKeys(chromedp.ID("key-name"), "agent"),
		chromedp.SendKeys(chromedp.ID("key-password"), u.Password),
		submit("/keys"),
		chromedp.WaitVisible(chromedp.ID("workspace-key")),
	)
	key, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("workspace-key")))
	if err != nil || !strings.HasPrefix(key, "ewk_") {
		t.Fatalf("key %q, %v", key, err)
	}
	// The account's security page lists the live key and revokes it.
	step("see the key on the security page",
		chromedp.Navigate(s.URL+"/account/security"),
		chromedp.WaitVisible(chromedp.CSS(`tr.workspace-key`)),
	)
	row, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`tr.workspace-key`)))
	if err != nil || !strings.Contains(row, "Browser fest") || !strings.Contains(row, "agent") {
		t.Fatalf("key row %q, %v", row, err)
	}
	step("revoke it there",
		chromedp.Click(chromedp.CSS(`tr.workspace-key button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.Search(`//p[contains(., "The workspace API key is revoked")]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`tr.workspace-key`)),
	)
	step("back to the workspace",
		chromedp.Navigate(s.URL+"/workspaces"),
		chromedp.Click(chromedp.Search(`//a[contains(., "Browser fest")]`)),
		chromedp.WaitVisible(chromedp.ID("role")),
	)
	step("delete, step one", submit("/delete"), chromedp.WaitVisible(chromedp.ID("confirm-delete")))
	step("delete, step two", chromedp.Click(chromedp.ID("confirm-delete")), chromedp.WaitVisible(chromedp.ID("name")))
	html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("main")))
	if err != nil || strings.Contains(html, "Browser fest") {
		t.Fatalf("the deleted workspace is still listed (%v)", err)
	}
}
