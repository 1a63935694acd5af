package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/internal/chromiumtest"
)

// A person on a small plan follows the account navigation to the usage
// page in headless Chromium and reads today's and this week's code runs
// against the plan's limits and their stored bytes against the plan's
// storage bytes; another person's use is not theirs; on a phone's width
// the table stacks (no row is a table row) and nothing scrolls sideways.
// On both dialects.
func TestCommunityUsagePage(t *testing.T) {
	bin := chromiumtest.Bin(t)
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			s := enclavetest.Start(t, enclavetest.Options{Dialect: d})
			ann, ben, ada := s.CreateUser(t, "ann"), s.CreateUser(t, "ben"), s.CreateUser(t, "ada", capabilities.RoleAdmin)
			invoke := func(c capabilities.Caller, name string, args any) {
				t.Helper()
				raw, _ := json.Marshal(args)
				res, err := s.Registry().Invoke(t.Context(), c, name, raw)
				if err != nil || res.IsError {
					t.Fatalf("%s: %v %+v", name, err, res)
				}
			}
			dc := ada.Caller(t)
			invoke(dc, "adminPlanSave", map[string]any{"name": "small", "execute": map[string]any{"daily": 5, "weekly": 20}, "storageBytes": 10240})
			invoke(dc, "adminUserPlanSet", map[string]any{"username": "ann", "plan": "small"})
			ac, bc := ann.Caller(t), ben.Caller(t)
			for range 2 {
				invoke(ac, "execute", map[string]any{"code": "return 1"})
			}
			for range 3 {
				invoke(bc, "execute", map[string]any{"code": "return 1"})
			}
			// "k" and a 1023-byte JSON string: 1 KiB (10 % of the plan).
			invoke(ac, "storageSet", map[string]any{"storageId": "notes", "key": "k", "value": strings.Repeat("v", 1021)})

			browser, ctx := chromiumtest.Start(t, bin, 90*time.Second)
			step := chromiumtest.Stepper(t, browser, ctx, "usage-failed")
			text := chromiumtest.Texter(t, ctx)
			step("sign in",
				chromedp.EmulateViewport(1280, 900),
				chromedp.Navigate(s.URL+"/login"),
				chromedp.SendKeys(chromedp.ID("email"), ann.Email),
				chromedp.SendKeys(chromedp.ID("password"), ann.Password),
				chromedp.Click(chromedp.CSS(`form[action="/login"] button[type="submit"]`)),
				chromedp.WaitVisible(chromedp.CSS(`form[action="/logout"]`)),
			)
			step("follow the account navigation to the usage page",
				chromedp.Navigate(s.URL+"/account/security"),
				chromedp.Click(chromedp.CSS(`main a[href="/account/usage"]`)),
				chromedp.WaitVisible(chromedp.ID("usage-table")),
			)
			// The meter's counts reach SQL within a flush interval: reload
			// until ann's two runs show.
			row := ""
			for deadline := time.Now().Add(20 * time.Second); ; {
				row = text("#usage-execute")
				if strings.Contains(row, "2 of 5") || time.Now().After(deadline) {
					break
				}
				time.Sleep(300 * time.Millisecond)
				step("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("usage-table")))
			}
			for _, want := range []string{"Code runs", "2 of 5 (40 %)", "2 of 20 (10 %)"} {
				if !strings.Contains(row, want) {
					t.Errorf("the code runs row shows %q, not %q", row, want)
				}
			}
			if got := text("#usage-plan"); got != "small" {
				t.Errorf("plan %q", got)
			}
			if got := text("#usage-outbound"); !strings.Contains(got, "no limit") {
				t.Errorf("the outbound row shows %q", got)
			}
			if got := text("#usage-storage"); !strings.Contains(got, "1.0 KiB of 10.0 KiB") || !strings.Contains(got, "(10 %)") {
				t.Errorf("storage shows %q", got)
			}
			chromiumtest.Screenshot(t, browser, "usage-1280-"+string(d))

			step("narrow the window to a phone's", chromedp.EmulateViewport(390, 844), chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("usage-table")))
			over, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - window.innerWidth`))
			if err != nil || over > 0 {
				t.Errorf("at 390 px the page is %d px too wide (%v)", over, err)
			}
			rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll("#usage-table tbody tr")].filter(tr => getComputedStyle(tr).display === "table-row").length`))
			if err != nil || rows != 0 {
				t.Errorf("at 390 px %d rows of the usage table are still table rows (%v)", rows, err)
			}
			labelled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`[...document.querySelectorAll("#usage-table tbody td")].every(td => td.dataset.label)`))
			if err != nil || !labelled {
				t.Errorf("a cell of the usage table has no data-label (%v)", err)
			}
			chromiumtest.Screenshot(t, browser, "usage-390-"+string(d))
		})
	}
}
