package web

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

const testPassword = "correct horse battery"

// signedIn creates an account (admin when asked) and returns a browser
// signed in as it.
func signedIn(t *testing.T, h *Handler, b *browser, email, username string, admin bool) accounts.User {
	t.Helper()
	u, err := h.opts.Accounts.Identity.Signup(t.Context(), accounts.SignupInput{Email: email, Username: username, Password: testPassword})
	if err != nil {
		t.Fatal(err)
	}
	if admin {
		if _, err := h.opts.Accounts.Roles.GrantAdminAsOperator(t.Context(), u.ID); err != nil {
			t.Fatal(err)
		}
	}
	if a := b.post("/login", url.Values{"email": {email}, "password": {testPassword}}); a.Status != http.StatusSeeOther {
		t.Fatalf("login %s: %d %s", email, a.Status, a.Body)
	}
	return u
}

func TestAdminPages(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		h := newTestHandler(t, s, func(o *Options) { o.CredentialLimit = Limit{Requests: 1000} })
		srv := serve(t, h)
		root := newBrowser(t, srv)
		admin := signedIn(t, h, root, "root@example.com", "operator-jo", true)
		plain := newBrowser(t, srv)
		bob := signedIn(t, h, plain, "bob@example.com", "bob", false)
		bobPath := "/admin/users/" + bob.StableID

		// Only admins get in.
		if a := newBrowser(t, srv).get("/admin/users"); a.Status != http.StatusSeeOther || !strings.HasPrefix(a.Location, "/login") {
			t.Fatalf("anonymous: %d %q", a.Status, a.Location)
		}
		expect(t, "non-admin list", plain.get("/admin/users"), http.StatusForbidden)
		expect(t, "non-admin action", plain.post(bobPath+"/verify", nil), http.StatusForbidden)

		// The list shows identity fields only: never a hash.
		a := root.get("/admin/users")
		expect(t, "list", a, http.StatusOK, "root@example.com", "bob@example.com")
		for _, leak := range []string{"argon2", "$argon"} {
			if strings.Contains(a.Body, leak) {
				t.Fatalf("users list shows %q", leak)
			}
		}
		expect(t, "detail", root.get(bobPath), http.StatusOK, "bob@example.com", "not verified")
		expect(t, "unknown user", root.get("/admin/users/999999"), http.StatusNotFound)
		expect(t, "bad id", root.get("/admin/users/abc"), http.StatusNotFound)

		// Search by substring of username or email, filter by role; LIKE
		// wildcards are literal.
		for i := range 7 {
			if _, _, err := h.opts.Accounts.Identity.CreateUser(t.Context(), accounts.CreateUserInput{
				Email: fmt.Sprintf("member%d@corp.example", i), Username: fmt.Sprintf("member-%d", i),
			}); err != nil {
				t.Fatal(err)
			}
		}
		expect(t, "search", root.get("/admin/users?q=CORP"), http.StatusOK, "member0@corp.example", "member6@corp.example")
		if a := root.get("/admin/users?q=corp"); strings.Contains(a.Body, "bob@example.com") {
			t.Fatal("search matched an unrelated account")
		}
		if a := root.get("/admin/users?q=%25"); strings.Contains(a.Body, "bob@example.com") {
			t.Fatal("a % in the search matched everything")
		}
		a = root.get("/admin/users?role=admin")
		if !strings.Contains(a.Body, "root@example.com") || strings.Contains(a.Body, "bob@example.com") {
			t.Fatalf("role filter:\n%s", a.Body)
		}

		// Keyset paging: every account once, across pages.
		const paged = adminUsersPageSize + 5
		for i := range paged {
			if _, _, err := h.opts.Accounts.Identity.CreateUser(t.Context(), accounts.CreateUserInput{
				Email: fmt.Sprintf("p%02d@paging.example", i), Username: fmt.Sprintf("paging-%02d", i),
			}); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]int{}
		next := "/admin/users?q=paging"
		pages := 0
		for next != "" {
			pages++
			a := root.get(next)
			expect(t, "page", a, http.StatusOK)
			for _, m := range rePagingEmail.FindAllString(a.Body, -1) {
				seen[m]++
			}
			next = ""
			if m := reNextLink.FindStringSubmatch(a.Body); m != nil {
				next = strings.ReplaceAll(m[1], "&amp;", "&")
			}
		}
		if pages != 2 || len(seen) != paged {
			t.Fatalf("%d pages, %d accounts; want 2 and %d", pages, len(seen), paged)
		}
		for e, n := range seen {
			if n != 1 {
				t.Fatalf("%s listed %d times", e, n)
			}
		}
		expect(t, "bad cursor", root.get("/admin/users?cursor=nonsense"), http.StatusBadRequest)

		// Actions.
		steps := []struct {
			path   string
			form   url.Values
			status int
			check  func(u accounts.User, roles []string) bool
			before func()
		}{
			{"/verify", nil, http.StatusSeeOther, func(u accounts.User, _ []string) bool { return u.EmailVerified() }, nil},
			// No runtime path grants or takes admin: only the operator's
			// command line does.
			{"/roles", url.Values{"role": {"admin"}}, http.StatusConflict, func(_ accounts.User, r []string) bool { return !slices.Contains(r, "admin") }, nil},
			{"/roles/remove", url.Values{"role": {"admin"}}, http.StatusConflict, func(_ accounts.User, r []string) bool { return slices.Contains(r, "admin") }, func() {
				if _, err := h.opts.Accounts.Roles.GrantAdminAsOperator(t.Context(), bob.ID); err != nil {
					t.Fatal(err)
				}
			}},
			{"/roles", url.Values{"role": {"wizard"}}, http.StatusUnprocessableEntity, func(_ accounts.User, r []string) bool { return !slices.Contains(r, "wizard") }, nil},
			{"/suspend", nil, http.StatusSeeOther, func(u accounts.User, _ []string) bool { return u.SuspendedAt != nil }, nil},
			{"/unsuspend", nil, http.StatusSeeOther, func(u accounts.User, _ []string) bool { return u.SuspendedAt == nil }, nil},
		}
		for _, st := range steps {
			if st.before != nil {
				st.before()
			}
			a := root.post(bobPath+st.path, st.form)
			if a.Status != st.status {
				t.Fatalf("%s: %d, want %d\n%s", st.path, a.Status, st.status, a.Body)
			}
			u, err := h.opts.Accounts.Identity.UserByID(t.Context(), bob.ID)
			if err != nil {
				t.Fatal(err)
			}
			g, _ := h.opts.Accounts.Roles.RolesAndPermissions(t.Context(), bob.ID)
			if !st.check(u, g.Roles) {
				t.Fatalf("%s: account not changed: %+v roles %v", st.path, u, g.Roles)
			}
		}
		// A suspended account's session is refused.
		root.post(bobPath+"/suspend", nil)
		if a := plain.get("/account"); a.Status != http.StatusSeeOther {
			t.Fatalf("suspended account still signed in: %d", a.Status)
		}
		rootPath := "/admin/users/" + admin.StableID
		expect(t, "own admin", root.post(rootPath+"/roles/remove", url.Values{"role": {"admin"}}), http.StatusConflict, "only by the operator")
		expect(t, "suspend self", root.post(rootPath+"/suspend", nil), http.StatusConflict, "your own account")

		// Create an account with a password-setup link, and use the link.
		a = root.post("/admin/users", url.Values{"email": {"new@example.com"}, "username": {"newbie"}, "verified": {"1"}})
		expect(t, "create", a, http.StatusCreated, "newbie", "mailed to new@example.com")
		if reSetupLink.MatchString(a.Body) {
			t.Fatalf("the page shows the setup link:\n%s", a.Body)
		}
		mail, _ := h.DevMail().Last("new@example.com")
		m := reSetupLink.FindStringSubmatch(mail.Text)
		if m == nil {
			t.Fatalf("no setup link mailed: %+v", mail)
		}
		token, _ := url.QueryUnescape(strings.ReplaceAll(m[1], "&amp;", "&"))
		nb := newBrowser(t, srv)
		expect(t, "setup form", nb.get(accounts.PasswordSetupPath+"?token="+url.QueryEscape(token)), http.StatusOK, `name="password"`)
		if a := nb.post(accounts.PasswordSetupPath, url.Values{"token": {token}, "password": {testPassword}}); a.Status != http.StatusSeeOther {
			t.Fatalf("setup: %d %s", a.Status, a.Body)
		}
		if a := nb.post("/login", url.Values{"email": {"new@example.com"}, "password": {testPassword}}); a.Status != http.StatusSeeOther {
			t.Fatalf("login after setup: %d", a.Status)
		}
		expect(t, "duplicate", root.post("/admin/users", url.Values{"email": {"new@example.com"}, "username": {"other"}}), http.StatusConflict)
		expect(t, "roles page", root.get("/admin/roles"), http.StatusOK, "admin", "user")
	})
}

var (
	rePagingEmail = regexp.MustCompile(`p\d\d@paging\.example`)
	reNextLink    = regexp.MustCompile(`rel="next" href="([^"]+)"`)
	reSetupLink   = regexp.MustCompile(`http://enclave\.test/password/setup\?token=([^<\s"]+)`)
)

// Browser and admin events reach the audit log, hashed, and admins read
// them on the audit page.
func TestAuditTrail(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	log := audit.New(s, make([]byte, 32), quietLogger())
	h := newTestHandler(t, s, func(o *Options) { o.Audit = log; o.CredentialLimit = Limit{Requests: 1000} })
	srv := serve(t, h)
	root := newBrowser(t, srv)
	signedIn(t, h, root, "root@example.com", "operator-jo", true)
	newBrowser(t, srv).post("/login", url.Values{"email": {"root@example.com"}, "password": {"wrong password!"}})
	newBrowser(t, srv).post("/signup", url.Values{"email": {"root@example.com"}, "username": {"someone"}, "password": {testPassword}})
	bob, _, err := h.opts.Accounts.Identity.CreateUser(t.Context(), accounts.CreateUserInput{Email: "bob@example.com", Username: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	root.post("/admin/users/"+bob.StableID+"/suspend", nil)

	page, err := log.Query(t.Context(), audit.Filter{}, storage.PageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range page.Items {
		got = append(got, e.Category+"/"+e.Action+"/"+e.Result+"/"+e.Reason)
		if strings.Contains(e.UserHash, "@") || e.IPHash == "127.0.0.1" {
			t.Fatalf("unhashed identifier in %+v", e)
		}
	}
	for _, want := range []string{
		"auth/login/success/", "auth/login/failure/invalid_credentials",
		"auth/signup/failure/email_exists", "account/admin_suspend/success/",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("audit log lacks %s; has %v", want, got)
		}
	}
	a := root.get("/admin/audit?category=auth")
	expect(t, "audit page", a, http.StatusOK, "invalid_credentials")
	if strings.Contains(a.Body, "root@example.com") || strings.Contains(a.Body, "admin_suspend") {
		t.Fatal("audit page shows a raw email, or ignores the category filter")
	}
	expect(t, "audit page for non-admins", newBrowser(t, srv).get("/admin/audit"), http.StatusSeeOther)
}
