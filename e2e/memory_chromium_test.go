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
	"github.com/enclave-mcp/enclave/memory"
)

// A person signs in and finds, on the memory page, what their agent
// remembered (and nothing another person's agent did); searches it, adds
// a memory, edits one into the archive and deletes another; the page fits
// a phone's width.
func TestChromiumMemoryJourney(t *testing.T) {
	bin := chromiumtest.Bin(t)
	s := enclavetest.Start(t, enclavetest.Options{})
	if s.Memory() == nil {
		t.Fatal("memories are off by default")
	}
	ann, ben := s.CreateUser(t, "ann"), s.CreateUser(t, "ben")
	save := func(c capabilities.Caller, text string, tags ...string) memory.Memory {
		t.Helper()
		raw, _ := json.Marshal(map[string]any{"text": text, "tags": tags, "source": "a chat"})
		res, err := s.Registry().Invoke(t.Context(), c, "memorySave", raw)
		if err != nil {
			t.Fatalf("save: %v", err)
		}
		return res.Structured.(memory.Memory)
	}
	agent := ann.Caller(t)
	agent.Session = false
	teal := save(agent, "Ann's favourite colour is teal", "preferences")
	cats := save(agent, "Ann has two cats called Miso and Tofu, and a very long sentence about them that wraps on a narrow screen: https://example.com/cats/miso-and-tofu/photos?size=large", "pets")
	bens := save(ben.Caller(t), "Ben's favourite colour is teal too")

	browserCtx, ctx := chromiumtest.Start(t, bin, 2*time.Minute)
	step := chromiumtest.Stepper(t, browserCtx, ctx, "memory-failed")
	text := chromiumtest.Texter(t, ctx)
	overflow := func() int {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - window.innerWidth`))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	card := func(m memory.Memory) string { return "#memory-" + m.ID }

	step("sign in",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(s.URL+"/login"),
		chromedp.SendKeys(chromedp.ID("email"), ann.Email),
		chromedp.SendKeys(chromedp.ID("password"), ann.Password),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/logout"]`)),
	)
	step("follow the account navigation to the memory page",
		chromedp.Navigate(s.URL+"/account/secrets"),
		chromedp.Click(chromedp.CSS(`main a[href="/account/memory"]`)),
		chromedp.WaitVisible(chromedp.CSS(card(teal))),
	)
	got := text(card(teal))
	for _, want := range []string{"Ann's favourite colour is teal", "preferences", "written by agent", "from a chat"} {
		if !strings.Contains(got, want) {
			t.Errorf("the memory shows %q, not %q", got, want)
		}
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#memory-`+bens.ID+`").length`)); n != 0 {
		t.Fatal("ann's page shows ben's memory")
	}
	step("narrow the window to a phone's", chromedp.EmulateViewport(390, 844), chromedp.Navigate(s.URL+"/account/memory"), chromedp.WaitVisible(chromedp.CSS(card(cats))))
	if n := overflow(); n > 0 {
		t.Errorf("at 390 px the page is %d px too wide", n)
	}
	chromiumtest.Screenshot(t, browserCtx, "memory-390")

	step("search",
		chromedp.EmulateViewport(1280, 900),
		chromedp.SendKeys(chromedp.ID("memory-query"), `colour "teal`),
		chromedp.Submit(chromedp.ID("memory-query")),
		// The list before the search showed teal's card too: wait for the
		// results page, which the other memory is not on.
		chromedp.WaitNotPresent(chromedp.CSS(card(cats))),
		chromedp.WaitVisible(chromedp.CSS(card(teal))),
	)
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("section.memory").length`)); n != 1 {
		t.Errorf("the search shows %d memories, want ann's one", n)
	}
	chromiumtest.Screenshot(t, browserCtx, "memory-search")

	step("add a memory",
		chromedp.Navigate(s.URL+"/account/memory"),
		chromedp.SendKeys(chromedp.ID("memory-text"), "Ann is learning the cello"),
		chromedp.SendKeys(chromedp.ID("memory-tags"), "hobbies, music"),
		chromedp.Click(chromedp.CSS(`#memory-add button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("p.notice")),
	)
	if got := text("p.notice"); !strings.Contains(got, "saved") {
		t.Errorf("notice %q", got)
	}
	if got := text("main"); !strings.Contains(got, "Ann is learning the cello") || !strings.Contains(got, "written by web") {
		t.Errorf("the new memory is not shown as written on the web: %q", got)
	}

	step("edit a memory and archive it",
		chromedp.Click(chromedp.CSS(card(teal)+` details.edit summary`)),
		chromedp.Clear(chromedp.ID("text-"+teal.ID)),
		chromedp.SendKeys(chromedp.ID("text-"+teal.ID), "Ann's favourite colour was teal"),
		chromedp.SetValue(chromedp.ID("status-"+teal.ID), "archived"),
		chromedp.Click(chromedp.CSS(card(teal)+` form.memory-edit button[type="submit"]`)),
		// The page before had a notice too (the add's): wait for this one.
		chromedp.WaitVisible(chromedp.Search(`//p[contains(@class, "notice") and contains(., "updated")]`)),
	)
	if got := text(card(teal)); !strings.Contains(got, "Ann's favourite colour was teal") || !strings.Contains(got, "archived") {
		t.Errorf("the edited memory shows %q", got)
	}

	step("delete a memory",
		chromedp.Click(chromedp.CSS(card(cats)+` details.delete summary`)),
		chromedp.Click(chromedp.CSS(card(cats)+` form[action="/account/memory/delete"] button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.Search(`//p[contains(@class, "notice") and contains(., "deleted")]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card(cats))),
	)
	if got := text("p.notice"); !strings.Contains(got, "deleted") {
		t.Errorf("notice %q", got)
	}
	chromiumtest.Screenshot(t, browserCtx, "memory-1280")

	// What the page did is what the capabilities see.
	raw, _ := json.Marshal(map[string]any{"id": teal.ID})
	res, err := s.Registry().Invoke(t.Context(), agent, "memoryGet", raw)
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Structured.(memory.Memory); m.Text != "Ann's favourite colour was teal" || m.Status != memory.StatusArchived {
		t.Errorf("after the edit: %+v", m)
	}
	raw, _ = json.Marshal(map[string]any{"id": cats.ID})
	if _, err := s.Registry().Invoke(t.Context(), agent, "memoryGet", raw); capabilities.CodeOf(err) != capabilities.CodeNotFound {
		t.Errorf("the deleted memory: %v", err)
	}
	raw, _ = json.Marshal(map[string]any{"id": bens.ID})
	if res, err := s.Registry().Invoke(t.Context(), ben.Caller(t), "memoryGet", raw); err != nil || res.Structured.(memory.Memory).Text != bens.Text {
		t.Errorf("ben's memory: %v", err)
	}
}
