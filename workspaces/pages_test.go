package workspaces_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/web"
)

type browser struct {
	t      *testing.T
	s      *enclavetest.Server
	cookie *http.Cookie
}

func (b browser) do(method, path string, form url.Values) *httptest.ResponseRecorder {
	b.t.Helper()
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	req.AddCookie(b.cookie)
	rec := httptest.NewRecorder()
	b.s.Handler().ServeHTTP(rec, req)
	return rec
}

func signIn(t *testing.T, s *enclavetest.Server, u *enclavetest.User) browser {
	t.Helper()
	user, err := s.Accounts().Identity.UserByID(context.Background(), u.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	if _, err := s.Accounts().Credentials.StartSession(rec, httptest.NewRequest("POST", "/login", nil), user, false); err != nil {
		t.Fatal(err)
	}
	return browser{t: t, s: s, cookie: rec.Result().Cookies()[0]}
}

var hidden = regexp.MustCompile(`name="confirmationToken" value="([^"]+)"`)

// TestWorkspacePages drives membership through the web shell: every page
// parses, invokes the capability as the signed-in person, and renders.
func TestWorkspacePages(t *testing.T) {
	box := &mailbox{}
	opts := workspaceServer()
	opts.Config.Mailer = box
	s := enclavetest.Start(t, opts)
	annU, bobU, eveU := s.CreateUser(t, "ann"), s.CreateUser(t, "bob"), s.CreateUser(t, "eve")
	ann, bob, eve := signIn(t, s, annU), signIn(t, s, bobU), signIn(t, s, eveU)

	rec := ann.do("POST", "/workspaces", url.Values{"name": {"Festival"}})
	if rec.Code != http.StatusSeeOther && rec.Code != http.StatusFound {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	page := rec.Header().Get("Location")
	if !strings.Contains(page, "/workspaces/w_") {
		t.Fatalf("redirect to %q", page)
	}
	rec = ann.do("GET", "/workspaces", nil)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "Festival") {
		t.Fatalf("list: %d", rec.Code)
	}
	if !strings.Contains(rec.Body.String(), `href="/workspaces"`) {
		t.Fatal("no link to the workspaces in the navigation")
	}
	if !strings.Contains(rec.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Fatal("workspace page without security headers")
	}
	if rec := ann.do("POST", "/workspaces", url.Values{"name": {"  "}}); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("empty name: %d", rec.Code)
	}
	// A non-member gets 404, like an unknown workspace.
	if rec := eve.do("GET", page, nil); rec.Code != 404 {
		t.Fatalf("non-member: %d", rec.Code)
	}
	if rec := eve.do("GET", "/workspaces/w_aaaaaaaaaaaaaaaaaaaaaaaaaa", nil); rec.Code != 404 {
		t.Fatalf("unknown: %d", rec.Code)
	}

	rec = ann.do("POST", page+"/invite", url.Values{"email": {bobU.Email}, "role": {"admin"}})
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "Invitation sent") {
		t.Fatalf("invite: %d", rec.Code)
	}
	tok := box.token(t, bobU.Email, 0)
	if rec := bob.do("GET", "/workspaces/join?token="+tok, nil); rec.Code != 200 || !strings.Contains(rec.Body.String(), tok) {
		t.Fatalf("join form: %d", rec.Code)
	}
	if rec := eve.do("POST", "/workspaces/join", url.Values{"token": {tok}}); rec.Code != 404 {
		t.Fatalf("join by the wrong person: %d", rec.Code)
	}
	if rec := bob.do("POST", "/workspaces/join", url.Values{"token": {tok}}); rec.Header().Get("Location") != page {
		t.Fatalf("join: %d → %q", rec.Code, rec.Header().Get("Location"))
	}
	rec = bob.do("GET", page, nil)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `<strong id="role">admin</strong>`) {
		t.Fatalf("bob's page: %d", rec.Code)
	}
	// The last owner cannot leave: a conflict, and the page says why.
	if rec := ann.do("POST", page+"/leave", url.Values{}); rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "at least one owner") {
		t.Fatalf("last owner leaving: %d", rec.Code)
	}
	// An API key takes the current password, and is shown once.
	rec = ann.do("POST", page+"/keys", url.Values{"name": {"agent"}, "maxRole": {"viewer"}, "currentPassword": {"not the password"}})
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), "current password is not correct") || strings.Contains(rec.Body.String(), "ewk_") {
		t.Fatalf("key with a wrong password: %d", rec.Code)
	}
	rec = ann.do("POST", page+"/keys", url.Values{"name": {"agent"}, "maxRole": {"viewer"}, "currentPassword": {annU.Password}})
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "ewk_") {
		t.Fatalf("key: %d", rec.Code)
	}
	if rec := ann.do("GET", page, nil); strings.Contains(rec.Body.String(), "ewk_") {
		t.Fatal("a key is shown twice")
	}
	// The owner is told by mail, and the account's security page lists
	// the live key with its workspace, and revokes it.
	box.wait(t, annU.Email, "A workspace API key was created")
	rec = ann.do("GET", "/account/security", nil)
	sec := rec.Body.String()
	keyRow := regexp.MustCompile(`(?s)<tr class="workspace-key">.*?Festival.*?<td[^>]*>agent</td>.*?action="(/account/security/workspace-keys/\d+/revoke)"`).FindStringSubmatch(sec)
	if rec.Code != 200 || keyRow == nil || strings.Contains(sec, "ewk_") {
		t.Fatalf("security page: %d, key listed %v", rec.Code, keyRow != nil)
	}
	if rec := bob.do("GET", "/account/security", nil); strings.Contains(rec.Body.String(), `class="workspace-key"`) {
		t.Fatal("bob's security page lists ann's key")
	}
	wsID := strings.TrimPrefix(page, "/workspaces/")
	if rec := bob.do("POST", keyRow[1], url.Values{"workspaceId": {wsID}}); rec.Code != http.StatusNotFound {
		t.Fatalf("bob revokes ann's key: %d", rec.Code)
	}
	if rec := ann.do("POST", keyRow[1], url.Values{"workspaceId": {wsID}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("revoke from the security page: %d %s", rec.Code, rec.Body)
	}
	if rec := ann.do("GET", "/account/security?notice=workspace-key-revoked", nil); strings.Contains(rec.Body.String(), `class="workspace-key"`) || !strings.Contains(rec.Body.String(), "key is revoked") {
		t.Fatal("the revoked key is still listed")
	}
	// Delete in two steps; bob loses the page.
	rec = ann.do("POST", page+"/delete", url.Values{})
	m := hidden.FindStringSubmatch(rec.Body.String())
	if rec.Code != 200 || m == nil {
		t.Fatalf("delete step one: %d", rec.Code)
	}
	if rec := bob.do("POST", page+"/delete", url.Values{"confirmationToken": {m[1]}}); rec.Code != 404 {
		t.Fatalf("admin deleting: %d", rec.Code)
	}
	if rec := ann.do("POST", page+"/delete", url.Values{"confirmationToken": {m[1]}}); rec.Header().Get("Location") != "/workspaces" {
		t.Fatalf("delete: %d", rec.Code)
	}
	if rec := bob.do("GET", page, nil); rec.Code != 404 {
		t.Fatalf("after delete: %d", rec.Code)
	}
}

// wait waits for a message to addr whose subject holds subject.
func (m *mailbox) wait(t *testing.T, addr, subject string) web.Message {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		m.mu.Lock()
		for _, msg := range m.msgs {
			if msg.To == addr && strings.Contains(msg.Subject, subject) {
				m.mu.Unlock()
				return msg
			}
		}
		m.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no message %q reached %s", subject, addr)
	return web.Message{}
}

// Making a key checks the password: the form counts in the per-client
// credential bucket the sign-in form uses, so it is no password oracle.
func TestWorkspaceKeyFormRateLimited(t *testing.T) {
	s := enclavetest.Start(t, workspaceServer())
	annU := s.CreateUser(t, "ann")
	ann := signIn(t, s, annU)
	rec := ann.do("POST", "/workspaces", url.Values{"name": {"Limits"}})
	page := rec.Header().Get("Location")
	wrong := url.Values{"name": {"agent"}, "maxRole": {"viewer"}, "currentPassword": {"a guess"}}
	for i := range web.DefaultCredentialRequests {
		if rec := ann.do("POST", page+"/keys", wrong); rec.Code != http.StatusUnprocessableEntity {
			t.Fatalf("guess %d: %d", i, rec.Code)
		}
	}
	rec = ann.do("POST", page+"/keys", url.Values{"name": {"agent"}, "maxRole": {"viewer"}, "currentPassword": {annU.Password}})
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || strings.Contains(rec.Body.String(), "ewk_") {
		t.Fatalf("past the bucket: %d", rec.Code)
	}
	if rec := ann.do("POST", "/login", url.Values{"email": {annU.Email}, "password": {annU.Password}}); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("sign-in after the key guesses: %d", rec.Code)
	}
}
