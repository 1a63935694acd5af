package web

import (
	"context"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A sender's attachment filename never carries a path, control
// characters or quotes into the download, and the Content-Disposition
// built from it parses back to the same safe name.
func TestAttachmentFilename(t *testing.T) {
	for in, want := range map[string]string{
		"notes.txt":                "notes.txt",
		"../../etc/passwd":         "passwd",
		`C:\Users\x\evil.exe`:      "evil.exe",
		"a\r\nSet-Cookie: x=1.txt": "aSet-Cookie: x=1.txt",
		`quote".html`:              "quote.html",
		"...":                      "attachment",
		"":                         "attachment",
		".hidden":                  "hidden",
		"résumé 2026.pdf":          "résumé 2026.pdf",
		"dir/\x00\x7fname.bin":     "name.bin",
	} {
		got := attachmentFilename(in)
		if got != want {
			t.Errorf("attachmentFilename(%q) = %q, want %q", in, got, want)
		}
		cd := mime.FormatMediaType("attachment", map[string]string{"filename": got})
		typ, params, err := mime.ParseMediaType(cd)
		if err != nil || typ != "attachment" || params["filename"] != got || strings.ContainsAny(cd, "\r\n") {
			t.Errorf("Content-Disposition %q for %q: %v %v", cd, got, params, err)
		}
	}
}

// mailStubs are the mail capabilities the mailbox page calls; the rule
// form's refuses a sender that is no address (invalid input) and one over
// quota.
func mailStubs(reset time.Time) []capabilities.Capability {
	ro := &capabilities.Annotations{ReadOnly: true}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[mail.ListInput, mail.ListOutput]{
			Name: "mailList", Domain: "mail", Description: "Lists.", Annotations: ro,
			Handler: func(context.Context, *capabilities.Call, mail.ListInput) (mail.ListOutput, error) {
				return mail.ListOutput{Address: "ann@mail.test"}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, mail.RuleListOutput]{
			Name: "mailRuleList", Domain: "mail", Description: "Lists rules.", Annotations: ro,
			Handler: func(context.Context, *capabilities.Call, struct{}) (mail.RuleListOutput, error) {
				return mail.RuleListOutput{}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[mail.RuleSetInput, struct{}]{
			Name: "mailRuleSet", Domain: "mail", Description: "Sets a rule.", Annotations: &capabilities.Annotations{},
			Handler: func(_ context.Context, _ *capabilities.Call, in mail.RuleSetInput) (struct{}, error) {
				if in.Sender == "busy@x.test" {
					return struct{}{}, &capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "daily limit reached", RetryAfter: reset}
				}
				return struct{}{}, capabilities.Errorf(capabilities.CodeInvalidInput, "a sender is an address (bob@example.com) or a domain (@example.com)")
			},
		}),
	}
}

// The mailbox page's rule form answers a refusal through the one table:
// a mistake in a field is the form again with formStatus's 422 and the
// refusal as a sentence, the sender kept; a quota is the error page with
// 429 and Retry-After.
func TestMailRuleFormAnswersRefusalsThroughTheTable(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	acc := newAccounts(t, s, nil)
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quietLogger()})
	if err := reg.Register(append(acc.AccountCapabilities(accounts.AccountOptions{}), mailStubs(time.Now().Add(2*time.Minute))...)...); err != nil {
		t.Fatal(err)
	}
	h := newTestHandler(t, s, func(o *Options) { o.Accounts, o.Registry = acc, reg })
	e := &pkgEnv{t: t, h: h, acc: acc, reg: reg}
	ann := e.user("ann")
	w := e.do(ann, "POST", "/account/mail/rules/set", url.Values{"sender": {"not an address"}, "action": {"block"}})
	if msg := shownMessage(w.Body.String()); w.Code != http.StatusUnprocessableEntity || msg != "A sender is an address (bob@example.com) or a domain (@example.com)." ||
		!strings.Contains(w.Body.String(), `value="not an address"`) {
		t.Errorf("a sender that is no address: %d %q", w.Code, msg)
	}
	w = e.do(ann, "POST", "/account/mail/rules/set", url.Values{"sender": {"spam@x.test"}, "action": {"shred"}})
	if msg := shownMessage(w.Body.String()); w.Code != http.StatusUnprocessableEntity || !strings.HasPrefix(msg, "Invalid arguments:") || !strings.HasSuffix(msg, ".") {
		t.Errorf("an action the schema refuses: %d %q", w.Code, msg)
	}
	w = e.do(ann, "POST", "/account/mail/rules/set", url.Values{"sender": {"busy@x.test"}, "action": {"block"}})
	if msg := shownMessage(w.Body.String()); w.Code != http.StatusTooManyRequests || msg != "Daily limit reached." || w.Header().Get("Retry-After") == "" {
		t.Errorf("over quota: %d %q (Retry-After %q)", w.Code, msg, w.Header().Get("Retry-After"))
	}
}
