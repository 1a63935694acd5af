// Package chromiumtest starts headless Chromium for the browser tests of
// enclave's packages (web pages, OAuth consent, second factors, workspaces),
// so that each test describes a journey and not how to launch a browser.
//
// The tests run only with ENCLAVE_TEST_CHROMIUM=1 (CI sets it); with it
// set, a missing browser fails the test instead of skipping it.
package chromiumtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Env turns the browser tests on.
const Env = "ENCLAVE_TEST_CHROMIUM"

// Bin returns the chromium binary. It skips the test unless Env is "1",
// and fails it when Env is "1" and no chromium is installed.
func Bin(t testing.TB) string {
	t.Helper()
	if os.Getenv(Env) != "1" {
		t.Skipf("set %s=1 to run the headless Chromium test", Env)
	}
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("%s=1 but chromium is not installed: %v", Env, err)
	}
	return bin
}

// Start launches bin headless with a profile of its own, plus extra
// allocator options (flags such as host-resolver-rules). It returns the
// browser's context, which lives until the test ends, and a context for
// the test's steps that also ends after timeout: a step's deadline then
// ends the step but not the browser, which can still take a screenshot.
// The browser is stopped when the test ends.
func Start(t testing.TB, bin string, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) (browser, steps context.Context) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	steps, cancelSteps := context.WithTimeout(browser, timeout)
	t.Cleanup(cancelSteps)
	return browser, steps
}

// Screenshot saves a full-page screenshot of the tab in ctx as
// enclave-chromium-<name>.png in ENCLAVE_TEST_ARTIFACTS (default the
// temporary directory) and logs its path. It gives up quietly after 10 s:
// it runs when a test is already failing.
func Screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	shot, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		return
	}
	dir := os.Getenv("ENCLAVE_TEST_ARTIFACTS")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, "enclave-chromium-"+strings.NewReplacer(" ", "-", "/", "-").Replace(name)+".png")
	if os.WriteFile(path, shot, 0o644) == nil {
		t.Logf("screenshot: %s", path)
	}
}

// Stepper returns a journey's step: it runs actions in the tab of steps and
// fails the test with the step's name, the page's address and a screenshot
// named shot when one fails.
func Stepper(t testing.TB, browser, steps context.Context, shot string) func(name string, actions ...chromedp.Action[chromedp.Void]) {
	return func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(steps, actions...); err != nil {
			loc, _ := chromedp.Run(browser, chromedp.Location())
			Screenshot(t, browser, shot)
			t.Fatalf("%s (at %s): %v", name, loc, err)
		}
	}
}

// Texter returns a reader of the text of the first element matching a CSS
// selector in the tab of steps; it fails the test when there is none.
func Texter(t testing.TB, steps context.Context) func(sel string) string {
	return func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(steps, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
}
