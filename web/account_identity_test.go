package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The account page offers the username change (through
// accountUsernameChange: the effective reserved set, names in use or held
// for another account, the cooldown) and the release of a former address:
// a link mailed to that address releases it, for the account's own former
// addresses only.
func TestAccountPageUsernameAndRelease(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		log := audit.New(s, make([]byte, 32), quietLogger())
		h := newTestHandler(t, s, func(o *Options) { o.Audit = log; o.CredentialLimit = Limit{Requests: 1000} })
		srv := serve(t, h)
		ann, bob := newBrowser(t, srv), newBrowser(t, srv)
		annU := signedIn(t, h, ann, "ann@example.com", "ann", false)
		signedIn(t, h, bob, "bob@example.com", "bob", false)
		if _, err := h.opts.Accounts.Identity.MarkEmailVerified(t.Context(), annU.ID); err != nil {
			t.Fatal(err)
		}
		page := ann.get("/account")
		expect(t, "account page", page, http.StatusOK, `action="/account/username"`, `name="username"`)
		if strings.Contains(page.Body, `action="/account/email/release"`) {
			t.Fatal("a release form without a former address")
		}

		// Ann moves to a new address: the old one is claimed, with a
		// release button and a mail that says how to release it.
		expect(t, "email change", ann.post("/account/email", url.Values{"email": {"ann.new@example.com"}, "password": {testPassword}}), http.StatusSeeOther)
		path, token := mailedLink(t, h, "ann.new@example.com")
		expect(t, "confirm email", ann.post(path, url.Values{"token": {token}}), http.StatusOK, "Email changed")
		expect(t, "account page with a former address", ann.get("/account"), http.StatusOK,
			"Former addresses", `action="/account/email/release"`, `value="ann@example.com"`)
		var told bool
		for _, m := range h.DevMail().Messages() {
			if m.To == "ann@example.com" && strings.Contains(m.Text, "until you release it") && strings.Contains(m.Text, "/account") {
				told = true
			}
		}
		if !told {
			t.Fatal("the old address was not told how to release it")
		}

		// Bob cannot release ann's former address, nor ann her current one.
		before := mailCount(h)
		expect(t, "bob releases ann's address", bob.post("/account/email/release", url.Values{"email": {"ann@example.com"}}), http.StatusNotFound)
		expect(t, "ann releases her current address", ann.post("/account/email/release", url.Values{"email": {"ann.new@example.com"}}), http.StatusNotFound)
		if mailCount(h) != before {
			t.Fatal("a refused release mailed a link")
		}
		expect(t, "release unsigned", newBrowser(t, srv).post("/account/email/release", url.Values{"email": {"ann@example.com"}}), http.StatusSeeOther)

		expect(t, "ann asks to release", ann.post("/account/email/release", url.Values{"email": {"ann@example.com"}}), http.StatusSeeOther)
		path, token = mailedLink(t, h, "ann@example.com")
		if path != pathConfirmRelease {
			t.Fatalf("release link path %q", path)
		}
		// Opening the link shows a button; only the click releases.
		expect(t, "release form", newBrowser(t, srv).get(path+"?token="+url.QueryEscape(token)), http.StatusOK, "Release the address")
		expect(t, "signup before the click", newBrowser(t, srv).post("/signup", url.Values{"email": {"ann@example.com"}, "username": {"ann-two"}, "password": {testPassword}}), http.StatusOK)
		if _, err := h.opts.Accounts.Identity.UserByUsername(t.Context(), "ann-two"); err == nil {
			t.Fatal("the claimed address opened an account")
		}
		expect(t, "release", newBrowser(t, srv).post(path, url.Values{"token": {token}}), http.StatusOK, "Address released")
		expect(t, "release twice", newBrowser(t, srv).post(path, url.Values{"token": {token}}), http.StatusBadRequest)
		expect(t, "signup after release", newBrowser(t, srv).post("/signup", url.Values{"email": {"ann@example.com"}, "username": {"ann-two"}, "password": {testPassword}}), http.StatusOK)
		if u, err := h.opts.Accounts.Identity.UserByUsername(t.Context(), "ann-two"); err != nil || u.EmailVerified() || u.StableID == annU.StableID {
			t.Fatalf("the account opened with the released address: %+v %v", u, err)
		}

		// The username.
		expect(t, "rename", ann.post("/account/username", url.Values{"username": {"Ann-Renamed"}}), http.StatusSeeOther)
		expect(t, "account after rename", ann.get("/account?notice=username-changed"), http.StatusOK,
			`<dd id="username">ann-renamed</dd>`, "Held usernames", "ann (until ", "You can change it again after")
		var mailed bool
		for _, m := range h.DevMail().Messages() {
			if m.To == "ann.new@example.com" && strings.Contains(m.Text, "from ann to ann-renamed") {
				mailed = true
			}
		}
		if !mailed {
			t.Fatal("the account was not told of the rename")
		}
		expect(t, "bob takes ann's held name", bob.post("/account/username", url.Values{"username": {"ANN"}}), http.StatusConflict, "This username is taken.")
		expect(t, "bob takes a reserved name", bob.post("/account/username", url.Values{"username": {"postmaster"}}), http.StatusUnprocessableEntity, "This username is reserved.")
		expect(t, "bob: a malformed name", bob.post("/account/username", url.Values{"username": {"a"}}), http.StatusUnprocessableEntity, "Usernames are 3–32")
		expect(t, "ann again within the cooldown", ann.post("/account/username", url.Values{"username": {"ann-third"}}), http.StatusConflict, "You changed your username recently")
		if u, _ := h.opts.Accounts.Identity.UserByEmail(t.Context(), "bob@example.com"); u.Username != "bob" {
			t.Fatalf("bob's refused changes renamed him %q", u.Username)
		}
		expect(t, "rename unsigned", newBrowser(t, srv).post("/account/username", url.Values{"username": {"someone"}}), http.StatusSeeOther)

		// Audited, with codes and hashes only.
		var rows []struct {
			Action string `bun:"action"`
			Result string `bun:"result"`
			Reason string `bun:"reason"`
		}
		if err := s.DB.NewSelect().Table("audit_events").Column("action", "result", "reason").
			Where("action IN (?)", bun.In([]string{"username_change", "email_claim_release", "email_claim_release_request"})).OrderExpr("id").Scan(t.Context(), &rows); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, r.Action+" "+r.Result+" "+r.Reason)
		}
		want := []string{
			"email_claim_release_request failure not_found", "email_claim_release_request failure not_found",
			"email_claim_release_request success ", "email_claim_release success ", "email_claim_release failure invalid_token",
			"username_change success ", "username_change failure username_taken", "username_change failure username_reserved",
			"username_change failure invalid_username", "username_change failure username_cooldown",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("audit rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// Asking for a release link counts in the credential bucket.
func TestEmailReleaseIsRateLimited(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	h := newTestHandler(t, s, func(o *Options) { o.CredentialLimit = Limit{Requests: 3} })
	srv := serve(t, h)
	ann := newBrowser(t, srv)
	signedIn(t, h, ann, "ann@example.com", "ann", false) // one credential request
	for i := range 2 {
		if a := ann.post("/account/email/release", url.Values{"email": {"old@example.com"}}); a.Status != http.StatusNotFound {
			t.Fatalf("request %d: %d", i, a.Status)
		}
	}
	if a := ann.post("/account/email/release", url.Values{"email": {"old@example.com"}}); a.Status != http.StatusTooManyRequests {
		t.Fatalf("fourth credential request: %d, want 429", a.Status)
	}
	if a := ann.post("/account/username", url.Values{"username": {"ann-two"}}); a.Status != http.StatusTooManyRequests {
		t.Fatalf("a username change past the limit: %d, want 429", a.Status)
	}
}
