package web

import (
	"net/http"
	"net/url"
	"testing"
	"time"

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
				if _, err := acc.MarkEmailVerified(t.Context(), u.ID); err != nil {
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
				if got, _ := acc.UserByID(t.Context(), u.ID); got.Email != u.Email {
					t.Fatalf("the account moved to %s with a link issued before the password change", got.Email)
				}
			})
		}
	})
}
