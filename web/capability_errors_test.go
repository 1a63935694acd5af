package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A page whose capability call failed answers the code's status; a quota
// refusal answers 429 with Retry-After until the reset; an internal error
// shows no detail.
func TestRenderCapabilityError(t *testing.T) {
	h := newTestHandler(t, storagetest.Open(t, "sqlite"), nil)
	reset := time.Now().Add(90 * time.Second)
	quota := &capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "daily limit reached", RetryAfter: reset}
	for _, tc := range []struct {
		err        error
		status     int
		retryAfter bool
		shows      string
		hides      string
	}{
		// The registry wraps the quota's error in its own: the reset time still shows.
		{&capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "daily limit reached", Err: quota}, http.StatusTooManyRequests, true, "Daily limit reached.", ""},
		{capabilities.Errorf(capabilities.CodeNotFound, "no such note"), http.StatusNotFound, false, "No such note.", ""},
		{capabilities.Errorf(capabilities.CodeAccountSuspended, "this account is suspended"), http.StatusForbidden, false, "suspended", ""},
		{fmt.Errorf("wrapped: %w", errors.New("db password=hunter2")), http.StatusInternalServerError, false, "went wrong", "hunter2"},
	} {
		rec := httptest.NewRecorder()
		got := h.renderCapabilityError(rec, httptest.NewRequest("POST", "/notes", nil), tc.err)
		body := rec.Body.String()
		if got != tc.status || rec.Code != tc.status || !strings.Contains(body, tc.shows) || (tc.hides != "" && strings.Contains(body, tc.hides)) {
			t.Errorf("%v: status %d/%d, body %.200s", tc.err, got, rec.Code, body)
		}
		ra := rec.Header().Get("Retry-After")
		if tc.retryAfter {
			if secs, err := strconv.Atoi(ra); err != nil || secs < 80 || secs > 91 {
				t.Errorf("Retry-After %q, want about 90", ra)
			}
		} else if ra != "" {
			t.Errorf("%v: Retry-After %q", tc.err, ra)
		}
	}
}

// The admin pages' invokeFailed answers through the same table: a quota
// refusal is a 429 with Retry-After (it was a 400), a conflict a 409, and
// an internal error a 500 without detail.
func TestInvokeFailedUsesTheOneTable(t *testing.T) {
	h := newTestHandler(t, storagetest.Open(t, "sqlite"), nil)
	quota := &capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "daily limit reached", RetryAfter: time.Now().Add(time.Minute)}
	for _, tc := range []struct {
		err    error
		status int
		header string
	}{
		{quota, http.StatusTooManyRequests, "Retry-After"},
		{capabilities.Errorf(capabilities.CodeConflict, "already taken"), http.StatusConflict, ""},
		{capabilities.Errorf(capabilities.CodeNotFound, "no such user"), http.StatusNotFound, ""},
		{capabilities.Errorf(capabilities.CodeInternal, "db password=hunter2"), http.StatusInternalServerError, ""},
	} {
		rec := httptest.NewRecorder()
		h.invokeFailed(rec, httptest.NewRequest("POST", "/admin/users", nil), "admin action", tc.err)
		if rec.Code != tc.status || strings.Contains(rec.Body.String(), "hunter2") {
			t.Errorf("%v: status %d, body %.200s", tc.err, rec.Code, rec.Body.String())
		}
		if tc.header != "" && rec.Header().Get(tc.header) == "" {
			t.Errorf("%v: no %s header", tc.err, tc.header)
		}
	}
}

// refuseQuota is a capabilities.Quota that refuses the named capabilities
// until reset, as the quota service does.
type refuseQuota struct {
	names map[string]bool
	reset time.Time
}

func (q refuseQuota) Allow(_ context.Context, _ capabilities.Caller, name string) error {
	if !q.names[name] {
		return nil
	}
	return &capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "daily limit reached", RetryAfter: q.reset}
}

// A quota refusal met by a page, through the registry's own quota check,
// is a 429 with Retry-After whichever way the page answers it: the error
// page (admin invites, once a 400; the account's password form) or the
// form shown again (admin user actions).
func TestPagesAnswerAQuotaRefusalWith429(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	acc := newAccounts(t, s, nil)
	quota := refuseQuota{names: map[string]bool{"adminInviteCreate": true, "accountPasswordChange": true, "adminUserSuspend": true},
		reset: time.Now().Add(2 * time.Minute)}
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quietLogger(), Quota: quota})
	caps := append(acc.AccountCapabilities(accounts.AccountOptions{}), acc.InviteCapabilities()...)
	if err := reg.Register(append(caps, acc.AdminCapabilities(accounts.AdminOptions{})...)...); err != nil {
		t.Fatal(err)
	}
	h := newTestHandler(t, s, func(o *Options) { o.Accounts, o.Registry = acc, reg })
	e := &pkgEnv{t: t, h: h, acc: acc, reg: reg}
	ada, bob := e.user("ada"), e.user("bob")
	if _, err := acc.Roles.GrantAdminAsOperator(t.Context(), ada.u.ID); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		path string
		form url.Values
	}{
		{"admin invite", "/admin/invites", url.Values{"note": {"for the team"}}},
		{"account password", pathAccountPass, url.Values{"current": {"a long password for ada"}, "next": {"another long password"}}},
		{"admin user action", "/admin/users/" + bob.u.StableID + "/suspend", url.Values{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := e.do(ada, "POST", tc.path, tc.form)
			if w.Code != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429: %.300s", w.Code, shownMessage(w.Body.String()))
			}
			if secs, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || secs < 100 || secs > 121 {
				t.Errorf("Retry-After %q, want about 120", w.Header().Get("Retry-After"))
			}
			if msg := shownMessage(w.Body.String()); msg != "Daily limit reached." {
				t.Errorf("shows %q", msg)
			}
		})
	}
	// The refused calls changed nothing.
	if _, err := acc.Credentials.Login(t.Context(), "ada@example.com", "a long password for ada"); err != nil {
		t.Errorf("ada's password changed: %v", err)
	}
	if u, err := acc.Identity.UserByID(t.Context(), bob.u.ID); err != nil || u.State() != accounts.StateActive {
		t.Errorf("bob: %+v %v", u, err)
	}
}

// /account/export.json answers a quota refusal of accountExportManifest
// in JSON: 429 with Retry-After, the refusal's code and message, never
// cached, and no manifest.
func TestExportJSONAnswersAQuotaRefusalWith429(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	acc := newAccounts(t, s, nil)
	lc := newLifecycle(t, s, acc)
	quota := refuseQuota{names: map[string]bool{"accountExportManifest": true}, reset: time.Now().Add(2 * time.Minute)}
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quietLogger(), Quota: quota})
	if err := reg.Register(lc.Capabilities(lifecycle.Owners(acc))...); err != nil {
		t.Fatal(err)
	}
	h := newTestHandler(t, s, func(o *Options) { o.Accounts, o.Registry, o.Lifecycle = acc, reg, lc })
	e := &pkgEnv{t: t, h: h, acc: acc, reg: reg}
	ada := e.user("ada")
	w := e.do(ada, "GET", pathExportJSON, nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429: %s", w.Code, w.Body)
	}
	if secs, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || secs < 100 || secs > 121 {
		t.Errorf("Retry-After %q, want about 120", w.Header().Get("Retry-After"))
	}
	if got := strings.TrimSpace(w.Body.String()); got != `{"error":"quota_exceeded","message":"Daily limit reached."}` {
		t.Errorf("body %s", got)
	}
	if w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Content-Disposition") != "" {
		t.Errorf("headers %v", w.Header())
	}
}
