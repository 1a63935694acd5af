package web

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// An email-change link dies with the password. Someone who learned the
// password asks to move the account to their own address; the owner is
// told and, as the notice says, changes the password (or resets it). The
// link mailed to the intruder's address must not move the account
// afterwards: it would hand them the account through a password reset.
func TestEmailChangeLinkDiesWithThePassword(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		for _, how := range []string{"change", "reset"} {
			t.Run(how, func(t *testing.T) {
				clock := newFakeClock()
				acc := newAccounts(t, s, clock.Now)
				h := newTestHandler(t, s, func(o *Options) {
					o.Now = clock.Now
					o.Accounts = acc
					o.CredentialLimit = Limit{Requests: 1000}
				})
				srv := serve(t, h)
				victim := newBrowser(t, srv)
				u := signedIn(t, h, victim, how+"-ann@example.com", how+"-ann", false)
				if _, err := acc.Identity.MarkEmailVerified(t.Context(), u.ID); err != nil {
					t.Fatal(err)
				}
				intruder := victim.clone()
				a := intruder.post("/account/email", url.Values{"email": {how + "-intruder@example.com"}, "password": {testPassword}})
				if a.Status != http.StatusSeeOther {
					t.Fatalf("email change request: %d %s", a.Status, a.Body)
				}
				path, token := mailedLink(t, h, how+"-intruder@example.com")

				clock.Advance(time.Second)
				const next = "a fresh and long passphrase"
				switch how {
				case "change":
					a = victim.post("/account/password", url.Values{"current": {testPassword}, "next": {next}})
					if a.Status != http.StatusSeeOther {
						t.Fatalf("change password: %d %s", a.Status, a.Body)
					}
				case "reset":
					newBrowser(t, srv).post("/password-reset", url.Values{"email": {u.Email}})
					rpath, rtoken := mailedLink(t, h, u.Email)
					a = newBrowser(t, srv).post(rpath, url.Values{"token": {rtoken}, "password": {next}})
					if a.Status != http.StatusSeeOther {
						t.Fatalf("reset password: %d %s", a.Status, a.Body)
					}
				}
				clock.Advance(time.Second)

				other := newBrowser(t, srv)
				expect(t, "confirm page after the password changed", other.get(path+"?token="+url.QueryEscape(token)), http.StatusBadRequest)
				expect(t, "confirm after the password changed", other.post(path, url.Values{"token": {token}}), http.StatusBadRequest)
				if got, _ := acc.Identity.UserByID(t.Context(), u.ID); got.Email != u.Email {
					t.Fatalf("the account moved to %s with a link issued before the password change", got.Email)
				}
			})
		}
	})
}

// The session of a half-deleted account works only on the deletion page:
// at the authorization endpoint it counts as signed out (Login shows the
// form, and signing in there again is refused), so it cannot mint a grant;
// and the account's other pages and the email-change confirmation refuse
// it too.
func TestDeletingSessionCannotAuthorize(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		acc := newAccounts(t, s, nil)
		h := newTestHandler(t, s, func(o *Options) {
			o.Accounts = acc
			o.CredentialLimit = Limit{Requests: 1000}
		})
		ctx := t.Context()
		u, err := acc.Identity.Signup(ctx, accounts.SignupInput{Email: "del@example.com", Username: "del", Password: testPassword})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Lifecycle.MarkDeleting(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		deleting, err := acc.Credentials.Login(ctx, u.Email, testPassword)
		if !errors.Is(err, accounts.ErrDeleting) {
			t.Fatalf("login of a deleting account: %v", err)
		}
		rec := httptest.NewRecorder()
		if _, err := acc.Credentials.StartDeletingSession(rec, httptest.NewRequest("GET", "/", nil), deleting); err != nil {
			t.Fatal(err)
		}
		cookie := rec.Result().Cookies()[0]

		req := &oauth.AuthorizeRequest{ClientID: "c1", ClientName: "Agent", RedirectURI: "http://127.0.0.1:9/cb", RedirectHost: "127.0.0.1:9",
			Scopes: []string{"mcp"}, FormAction: "/oauth/authorize?client_id=c1&state=abcdefgh"}
		for _, post := range []bool{false, true} {
			var r *http.Request
			if post {
				form := url.Values{"email": {u.Email}, "password": {testPassword}}
				r = httptest.NewRequest("POST", "http://enclave.test"+req.FormAction, strings.NewReader(form.Encode()))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				r.Header.Set("Sec-Fetch-Site", "same-origin")
				r.Header.Set("Origin", "http://enclave.test")
			} else {
				r = httptest.NewRequest("GET", "http://enclave.test"+req.FormAction, nil)
			}
			r.AddCookie(cookie)
			w := httptest.NewRecorder()
			if id, ok := h.Login(w, r, req); ok || id != 0 {
				t.Fatalf("authorization with a deleting session (post %v): signed in as %d", post, id)
			}
			if w.Code == http.StatusOK && !strings.Contains(w.Body.String(), `name="password"`) {
				t.Fatalf("authorization with a deleting session (post %v): %d\n%s", post, w.Code, w.Body)
			}
		}
		b := newBrowser(t, serve(t, h))
		u0, _ := url.Parse(b.srv.URL)
		b.c.Jar.SetCookies(u0, []*http.Cookie{cookie})
		for _, path := range []string{"/account", "/account/secrets", "/admin/users"} {
			if a := b.get(path); a.Status == http.StatusOK {
				t.Fatalf("GET %s with a deleting session: 200", path)
			}
		}
		if a := b.post("/account/email", url.Values{"email": {"x@example.com"}, "password": {testPassword}}); a.Status == http.StatusSeeOther && strings.Contains(a.Location, "email-change-sent") {
			t.Fatalf("email change with a deleting session: %d %s", a.Status, a.Location)
		}
	})
}

// Two accounts asking for the same free address get a link each (both to
// that address); confirming both at once moves exactly one account, and
// the other is refused.
func TestConcurrentEmailChangeConfirmations(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		acc := newAccounts(t, s, nil)
		h := newTestHandler(t, s, func(o *Options) {
			o.Accounts = acc
			o.CredentialLimit = Limit{Requests: 1000}
		})
		srv := serve(t, h)
		const target = "shared@example.com"
		var tokens []string
		var ids []int64
		for _, name := range []string{"first", "second"} {
			b := newBrowser(t, srv)
			u := signedIn(t, h, b, name+"@example.com", name, false)
			if _, err := acc.Identity.MarkEmailVerified(t.Context(), u.ID); err != nil {
				t.Fatal(err)
			}
			if a := b.post("/account/email", url.Values{"email": {target}, "password": {testPassword}}); a.Status != http.StatusSeeOther {
				t.Fatalf("email change request: %d", a.Status)
			}
			_, token := mailedLink(t, h, target)
			tokens = append(tokens, token)
			ids = append(ids, u.ID)
		}
		start := make(chan struct{})
		results := make(chan int, 2)
		for _, tok := range tokens {
			go func() {
				<-start
				form := url.Values{"token": {tok}}
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/account/email/confirm", strings.NewReader(form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Origin", srv.URL)
				req.Header.Set("Sec-Fetch-Site", "same-origin")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					results <- 0
					return
				}
				resp.Body.Close()
				results <- resp.StatusCode
			}()
		}
		close(start)
		a, b := <-results, <-results
		if (a == http.StatusOK) == (b == http.StatusOK) {
			t.Fatalf("concurrent confirmations answered %d and %d, want exactly one 200", a, b)
		}
		if a >= 500 || b >= 500 {
			t.Fatalf("concurrent confirmations answered %d and %d", a, b)
		}
		holders := 0
		for _, id := range ids {
			if u, _ := acc.Identity.UserByID(t.Context(), id); u.Email == target {
				holders++
			}
		}
		if holders != 1 {
			t.Fatalf("%d accounts hold %s", holders, target)
		}
	})
}

// A password-reset link mailed to an address the account has since left
// no longer works: the person moved away from that mailbox (perhaps
// because someone else reads it), and a link waiting in it must not hand
// the account back. Both pages that take the link refuse it.
func TestResetLinkDiesWithTheOldAddress(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		acc := newAccounts(t, s, nil)
		h := newTestHandler(t, s, func(o *Options) {
			o.Accounts = acc
			o.CredentialLimit = Limit{Requests: 1000}
		})
		srv := serve(t, h)
		ann := newBrowser(t, srv)
		u := signedIn(t, h, ann, "old@example.com", "mover", false)
		if _, err := acc.Identity.MarkEmailVerified(t.Context(), u.ID); err != nil {
			t.Fatal(err)
		}
		newBrowser(t, srv).post("/password-reset", url.Values{"email": {"old@example.com"}})
		rpath, rtoken := mailedLink(t, h, "old@example.com")

		if a := ann.post("/account/email", url.Values{"email": {"new@example.com"}, "password": {testPassword}}); a.Status != http.StatusSeeOther {
			t.Fatalf("email change request: %d", a.Status)
		}
		cpath, ctoken := mailedLink(t, h, "new@example.com")
		expect(t, "confirm", ann.post(cpath, url.Values{"token": {ctoken}}), http.StatusOK, "new@example.com")

		other := newBrowser(t, srv)
		expect(t, "reset page for the old address", other.get(rpath+"?token="+url.QueryEscape(rtoken)), http.StatusBadRequest)
		expect(t, "reset for the old address", other.post(rpath, url.Values{"token": {rtoken}, "password": {"a takeover passphrase"}}), http.StatusBadRequest)
		expect(t, "setup page with the old reset link", other.get(accounts.PasswordSetupPath+"?token="+url.QueryEscape(rtoken)), http.StatusBadRequest)
		expect(t, "setup with the old reset link", other.post(accounts.PasswordSetupPath, url.Values{"token": {rtoken}, "password": {"a takeover passphrase"}}), http.StatusBadRequest)
		if _, err := acc.Credentials.Login(t.Context(), "new@example.com", testPassword); err != nil {
			t.Fatalf("the password changed through a link to the old address: %v", err)
		}
	})
}

// Suspension wins over a half-finished deletion: an admin who suspends an
// account whose deletion failed midway (to keep what is left, say) shuts
// out its owner everywhere, the deletion page included. Signing in gives
// no session for it, and a deletion session issued before the suspension
// stops working.
func TestSuspensionShutsTheDeletionPage(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		acc := newAccounts(t, s, nil)
		inv := storage.NewInventory()
		if err := lifecycle.RegisterInventory(inv); err != nil {
			t.Fatal(err)
		}
		lc := lifecycle.New(s, inv, acc, lifecycle.Options{Logger: quietLogger()})
		h := newTestHandler(t, s, func(o *Options) {
			o.Accounts = acc
			o.Lifecycle = lc
			o.CredentialLimit = Limit{Requests: 1000}
		})
		srv := serve(t, h)
		ctx := t.Context()
		u, err := acc.Identity.Signup(ctx, accounts.SignupInput{Email: "frozen@example.com", Username: "frozen", Password: testPassword})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Lifecycle.MarkDeleting(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		early := newBrowser(t, srv)
		if a := early.post("/login", url.Values{"email": {u.Email}, "password": {testPassword}}); a.Status != http.StatusSeeOther || a.Location != "/account/delete" {
			t.Fatalf("sign-in of a half-deleted account: %d %q", a.Status, a.Location)
		}
		if _, err := acc.Lifecycle.Suspend(ctx, u.ID); err != nil {
			t.Fatal(err)
		}

		late := newBrowser(t, srv)
		if a := late.post("/login", url.Values{"email": {u.Email}, "password": {testPassword}}); a.Status == http.StatusSeeOther || len(late.cookies()) != 0 {
			t.Fatalf("sign-in of a suspended half-deleted account: %d %q, cookies %d", a.Status, a.Location, len(late.cookies()))
		}
		if a := early.get("/account/delete"); a.Status == http.StatusOK {
			t.Fatal("the deletion page answers a suspended account's session")
		}
		if a := early.post("/account/delete", url.Values{"confirm": {"frozen"}, "password": {testPassword}}); a.Status == http.StatusOK {
			t.Fatalf("a suspended account finished its deletion: %d", a.Status)
		}
		if _, err := acc.Identity.UserByID(ctx, u.ID); err != nil {
			t.Fatalf("the suspended account is gone: %v", err)
		}
	})
}

// One email-change link posted twice at once works once.
func TestEmailChangeLinkWorksOnceUnderConcurrency(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		acc := newAccounts(t, s, nil)
		h := newTestHandler(t, s, func(o *Options) {
			o.Accounts = acc
			o.CredentialLimit = Limit{Requests: 1000}
		})
		srv := serve(t, h)
		b := newBrowser(t, srv)
		u := signedIn(t, h, b, "twice@example.com", "twice", false)
		if _, err := acc.Identity.MarkEmailVerified(t.Context(), u.ID); err != nil {
			t.Fatal(err)
		}
		if a := b.post("/account/email", url.Values{"email": {"twice.new@example.com"}, "password": {testPassword}}); a.Status != http.StatusSeeOther {
			t.Fatalf("email change request: %d", a.Status)
		}
		path, token := mailedLink(t, h, "twice.new@example.com")
		before := len(h.DevMail().Messages())
		const n = 4
		start := make(chan struct{})
		results := make(chan int, n)
		for range n {
			go func() {
				<-start
				form := url.Values{"token": {token}}
				req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Origin", srv.URL)
				req.Header.Set("Sec-Fetch-Site", "same-origin")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					results <- 0
					return
				}
				resp.Body.Close()
				results <- resp.StatusCode
			}()
		}
		close(start)
		ok := 0
		for range n {
			switch st := <-results; st {
			case http.StatusOK:
				ok++
			case http.StatusBadRequest:
			default:
				t.Errorf("a concurrent use answered %d", st)
			}
		}
		if ok != 1 {
			t.Fatalf("%d of %d concurrent uses of one link succeeded, want 1", ok, n)
		}
		// One change, so one notice to the old address.
		if notices := len(h.DevMail().Messages()) - before; notices != 1 {
			t.Fatalf("%d mails after the confirmations, want 1", notices)
		}
	})
}
