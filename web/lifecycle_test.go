package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// fakeApps is an in-memory ConnectedApps keyed by user.
type fakeApps struct {
	mu     sync.Mutex
	grants map[int64][]oauth.Grant
}

func (f *fakeApps) Grants(_ context.Context, userID int64) ([]oauth.Grant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]oauth.Grant(nil), f.grants[userID]...), nil
}

func (f *fakeApps) RevokeGrant(_ context.Context, userID int64, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, g := range f.grants[userID] {
		if g.ID == id {
			f.grants[userID] = append(f.grants[userID][:i], f.grants[userID][i+1:]...)
			return nil
		}
	}
	return oauth.ErrGrantNotFound
}

func newLifecycle(t *testing.T, s *storage.Store, acc *accounts.Service) *lifecycle.Service {
	t.Helper()
	inv := storage.NewInventory()
	if err := lifecycle.RegisterInventory(inv); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []storage.Table{
		{Name: "email_claims", KeyColumn: "email"},
		{Name: "password_setup_tokens", KeyColumn: "token_hash", SkipExport: true},
		{Name: "mail_tokens", KeyColumn: "token_hash", SkipExport: true},
	} {
		if err := inv.AddTable(tbl); err != nil {
			t.Fatal(err)
		}
	}
	return lifecycle.New(s, inv, acc, lifecycle.Options{Logger: quietLogger()})
}

func TestConnectedApps(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	apps := &fakeApps{grants: map[int64][]oauth.Grant{}}
	h := newTestHandler(t, s, func(o *Options) { o.OAuth = apps })
	srv := serve(t, h)
	ann, bob := newBrowser(t, srv), newBrowser(t, srv)
	annU := signedIn(t, h, ann, "ann@example.com", "ann", false)
	bobU := signedIn(t, h, bob, "bob@example.com", "bob", false)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	apps.grants[annU.ID] = []oauth.Grant{{ID: "g1", ClientID: "c1", ClientName: "Claude Desktop", Scopes: []string{"mcp"}, CreatedAt: now, LastUsedAt: now}}
	apps.grants[bobU.ID] = []oauth.Grant{{ID: "g2", ClientID: "c2", ClientName: "Bob's Agent", Scopes: []string{"mcp"}, CreatedAt: now}}

	expect(t, "apps", ann.get("/account/apps"), http.StatusOK, "Claude Desktop", "2026-03-01 12:00 UTC")
	if strings.Contains(ann.get("/account/apps").Body, "Bob") {
		t.Fatal("ann sees bob's app")
	}
	// Another person's grant cannot be revoked.
	expect(t, "revoke other's", ann.post("/account/apps/g2/revoke", nil), http.StatusNotFound)
	if g, _ := apps.Grants(t.Context(), bobU.ID); len(g) != 1 {
		t.Fatal("bob's grant was revoked by ann")
	}
	if a := ann.post("/account/apps/g1/revoke", nil); a.Status != http.StatusSeeOther {
		t.Fatalf("revoke: %d", a.Status)
	}
	expect(t, "apps after revoke", ann.get("/account/apps?notice=app-revoked"), http.StatusOK, "No app is connected", "disconnected")
}

func TestExportAndDelete(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		acc := newAccounts(t, s, nil)
		h := newTestHandler(t, s, func(o *Options) {
			o.Accounts = acc
			o.Lifecycle = newLifecycle(t, s, acc)
			o.CredentialLimit = Limit{Requests: 1000}
		})
		srv := serve(t, h)
		ann := newBrowser(t, srv)
		u := signedIn(t, h, ann, "ann@example.com", "ann", false)

		a := ann.get("/account/export/manifest.json")
		expect(t, "manifest", a, http.StatusOK)
		if !strings.Contains(a.Header.Get("Content-Disposition"), "attachment") {
			t.Fatalf("manifest is not a download: %v", a.Header)
		}
		var m lifecycle.Manifest
		if err := json.Unmarshal([]byte(a.Body), &m); err != nil || m.User.StableUserID != u.StableID {
			t.Fatalf("manifest %q: %v", a.Body, err)
		}
		a = ann.get("/account/export/data.json")
		if a.Status != http.StatusOK || !json.Valid([]byte(a.Body)) || strings.Contains(a.Body, "argon2") {
			t.Fatalf("export: %d valid=%v\n%s", a.Status, json.Valid([]byte(a.Body)), a.Body)
		}

		expect(t, "delete page", ann.get("/account/delete"), http.StatusOK, "Type your username")
		expect(t, "wrong confirmation", ann.post("/account/delete", url.Values{"confirm": {"someone"}, "password": {testPassword}}), http.StatusUnprocessableEntity)
		expect(t, "wrong password", ann.post("/account/delete", url.Values{"confirm": {"ann"}, "password": {"wrong password!"}}), http.StatusUnauthorized)
		expect(t, "cross-site delete", func() answer {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/account/delete", strings.NewReader("confirm=ann&password="+url.QueryEscape(testPassword)))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Sec-Fetch-Site", "cross-site")
			return ann.do(req)
		}(), http.StatusForbidden)
		a = ann.post("/account/delete", url.Values{"confirm": {"ann"}, "password": {testPassword}})
		expect(t, "delete", a, http.StatusOK, "Your account is deleted", "sql:users")
		if _, err := acc.Identity.UserByID(t.Context(), u.ID); err == nil {
			t.Fatal("account still exists")
		}
		if a := ann.get("/account"); a.Status != http.StatusSeeOther {
			t.Fatalf("signed in after deletion: %d", a.Status)
		}
	})
}

func TestOAuthLoginAndConsent(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	h := newTestHandler(t, s, func(o *Options) { o.CredentialLimit = Limit{Requests: 2} })
	u, err := h.opts.Accounts.Identity.Signup(t.Context(), accounts.SignupInput{Email: "ann@example.com", Username: "ann", Password: testPassword})
	if err != nil {
		t.Fatal(err)
	}
	req := &oauth.AuthorizeRequest{ClientID: "c1", ClientName: "Agent <X>", RedirectHost: "agent.example", Scopes: []string{"mcp"},
		FormAction: "/oauth/authorize?client_id=c1&state=abcdefgh"}
	call := func(method string, form url.Values, headers map[string]string, cookies ...*http.Cookie) (*httptest.ResponseRecorder, int64, bool) {
		var r *http.Request
		if form != nil {
			r = httptest.NewRequest(method, "http://enclave.test"+req.FormAction, strings.NewReader(form.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		} else {
			r = httptest.NewRequest(method, "http://enclave.test"+req.FormAction, nil)
		}
		for k, v := range headers {
			r.Header.Set(k, v)
		}
		for _, c := range cookies {
			r.AddCookie(c)
		}
		w := httptest.NewRecorder()
		id, ok := h.Login(w, r, req)
		return w, id, ok
	}
	sameOrigin := map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://enclave.test"}

	// Signed out: the login form posts back to the authorization endpoint.
	w, _, ok := call("GET", nil, nil)
	if ok || w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `action="/oauth/authorize?client_id=c1&amp;state=abcdefgh"`) ||
		!strings.Contains(w.Body.String(), "Agent &lt;X&gt;") {
		t.Fatalf("login form: %v %d\n%s", ok, w.Code, w.Body)
	}
	checkSecurityHeaders(t, "oauth login", w.Header(), false)
	// A cross-site credential post is refused.
	if w, _, ok := call("POST", url.Values{"email": {"ann@example.com"}, "password": {testPassword}}, map[string]string{"Sec-Fetch-Site": "cross-site"}); ok || w.Code != http.StatusForbidden {
		t.Fatalf("cross-site login: %v %d", ok, w.Code)
	}
	// Wrong password, then the right one: a session starts.
	if w, _, ok := call("POST", url.Values{"email": {"ann@example.com"}, "password": {"wrong password!"}}, sameOrigin); ok || w.Code != http.StatusUnauthorized {
		t.Fatalf("wrong password: %v %d", ok, w.Code)
	}
	w, id, ok := call("POST", url.Values{"email": {"ann@example.com"}, "password": {testPassword}}, sameOrigin)
	if !ok || id != u.ID || len(w.Result().Cookies()) == 0 {
		t.Fatalf("login: %v %d %d", ok, id, w.Code)
	}
	session := w.Result().Cookies()[0]
	// The shared bucket (2 here) is spent: the next credential post gets 429.
	if w, _, ok := call("POST", url.Values{"email": {"ann@example.com"}, "password": {testPassword}}, sameOrigin); ok || w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("over the limit: %v %d", ok, w.Code)
	}
	// With the session cookie, Login answers at once.
	if _, id, ok := call("GET", nil, nil, session); !ok || id != u.ID {
		t.Fatalf("signed-in login: %v %d", ok, id)
	}

	consent := func(form url.Values, headers map[string]string) (*httptest.ResponseRecorder, bool, bool) {
		var r *http.Request
		if form == nil {
			r = httptest.NewRequest("GET", "http://enclave.test"+req.FormAction, nil)
		} else {
			r = httptest.NewRequest("POST", "http://enclave.test"+req.FormAction, strings.NewReader(form.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for k, v := range headers {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		approved, ok := h.Consent(w, r, req, u.ID)
		return w, approved, ok
	}
	w, _, ok = consent(nil, nil)
	if ok || w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `name="decision" value="approve"`) || !strings.Contains(w.Body.String(), "agent.example") {
		t.Fatalf("consent page: %v %d\n%s", ok, w.Code, w.Body)
	}
	checkSecurityHeaders(t, "consent", w.Header(), false)
	if w, _, ok := consent(url.Values{"decision": {"approve"}}, map[string]string{"Sec-Fetch-Site": "cross-site"}); ok || w.Code != http.StatusForbidden {
		t.Fatalf("cross-site consent: %v %d", ok, w.Code)
	}
	if _, approved, ok := consent(url.Values{"decision": {"approve"}}, sameOrigin); !ok || !approved {
		t.Fatalf("approve: %v %v", approved, ok)
	}
	if _, approved, ok := consent(url.Values{"decision": {"deny"}}, sameOrigin); !ok || approved {
		t.Fatalf("deny: %v %v", approved, ok)
	}
}

// A person whose deletion failed midway signs in to a page that says so,
// and finishes it from there; the session works nowhere else.
func TestDeletionFailedMidwayCanBeFinished(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		acc := newAccounts(t, s, nil)
		var fail atomic.Bool
		inv := storage.NewInventory()
		if err := lifecycle.RegisterInventory(inv); err != nil {
			t.Fatal(err)
		}
		for _, tbl := range []storage.Table{{Name: "email_claims", KeyColumn: "email"}, {Name: "mail_tokens", KeyColumn: "token_hash", SkipExport: true}} {
			if err := inv.AddTable(tbl); err != nil {
				t.Fatal(err)
			}
		}
		lc := lifecycle.New(s, inv, acc, lifecycle.Options{Logger: quietLogger(), Hooks: []lifecycle.Hook{{Name: "flaky", Run: func(context.Context, storage.Owner) error {
			if fail.Load() {
				return errors.New("the revocation service is down")
			}
			return nil
		}}}})
		h := newTestHandler(t, s, func(o *Options) {
			o.Accounts = acc
			o.Lifecycle = lc
			o.CredentialLimit = Limit{Requests: 1000}
		})
		srv := serve(t, h)
		ann := newBrowser(t, srv)
		u := signedIn(t, h, ann, "ann@example.com", "ann", false)

		fail.Store(true)
		expect(t, "failed deletion", ann.post("/account/delete", url.Values{"confirm": {"ann"}, "password": {testPassword}}),
			http.StatusInternalServerError, "sign in again later to retry")
		if got, err := acc.Identity.UserByID(t.Context(), u.ID); err != nil || got.DeletingAt == nil {
			t.Fatalf("after the failure: %+v, %v; want kept and marked deleting", got, err)
		}

		// Signing in again leads to the deletion page, which says so.
		b := newBrowser(t, srv)
		expect(t, "wrong password", b.post("/login", url.Values{"email": {"ann@example.com"}, "password": {"not the password"}}), http.StatusUnauthorized)
		a := b.post("/login", url.Values{"email": {"ann@example.com"}, "password": {testPassword}})
		if a.Status != http.StatusSeeOther || a.Location != "/account/delete" {
			t.Fatalf("sign-in of a half-deleted account: %d %q\n%s", a.Status, a.Location, a.Body)
		}
		expect(t, "pending deletion page", b.get("/account/delete"), http.StatusOK, `id="deletion-pending"`, "Finish deleting my account")
		for _, path := range []string{"/account", "/account/export", "/account/export/data.json"} {
			if a := b.get(path); a.Status != http.StatusSeeOther {
				t.Fatalf("GET %s with the deleting session: %d, want a redirect to sign in", path, a.Status)
			}
		}
		expect(t, "wrong confirmation", b.post("/account/delete", url.Values{"confirm": {"someone"}, "password": {testPassword}}), http.StatusUnprocessableEntity, `id="deletion-pending"`)

		fail.Store(false)
		expect(t, "finish deletion", b.post("/account/delete", url.Values{"confirm": {"ann"}, "password": {testPassword}}), http.StatusOK, "Your account is deleted")
		if _, err := acc.Identity.UserByID(t.Context(), u.ID); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("account after the retry: %v", err)
		}
		if a := b.post("/login", url.Values{"email": {"ann@example.com"}, "password": {testPassword}}); a.Status != http.StatusUnauthorized {
			t.Fatalf("sign-in after deletion: %d", a.Status)
		}
	})
}
