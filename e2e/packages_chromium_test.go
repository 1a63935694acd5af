package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave/internal/chromiumtest"

	"github.com/enclave-mcp/enclave/enclavetest"
)

// A person signs in and finds, on the packages page, the package an agent
// saved for them (its export as a tool, its job with the schedule) and the
// run the agent made; the page fits a phone's width; deleting the package
// leaves the page with the sentence that says how packages are made.
func TestChromiumPackagesJourney(t *testing.T) {
	bin := chromiumtest.Bin(t)
	s := enclavetest.Start(t, enclavetest.Options{})
	if s.CodeMode() == nil {
		t.Fatal("code mode is off by default")
	}
	ann := s.CreateUser(t, "ann")

	// The agent's side, through the registry as ann: save a package with
	// an export and a job, and call the export once.
	invoke := func(name string, args any) json.RawMessage {
		t.Helper()
		raw, _ := json.Marshal(args)
		res, err := s.Registry().Invoke(t.Context(), ann.Caller(t), name, raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.IsError {
			t.Fatalf("%s: error result %+v", name, res.Content)
		}
		out, _ := json.Marshal(res.Structured)
		return out
	}
	invoke("packageSave", map[string]any{
		"name": "weather",
		"files": map[string]string{
			"main.js": `export async function forecast(args) { console.log("for", args.city); return {city: args.city, high: 21}; }`,
		},
		"manifest": map[string]any{
			"description": "Weather tools for the morning briefing",
			"exports": map[string]any{
				"forecast": map[string]any{"description": "Tomorrow's forecast for a city.", "readOnly": true},
			},
			"jobs": map[string]any{
				"morning": map[string]any{"schedule": "0 7 * * 1-5", "export": "forecast", "args": map[string]any{"city": "Lyon"}},
			},
		},
	})
	var run struct {
		RunID string `json:"runId"`
	}
	if err := json.Unmarshal(invoke("pkg_weather_forecast", map[string]any{"city": "Paris"}), &run); err != nil || run.RunID == "" {
		t.Fatalf("the export's run: %+v %v", run, err)
	}

	// And a program of its own that fails, with a long message (the page
	// must still fit a phone).
	if _, err := s.Registry().Invoke(t.Context(), ann.Caller(t), "execute",
		json.RawMessage(`{"code":"throw new Error('the upstream answered https://api.example.com/v1/forecasts/very/long/path?city=Paris&units=metric with 503')"}`)); err != nil {
		t.Fatalf("execute: %v", err)
	}

	browserCtx, ctx := chromiumtest.Start(t, bin, 2*time.Minute)
	step := chromiumtest.Stepper(t, browserCtx, ctx, "packages-failed")
	text := chromiumtest.Texter(t, ctx)
	// overflow is how many CSS pixels the page is wider than the window.
	overflow := func() int {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - window.innerWidth`))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	step("sign in",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(s.URL+"/login"),
		chromedp.SendKeys(chromedp.ID("email"), ann.Email),
		chromedp.SendKeys(chromedp.ID("password"), ann.Password),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/logout"]`)),
	)
	step("follow the account navigation to the packages page",
		chromedp.Navigate(s.URL+"/account/secrets"),
		chromedp.Click(chromedp.CSS(`main a[href="/account/packages"]`)),
		chromedp.WaitVisible(chromedp.ID("package-weather")),
	)
	pkg := text("#package-weather")
	for _, want := range []string{"weather", "Weather tools for the morning briefing", "Version 1", "pkg_weather_forecast",
		"Tomorrow's forecast for a city.", "0 7 * * 1-5", "morning", "next run", "not run yet"} {
		if !strings.Contains(pkg, want) {
			t.Errorf("the package shows %q, not %q", pkg, want)
		}
	}
	runs := text("#runs-table")
	for _, want := range []string{"weather v1 · forecast", "export", "succeeded", "ms", "a program sent to execute", "failed", "The program threw an error", "upstream answered"} {
		if !strings.Contains(runs, want) {
			t.Errorf("the runs show %q, not %q", runs, want)
		}
	}
	if n := overflow(); n > 0 {
		t.Errorf("at 1280 px the page is %d px too wide", n)
	}
	chromiumtest.Screenshot(t, browserCtx, "packages-1280")
	step("narrow the window to a phone's", chromedp.EmulateViewport(390, 844), chromedp.Navigate(s.URL+"/account/packages"), chromedp.WaitVisible(chromedp.ID("package-weather")))
	if n := overflow(); n > 0 {
		t.Errorf("at 390 px the page is %d px too wide", n)
	}
	chromiumtest.Screenshot(t, browserCtx, "packages-390")

	step("delete the package",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Click(chromedp.CSS(`#package-weather details.delete summary`)),
		chromedp.Click(chromedp.CSS(`#package-weather form[action="/account/packages/delete"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.ID("no-packages")),
	)
	chromiumtest.Screenshot(t, browserCtx, "packages-empty")
	if got := text("p.notice"); !strings.Contains(got, "The package is deleted") {
		t.Errorf("notice %q", got)
	}
	if got := text("#no-packages"); !strings.Contains(got, "execute") || !strings.Contains(got, "packageSave") {
		t.Errorf("empty state %q", got)
	}
	if got := text("#runs-table"); !strings.Contains(got, "weather v1 · forecast") {
		t.Errorf("the run record went with the package: %q", got)
	}
	if jobs, err := s.CodeMode().ListJobs(t.Context(), ann.Owner()); err != nil || len(jobs) != 0 {
		t.Errorf("jobs after delete: %v %v", jobs, err)
	}
	if _, err := s.Registry().Invoke(t.Context(), ann.Caller(t), "pkg_weather_forecast", json.RawMessage(`{"city":"Paris"}`)); err == nil {
		t.Error("the deleted package's tool still runs")
	}
}
