package enclave_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/internal/chromiumtest"
	"github.com/enclave-mcp/enclave/workspaces"
)

// overflowJS reports what makes the page wider than the viewport: the
// document's own scroll width, and every visible element whose box runs
// past the viewport's edges, unless a scrolling container of its own (a
// table wrapper) clips it.
const overflowJS = `(() => {
	const vw = document.documentElement.clientWidth;
	const out = [];
	if (document.documentElement.scrollWidth > vw) {
		out.push("document scrollWidth " + document.documentElement.scrollWidth + " > clientWidth " + vw);
	}
	const clipped = (el) => {
		for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
			const ox = getComputedStyle(p).overflowX;
			if (ox === "auto" || ox === "scroll" || ox === "hidden" || ox === "clip") return true;
		}
		return false;
	};
	for (const el of document.body.querySelectorAll("*")) {
		const r = el.getBoundingClientRect();
		if (r.width === 0 || r.height === 0) continue;
		if ((r.right > vw + 1 || r.left < -1 || r.width > vw + 1) && !clipped(el)) {
			let name = el.tagName.toLowerCase();
			if (el.id) name += "#" + el.id;
			if (el.className && typeof el.className === "string") name += "." + el.className.trim().split(/\s+/).join(".");
			out.push(name + " spans " + Math.round(r.left) + ".." + Math.round(r.right) + " of " + vw);
			if (out.length > 8) break;
		}
	}
	return JSON.stringify(out);
})()`

// Every page of the shell fits a desktop window and a phone: at 1280 and
// 390 px nothing makes the page scroll sideways, with content long enough
// to wrap (ids, names, audit rows). Each page's screenshot is written to
// ENCLAVE_TEST_ARTIFACTS when it is set, else to the test's directory.
func TestChromiumLayoutFits(t *testing.T) {
	bin := chromiumtest.Bin(t)
	s := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{Workspaces: &workspaces.Options{}}})
	ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)

	invoke := func(name string, args any) json.RawMessage {
		t.Helper()
		raw, _ := json.Marshal(args)
		res, err := s.Registry().Invoke(t.Context(), ada.Caller(t), name, raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.IsError {
			t.Fatalf("%s: error result %+v", name, res.Content)
		}
		out, _ := json.Marshal(res.Structured)
		return out
	}
	long := "a-rather-long-unbroken-identifier-" + strings.Repeat("x", 60)
	invoke("secretSet", map[string]any{"name": "deploy-token-for-the-staging-cluster-in-eu-west", "value": "v", "description": "Used by " + long})
	invoke("memorySave", map[string]any{"text": "A note with a long link https://example.com/" + long + "/and/more?query=" + long, "tags": []string{"links"}})
	invoke("feedbackSubmit", map[string]any{"category": "bug", "summary": "Export fails on " + long, "details": "Steps: " + long, "userConfirmed": true})
	var ws struct {
		ID string `json:"workspaceId"`
	}
	if err := json.Unmarshal(invoke("workspaceCreate", map[string]any{"name": "Team workspace " + long}), &ws); err != nil || ws.ID == "" {
		t.Fatalf("workspace: %v %q", err, ws.ID)
	}

	dir := os.Getenv("ENCLAVE_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	browserCtx, ctx := chromiumtest.Start(t, bin, 3*time.Minute)
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			loc, _ := chromedp.Run(browserCtx, chromedp.Location())
			chromiumtest.Screenshot(t, browserCtx, "layout-failed")
			t.Fatalf("%s (at %s): %v", name, loc, err)
		}
	}
	check := func(path string) {
		t.Helper()
		for _, width := range []int{1280, 390} {
			step(fmt.Sprintf("open %s at %d px", path, width),
				chromedp.EmulateViewport(int64(width), 900),
				chromedp.Navigate(s.URL+path),
				chromedp.WaitVisible(chromedp.CSS("main h1")),
			)
			loc, err := chromedp.Run(ctx, chromedp.Location())
			if err != nil {
				t.Fatal(err)
			}
			if u, _ := url.Parse(loc); u == nil || u.Path != strings.SplitN(path, "?", 2)[0] {
				t.Fatalf("%s led to %s", path, loc)
			}
			if title, _ := chromedp.Run(ctx, chromedp.Title()); strings.HasPrefix(title, "Page not found") || strings.HasPrefix(title, "Something went wrong") {
				t.Fatalf("%s is an error page: %q", path, title)
			}
			raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](overflowJS))
			if err != nil {
				t.Fatal(err)
			}
			var problems []string
			if err := json.Unmarshal([]byte(raw), &problems); err != nil {
				t.Fatal(err)
			}
			shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(90))
			if err != nil {
				t.Fatalf("screenshot of %s: %v", path, err)
			}
			name := strings.Trim(strings.NewReplacer("/", "-", "?", "-", "=", "-").Replace(path), "-")
			if name == "" {
				name = "home"
			}
			file := filepath.Join(dir, fmt.Sprintf("layout-%s-%d.jpg", name, width))
			if err := os.WriteFile(file, shot, 0o644); err != nil {
				t.Fatal(err)
			}
			if len(problems) > 0 {
				t.Errorf("%s at %d px overflows (screenshot %s):\n  %s", path, width, file, strings.Join(problems, "\n  "))
			}
		}
	}

	for _, p := range []string{"/", "/connect", "/login", "/signup"} {
		check(p)
	}
	step("sign in",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(s.URL+"/login"),
		chromedp.SendKeys(chromedp.ID("email"), ada.Email),
		chromedp.SendKeys(chromedp.ID("password"), ada.Password),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/logout"]`)),
	)
	for _, p := range []string{
		"/account", "/account/security", "/account/secrets", "/account/feedback", "/account/memory",
		"/account/packages", "/account/apps", "/workspaces", "/workspaces/" + ws.ID,
		"/admin/users", "/admin/audit", "/admin/feedback",
	} {
		check(p)
	}
}
