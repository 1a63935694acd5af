package web

import (
	"context"
	"errors"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/feedback"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

var (
	alertRe     = regexp.MustCompile(`(?s)<p class="error" role="alert">(.*?)</p>`)
	errorPageRe = regexp.MustCompile(`(?s)<main[^>]*>.*?</h1>\s*<p>(.*?)</p>`)
)

// shownMessage is the refusal a page shows: a form's alert, else the
// error page's paragraph.
func shownMessage(body string) string {
	if m := alertRe.FindStringSubmatch(body); m != nil {
		return html.UnescapeString(strings.TrimSpace(m[1]))
	}
	if m := errorPageRe.FindStringSubmatch(body); m != nil {
		return html.UnescapeString(strings.TrimSpace(m[1]))
	}
	return ""
}

// leakWords are what internal errors say and pages must not.
var leakWords = []string{"sqlite", "sql:", "constraint", "pq:", "feedback:", "hunter2", "goroutine", "userConfirmed", "%!"}

// checkSentence fails unless msg is a sentence (capital first letter,
// full stop) that leaks nothing.
func checkSentence(t *testing.T, what, msg string) {
	t.Helper()
	first, _ := utf8.DecodeRuneInString(msg)
	last, _ := utf8.DecodeLastRuneInString(msg)
	if msg == "" || !unicode.IsUpper(first) || last != '.' {
		t.Errorf("%s: %q is not a sentence", what, msg)
	}
	for _, w := range leakWords {
		if strings.Contains(strings.ToLower(msg), strings.ToLower(w)) {
			t.Errorf("%s: %q leaks %q", what, msg, w)
		}
	}
}

// stubFeedback registers the feedback capabilities (names and inputs as
// feedback.Service defines them) failing with whatever *next holds, so
// each refusal the pages can meet is driven.
func stubFeedback(next *error) []capabilities.Capability {
	fail := func() error { err := *next; return err }
	admin := capabilities.Requirement{Role: capabilities.RoleAdmin}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[feedback.SubmitInput, feedback.SubmitOutput]{
			Name: "feedbackSubmit", Domain: "feedback", Title: "Send feedback", Description: "Stub.",
			Annotations: &capabilities.Annotations{},
			Handler: func(_ context.Context, _ *capabilities.Call, in feedback.SubmitInput) (feedback.SubmitOutput, error) {
				if !in.UserConfirmed {
					return feedback.SubmitOutput{}, capabilities.Errorf(capabilities.CodeInvalidInput,
						"userConfirmed must be true: show the person the exact text and send it only after they approve")
				}
				return feedback.SubmitOutput{}, fail()
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, feedback.ListOwnOutput]{
			Name: "feedbackListOwn", Domain: "feedback", Title: "List feedback", Description: "Stub.",
			Annotations: &capabilities.Annotations{ReadOnly: true},
			Handler: func(context.Context, *capabilities.Call, struct{}) (feedback.ListOwnOutput, error) {
				return feedback.ListOwnOutput{}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[feedback.AdminListInput, feedback.AdminListOutput]{
			Name: "adminFeedbackList", Domain: "feedback", Title: "List feedback", Description: "Stub.", Requires: admin,
			Annotations: &capabilities.Annotations{ReadOnly: true},
			Handler: func(context.Context, *capabilities.Call, feedback.AdminListInput) (feedback.AdminListOutput, error) {
				return feedback.AdminListOutput{}, fail()
			},
		}),
		capabilities.Define(capabilities.Spec[feedback.AdminGetInput, feedback.AdminGetOutput]{
			Name: "adminFeedbackGet", Domain: "feedback", Title: "Get feedback", Description: "Stub.", Requires: admin,
			Annotations: &capabilities.Annotations{ReadOnly: true},
			Handler: func(context.Context, *capabilities.Call, feedback.AdminGetInput) (feedback.AdminGetOutput, error) {
				return feedback.AdminGetOutput{}, fail()
			},
		}),
		capabilities.Define(capabilities.Spec[feedback.AdminUpdateInput, feedback.AdminUpdateOutput]{
			Name: "adminFeedbackUpdate", Domain: "feedback", Title: "Update feedback", Description: "Stub.", Requires: admin,
			Annotations: &capabilities.Annotations{},
			Handler: func(context.Context, *capabilities.Call, feedback.AdminUpdateInput) (feedback.AdminUpdateOutput, error) {
				return feedback.AdminUpdateOutput{}, fail()
			},
		}),
	}
}

// Every refusal the feedback pages meet, from the domain's own checks or
// the capabilities, shows a sentence that says what to do and leaks no
// internal detail, with the status each path answers.
func TestFeedbackRefusalsAreSentences(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	acc := newAccounts(t, s, nil)
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quietLogger()})
	var next error
	if err := reg.Register(append(acc.AccountCapabilities(accounts.AccountOptions{}), stubFeedback(&next)...)...); err != nil {
		t.Fatal(err)
	}
	h := newTestHandler(t, s, func(o *Options) { o.Accounts, o.Registry = acc, reg })
	e := &pkgEnv{t: t, h: h, acc: acc, reg: reg}
	u, _, err := acc.Identity.CreateUser(t.Context(), accounts.CreateUserInput{Email: "ada@example.com", Username: "ada", Password: "a long password for ada", Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acc.Roles.GrantAdminAsOperator(t.Context(), u.ID); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	if _, err := acc.Credentials.StartSession(w, httptest.NewRequest("GET", "http://enclave.test/", nil), u, false); err != nil {
		t.Fatal(err)
	}
	ada := &pkgUser{u: u, cookie: w.Result().Cookies()[0]}

	form := func(kv ...string) url.Values {
		v := url.Values{"category": {"bug"}, "summary": {"Export fails"}, "details": {"It fails."}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	for _, tc := range []struct {
		name         string
		method, path string
		form         url.Values
		err          error
		status       int
		want         string // the exact message, or a prefix of it
	}{
		{"empty summary", "POST", "/account/feedback/preview", form("summary", " "), nil, http.StatusUnprocessableEntity, "Summary is required."},
		{"long summary", "POST", "/account/feedback/preview", form("summary", strings.Repeat("x", 1000)), nil, http.StatusUnprocessableEntity, "Summary must be at most"},
		{"unknown category", "POST", "/account/feedback/preview", form("category", "rant"), nil, http.StatusUnprocessableEntity, "Category must be one of"},
		{"control characters", "POST", "/account/feedback/preview", form("details", "a\x00b"), nil, http.StatusBadRequest, "The form contains characters that are not allowed."},
		{"send without the preview's button", "POST", "/account/feedback", form(), nil, http.StatusUnprocessableEntity, feedbackUnconfirmedMessage},
		{"rate limit", "POST", "/account/feedback", form("confirm", "yes"),
			&capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "at most 5 submissions per hour; try again later"},
			http.StatusTooManyRequests, "At most 5 submissions per hour; try again later."},
		{"invalid input carrying a driver's words", "POST", "/account/feedback", form("confirm", "yes"),
			&capabilities.Error{Code: capabilities.CodeInvalidInput, Message: "feedback: insert: sqlite: constraint failed: UNIQUE"},
			http.StatusUnprocessableEntity, refusedMessage},
		{"internal failure", "POST", "/account/feedback", form("confirm", "yes"),
			errors.New("pq: password=hunter2 authentication failed"), http.StatusInternalServerError, "Something went wrong on our side. Please try again."},
		// The registry's own schema check answers before the capability.
		{"unknown status filter", "GET", "/admin/feedback?status=lost", nil, nil, http.StatusBadRequest, "Invalid arguments: status must be one of"},
		{"refused cursor", "GET", "/admin/feedback?cursor=zz", nil,
			capabilities.Errorf(capabilities.CodeInvalidInput, "cursor is not one this list gave"),
			http.StatusBadRequest, "Cursor is not one this list gave."},
		{"unknown feedback", "GET", "/admin/feedback/nope", nil,
			capabilities.Errorf(capabilities.CodeNotFound, "no feedback has the id %q", "nope"), http.StatusNotFound, `No feedback has the id "nope".`},
		{"refused transition", "POST", "/admin/feedback/abc", url.Values{"status": {"triaged"}, "note": {"x"}},
			capabilities.Errorf(capabilities.CodeConflict, "feedback that is resolved cannot become triaged"),
			http.StatusConflict, "Feedback that is resolved cannot become triaged."},
		{"a field named as agents see it", "POST", "/admin/feedback/abc", url.Values{"status": {"triaged"}},
			capabilities.Errorf(capabilities.CodeInvalidInput, "adminNote must be at most 2000 characters"),
			http.StatusBadRequest, "The adminNote field must be at most 2000 characters."},
		{"note with control characters", "POST", "/admin/feedback/abc", url.Values{"status": {"triaged"}, "note": {"a\x00"}}, nil,
			http.StatusBadRequest, "The form contains characters that are not allowed."},
		{"admin internal failure", "GET", "/admin/feedback/abc", nil,
			&capabilities.Error{Code: capabilities.CodeInternal, Message: "sql: no rows in result set"},
			http.StatusInternalServerError, "Something went wrong on our side. Please try again."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next = tc.err
			w := e.do(ada, tc.method, tc.path, tc.form)
			msg := shownMessage(w.Body.String())
			if w.Code != tc.status {
				t.Errorf("status %d, want %d (%q)", w.Code, tc.status, msg)
			}
			if !strings.HasPrefix(msg, tc.want) {
				t.Errorf("shows %q, want %q", msg, tc.want)
			}
			checkSentence(t, tc.name, msg)
		})
	}
}

// A capability refusal rendered by renderCapabilityError or invokeFailed
// is a sentence, whatever the capability wrote: lowercase fragments gain
// a capital and a full stop, an opening field name is named as a field,
// and a message carrying internal detail is replaced; statuses follow
// the code.
func TestCapabilityRefusalsAreSentences(t *testing.T) {
	h := newTestHandler(t, storagetest.Open(t, storage.SQLite), nil)
	for _, tc := range []struct {
		err    error
		status int
		want   string
	}{
		{capabilities.Errorf(capabilities.CodeNotFound, "no such note"), http.StatusNotFound, "No such note."},
		{capabilities.Errorf(capabilities.CodeInvalidInput, "expiresInDays must be between 1 and 90"), http.StatusBadRequest, "The expiresInDays field must be between 1 and 90."},
		{capabilities.Errorf(capabilities.CodeConflict, "the last owner cannot leave; hand over ownership first"), http.StatusConflict, "The last owner cannot leave; hand over ownership first."},
		{capabilities.Errorf(capabilities.CodeInvalidInput, "memory: save: sqlite: constraint failed"), http.StatusBadRequest, refusedMessage},
		{&capabilities.Error{Code: capabilities.CodeInvalidInput, Message: "bad value %!d(string=x)"}, http.StatusBadRequest, refusedMessage},
		{&capabilities.Error{Code: capabilities.CodeConflict}, http.StatusConflict, refusedMessage},
		{capabilities.Errorf(capabilities.CodeAccountSuspended, "this account is suspended"), http.StatusForbidden, "This account is suspended."},
		{capabilities.Errorf(capabilities.CodeInvalidInput, "description: at most 500 characters"), http.StatusBadRequest, "Description: at most 500 characters."},
		{capabilities.Errorf(capabilities.CodeInvalidInput, "workspaces: add member: unexpected EOF"), http.StatusBadRequest, refusedMessage},
		{capabilities.Errorf(capabilities.CodeInternal, "sql: connection refused"), http.StatusInternalServerError, "Something went wrong on our side. Please try again."},
	} {
		rec := httptest.NewRecorder()
		got := h.renderCapabilityError(rec, httptest.NewRequest("GET", "/x", nil), tc.err)
		msg := shownMessage(rec.Body.String())
		if got != tc.status || rec.Code != tc.status || msg != tc.want {
			t.Errorf("renderCapabilityError(%v): %d/%d %q, want %d %q", tc.err, got, rec.Code, msg, tc.status, tc.want)
		}
		checkSentence(t, tc.err.Error(), msg)

		rec = httptest.NewRecorder()
		h.invokeFailed(rec, httptest.NewRequest("GET", "/x", nil), "test", tc.err)
		if msg := shownMessage(rec.Body.String()); msg != tc.want {
			t.Errorf("invokeFailed(%v): %q, want %q", tc.err, msg, tc.want)
		}
	}
}

// A failed run on the packages page says what happened in a sentence; the
// sandbox's own failure shows no detail.
func TestRunFailureIsASentence(t *testing.T) {
	for _, tc := range []struct {
		f    codemode.RunFailure
		want string
	}{
		{codemode.RunFailure{Kind: "limit", Limit: "timeout"}, "The run stopped at its time limit."},
		{codemode.RunFailure{Kind: "limit", Limit: "hostCalls"}, "The run stopped at its host call limit."},
		{codemode.RunFailure{Kind: "exception", Message: "boom at https://example.com/x"}, "The program threw an error: boom at https://example.com/x."},
		{codemode.RunFailure{Kind: "syntax"}, "The program does not parse."},
		{codemode.RunFailure{Kind: "busy"}, "The server was too busy to run it. Try again in a moment."},
		{codemode.RunFailure{Kind: "internal", Message: "sandbox: wasm trap: out of bounds"}, "The run failed on our side. Try again."},
	} {
		got := runFailure(&tc.f)
		if got != tc.want {
			t.Errorf("runFailure(%+v) = %q, want %q", tc.f, got, tc.want)
		}
		checkSentence(t, tc.f.Kind, got)
	}
}
