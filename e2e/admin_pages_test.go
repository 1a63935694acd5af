package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

type recorderClient struct {
	t      *testing.T
	srv    *enclave.Server
	cookie *http.Cookie
}

func (c recorderClient) do(method, path string, form url.Values) *httptest.ResponseRecorder {
	c.t.Helper()
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	rec := httptest.NewRecorder()
	c.srv.Handler().ServeHTTP(rec, req)
	return rec
}

func sessionFor(t *testing.T, srv *enclave.Server, u accounts.User) recorderClient {
	t.Helper()
	rec := httptest.NewRecorder()
	if _, err := srv.Accounts().Credentials.StartSession(rec, httptest.NewRequest("POST", "/login", nil), u, false); err != nil {
		t.Fatal(err)
	}
	return recorderClient{t: t, srv: srv, cookie: rec.Result().Cookies()[0]}
}

func newAdminServer(t *testing.T, dir string, mode accounts.SignupMode) (*enclave.Server, recorderClient, recorderClient) {
	t.Helper()
	ctx := context.Background()
	srv := openServer(t, enclave.Config{DataDir: dir, Logger: quiet(), Signup: mode, Accounts: fastArgon})
	admin, err := srv.Accounts().Identity.UserByEmail(ctx, "root@example.com")
	if err != nil {
		if admin, _, err = srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "root@example.com", Username: "chief", Password: "a long password for chief", Verified: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Accounts().Roles.GrantAdminAsOperator(ctx, admin.ID); err != nil {
			t.Fatal(err)
		}
	}
	user, err := srv.Accounts().Identity.UserByEmail(ctx, "plain@example.com")
	if err != nil {
		if user, _, err = srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "plain@example.com", Username: "plain", Password: "a long password for plain", Verified: true}); err != nil {
			t.Fatal(err)
		}
	}
	return srv, sessionFor(t, srv, admin), sessionFor(t, srv, user)
}

// The admin pages for OAuth clients list them and block one through the
// capabilities; people without the admin role get none of them.
func TestAdminClientsPage(t *testing.T) {
	srv, admin, user := newAdminServer(t, storagetest.Config(t, storage.SQLite).DataDir, accounts.SignupOpen)
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/oauth/register", strings.NewReader(`{"client_name":"Page Agent","redirect_uris":["http://127.0.0.1:53682/cb"],"token_endpoint_auth_method":"none"}`)))
	var reg struct {
		ClientID string `json:"client_id"`
	}
	json.NewDecoder(rec.Body).Decode(&reg)
	if rec.Code != http.StatusCreated || reg.ClientID == "" {
		t.Fatalf("register: %d", rec.Code)
	}
	page := admin.do("GET", "/admin/clients", nil)
	if page.Code != 200 || !strings.Contains(page.Body.String(), "Page Agent") || !strings.Contains(page.Body.String(), "http://127.0.0.1:53682/cb") {
		t.Fatalf("clients page: %d %.500s", page.Code, page.Body.String())
	}
	for _, path := range []string{"/admin/clients", "/admin/overview", "/admin/invites"} {
		if rec := user.do("GET", path, nil); rec.Code == 200 {
			t.Errorf("a non-admin opens %s", path)
		}
	}
	if rec := user.do("POST", "/admin/clients/"+reg.ClientID+"/block", url.Values{}); rec.Code < 300 || rec.Code == http.StatusSeeOther {
		t.Fatalf("a non-admin blocks: %d", rec.Code)
	}
	rec = admin.do("POST", "/admin/clients/"+reg.ClientID+"/block", url.Values{})
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("block: %d %s", rec.Code, rec.Body.String())
	}
	clients, err := srv.OAuth().Clients(context.Background())
	if err != nil || len(clients) != 1 || clients[0].BlockedAt == nil {
		t.Fatalf("after the page blocked it: %+v %v", clients, err)
	}
	if page := admin.do("GET", "/admin/clients?notice=client_blocked", nil); !strings.Contains(page.Body.String(), "blocked") || !strings.Contains(page.Body.String(), "/unblock") {
		t.Fatal("the page does not show the block")
	}
	// The audit log says which client was blocked, and by which admin.
	adminUser, _ := srv.Accounts().Identity.UserByEmail(context.Background(), "root@example.com")
	events, err := srv.Audit().Query(context.Background(), audit.Filter{Action: "admin_client_block"}, storage.PageRequest{Limit: 10})
	if err != nil || len(events.Items) != 1 || events.Items[0].ClientID != reg.ClientID || events.Items[0].Result != audit.ResultSuccess ||
		events.Items[0].UserHash == "" || events.Items[0].UserHash != srv.Audit().HashUser(adminUser.StableID) {
		t.Fatalf("audit of the block: %+v %v", events.Items, err)
	}
	if rec := admin.do("POST", "/admin/clients/no-such/block", url.Values{}); rec.Code != http.StatusNotFound {
		t.Fatalf("block of an unknown client: %d", rec.Code)
	}
	if rec := admin.do("POST", "/admin/clients/"+reg.ClientID+"/unblock", url.Values{}); rec.Code != http.StatusSeeOther {
		t.Fatalf("unblock: %d", rec.Code)
	}
	// Any transport (here the registry, as MCP and the CLI call it) leaves
	// the same record.
	caller := accounts.CallerFor(adminUser, srv.Accounts().Roles.FreshGrants(context.Background(), adminUser.ID))
	caller.AllScopes = true
	if _, err := srv.Registry().Invoke(context.Background(), caller, "adminOAuthClientBlock", json.RawMessage(`{"clientId":"`+reg.ClientID+`"}`)); err != nil {
		t.Fatal(err)
	}
	events, err = srv.Audit().Query(context.Background(), audit.Filter{Action: "admin_client_block", Result: audit.ResultSuccess}, storage.PageRequest{Limit: 10})
	if err != nil || len(events.Items) != 2 || events.Items[0].ClientID != reg.ClientID || events.Items[0].UserHash != srv.Audit().HashUser(adminUser.StableID) {
		t.Fatalf("audit of a block through the registry: %+v %v", events.Items, err)
	}
	if unblocks, err := srv.Audit().Query(context.Background(), audit.Filter{Action: "admin_client_unblock"}, storage.PageRequest{Limit: 10}); err != nil || len(unblocks.Items) != 1 || unblocks.Items[0].ClientID != reg.ClientID {
		t.Fatalf("audit of the unblock: %+v %v", unblocks.Items, err)
	}
}

var inviteCode = regexp.MustCompile(`<code id="invite-code">([^<]+)</code>`)

// With --signup invite, an admin makes a code on the page and it opens one
// account; --signup closed shuts the sign-up page.
func TestInviteSignupThroughPages(t *testing.T) {
	srv, admin, _ := newAdminServer(t, storagetest.Config(t, storage.SQLite).DataDir, accounts.SignupInvite)
	anon := recorderClient{t: t, srv: srv}
	if form := anon.do("GET", "/signup", nil); form.Code != 200 || !strings.Contains(form.Body.String(), `name="invite"`) {
		t.Fatalf("sign-up form in invite mode: %d", form.Code)
	}
	signup := func(name, code string) *httptest.ResponseRecorder {
		return anon.do("POST", "/signup", url.Values{"email": {name + "@example.com"}, "username": {name}, "password": {"a long password for " + name}, "invite": {code}})
	}
	if rec := signup("nocode", ""); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "invite code") {
		t.Fatalf("sign-up without a code: %d", rec.Code)
	}
	rec := admin.do("POST", "/admin/invites", url.Values{"note": {"for zed"}, "days": {"3"}})
	m := inviteCode.FindStringSubmatch(rec.Body.String())
	if rec.Code != 200 || m == nil {
		t.Fatalf("create invite: %d %.400s", rec.Code, rec.Body.String())
	}
	if rec := signup("zed", m[1]); rec.Code != 200 {
		t.Fatalf("sign-up with the code: %d %.300s", rec.Code, rec.Body.String())
	}
	if _, err := srv.Accounts().Identity.UserByEmail(context.Background(), "zed@example.com"); err != nil {
		t.Fatal("no account after sign-up with the code")
	}
	if rec := signup("yann", m[1]); rec.Code != http.StatusBadRequest {
		t.Fatalf("second use of a code: %d", rec.Code)
	}
	list := admin.do("GET", "/admin/invites", nil).Body.String()
	if !strings.Contains(list, "for zed") || !strings.Contains(list, "used") || strings.Contains(list, m[1]) {
		t.Fatal("invite list: missing the used invite, or showing its code")
	}
	if rec := admin.do("POST", "/admin/invites", url.Values{"days": {"500"}}); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("500 days: %d", rec.Code)
	}
	// Who made the code is in the audit log (the table does not keep it).
	root, _ := srv.Accounts().Identity.UserByEmail(context.Background(), "root@example.com")
	made, err := srv.Audit().Query(context.Background(), audit.Filter{Action: "admin_invite_create", Result: audit.ResultSuccess}, storage.PageRequest{Limit: 10})
	if err != nil || len(made.Items) != 1 || made.Items[0].UserHash != srv.Audit().HashUser(root.StableID) {
		t.Fatalf("audit of the invite: %+v %v", made.Items, err)
	}

	closed, _, _ := newAdminServer(t, storagetest.Config(t, storage.SQLite).DataDir, accounts.SignupClosed)
	c := recorderClient{t: t, srv: closed}
	if rec := c.do("GET", "/signup", nil); rec.Code != http.StatusForbidden {
		t.Fatalf("closed sign-up page: %d", rec.Code)
	}
	if rec := c.do("POST", "/signup", url.Values{"email": {"x@example.com"}, "username": {"xavier"}, "password": {"a long password for xavier"}}); rec.Code != http.StatusForbidden {
		t.Fatalf("closed sign-up post: %d", rec.Code)
	}
}

var chartBar = regexp.MustCompile(`<rect class="bar-(calls|denials)"[^>]*><title>([0-9-]+): (\d+) (calls|denials)</title>`)

// The overview page counts accounts and draws calls and denials per day as
// SVG, without script, under the unchanged CSP; the counts survive a
// restart (flushed when background work stops).
func TestAdminOverviewPage(t *testing.T) {
	ctx := context.Background()
	dir := storagetest.Config(t, storage.SQLite).DataDir
	srv, admin, _ := newAdminServer(t, dir, accounts.SignupOpen)
	caller, err := srv.Accounts().LoadCaller(ctx, mustUser(t, srv, "plain@example.com").StableID)
	if err != nil {
		t.Fatal(err)
	}
	caller.AllScopes, caller.Interactive = true, true
	for range 3 {
		if _, err := srv.Registry().Invoke(ctx, caller, "whoami", json.RawMessage(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Registry().Invoke(ctx, caller, "adminOverview", json.RawMessage(`{}`)); err == nil {
		t.Fatal("a user ran adminOverview")
	}
	rec := admin.do("GET", "/admin/overview", nil)
	body := rec.Body.String()
	if rec.Code != 200 || strings.Contains(body, "<script") || rec.Header().Get("Content-Security-Policy") != "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'" {
		t.Fatalf("overview: %d, CSP %q", rec.Code, rec.Header().Get("Content-Security-Policy"))
	}
	if !strings.Contains(body, `<dd id="users-total">2</dd>`) || !strings.Contains(body, `<dd id="users-new">2</dd>`) || !strings.Contains(body, `<svg id="calls-chart"`) {
		t.Fatalf("overview numbers: %.1500s", body)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	counts := func(body string) (calls, denials string, bars int) {
		for _, m := range chartBar.FindAllStringSubmatch(body, -1) {
			bars++
			if m[2] == today && m[1] == "calls" {
				calls = m[3]
			}
			if m[2] == today && m[1] == "denials" {
				denials = m[3]
			}
		}
		return
	}
	calls, denials, bars := counts(body)
	// 3 whoami + the overview page's own adminOverview call by the admin.
	if bars != 60 || calls != "4" || denials != "1" {
		t.Fatalf("chart: %d bars, today %s calls %s denials", bars, calls, denials)
	}

	// The counts are saved when background work stops, and read back after
	// a restart.
	bg, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { srv.RunBackground(bg); close(done) }()
	stop()
	<-done
	srv.Close()
	srv2, admin2, _ := newAdminServer(t, dir, accounts.SignupOpen)
	_ = srv2
	calls, denials, _ = counts(admin2.do("GET", "/admin/overview", nil).Body.String())
	if calls != "5" || denials != "1" { // plus this page's own call
		t.Fatalf("after a restart: today %s calls %s denials", calls, denials)
	}
}

func mustUser(t *testing.T, srv *enclave.Server, email string) accounts.User {
	t.Helper()
	u, err := srv.Accounts().Identity.UserByEmail(context.Background(), email)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
