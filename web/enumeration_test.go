package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// With an outbox, the mail that tells the owner of a registered address
// about a signup attempt is written to it (never sent from the request),
// and the answer is the new-account page, byte for byte.
func TestSignupAttemptMailGoesThroughTheOutbox(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ring, err := envelope.Open(t.Context(), s.DB, s.Keeper)
		if err != nil {
			t.Fatal(err)
		}
		m := &scriptedMailer{}
		h := newTestHandler(t, s, func(o *Options) {
			o.Outbox, o.Mailer, o.DevRoutes = outbox.New(ring), m, false
			o.CredentialLimit = Limit{Requests: 1000}
		})
		srv := serve(t, h)
		mails := func() int64 {
			n, err := s.DB.NewSelect().Table("outbox").Where("topic = ?", MailTopic).Count(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		form := url.Values{"email": {"Olive@Example.com"}, "username": {"olive"}, "password": {testPassword}}
		fresh := newBrowser(t, srv).post("/signup", form)
		expect(t, "signup", fresh, http.StatusOK, "Check your email")
		if n := mails(); n != 1 {
			t.Fatalf("%d mails queued for a new account, want 1", n)
		}
		form.Set("username", "intruder")
		again := newBrowser(t, srv).post("/signup", form)
		if again.Status != fresh.Status || again.Body != fresh.Body {
			t.Fatalf("signup with a registered email: %d, want %d and the same page", again.Status, fresh.Status)
		}
		if n := mails(); n != 2 {
			t.Fatalf("%d mails queued after a signup with a registered email, want 2 (one to the owner)", n)
		}
		if _, err := h.opts.Accounts.Identity.UserByUsername(t.Context(), "intruder"); err == nil {
			t.Fatal("an account was opened with a registered email")
		}
		if a, _ := m.counts(); a != 0 {
			t.Fatalf("the request sent %d mails itself instead of leaving them to the outbox", a)
		}
	})
}

// An email change to an address another account uses answers exactly as a
// change to a free one; the owner of the taken address and the current
// address are told, and nothing changes.
func TestEmailChangeToATakenAddressLooksLikeSuccess(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		h := newTestHandler(t, s, func(o *Options) { o.CredentialLimit = Limit{Requests: 1000} })
		srv := serve(t, h)
		ann := newBrowser(t, srv)
		u := signedIn(t, h, ann, "ann@example.com", "ann", false)
		if _, err := h.opts.Accounts.Identity.MarkEmailVerified(t.Context(), u.ID); err != nil {
			t.Fatal(err)
		}
		signedIn(t, h, newBrowser(t, srv), "bob@example.com", "bob", false)

		taken := ann.post("/account/email", url.Values{"email": {"bob@example.com"}, "password": {testPassword}})
		free := ann.post("/account/email", url.Values{"email": {"new@example.com"}, "password": {testPassword}})
		if taken.Status != free.Status || taken.Location != free.Location || taken.Body != free.Body {
			t.Fatalf("taken address: %d %q %q; free address: %d %q %q", taken.Status, taken.Location, taken.Body, free.Status, free.Location, free.Body)
		}
		if taken.Status != http.StatusSeeOther {
			t.Fatalf("email change: %d", taken.Status)
		}
		m, ok := h.DevMail().Last("bob@example.com")
		if !ok || !strings.Contains(m.Subject, "tried to use your address") || tokenInLink.MatchString(m.Text) {
			t.Fatalf("mail to the taken address: %+v", m)
		}
		notices := 0
		for _, m := range h.DevMail().Messages() {
			if m.To == "ann@example.com" && strings.Contains(m.Subject, "change of your email") {
				notices++
			}
		}
		if notices != 2 {
			t.Fatalf("the current address got %d notices, want one per request", notices)
		}
		if got, _ := h.opts.Accounts.Identity.UserByID(t.Context(), u.ID); got.Email != "ann@example.com" {
			t.Fatalf("email is %s before any confirmation", got.Email)
		}
		expect(t, "wrong password", ann.post("/account/email", url.Values{"email": {"bob@example.com"}, "password": {"wrong password!"}}),
			http.StatusUnauthorized, "current password is not correct")
	})
}

// Email changes count in the shared credential bucket.
func TestEmailChangeIsRateLimited(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		h := newTestHandler(t, s, func(o *Options) { o.CredentialLimit = Limit{Requests: 3} })
		srv := serve(t, h)
		ann := newBrowser(t, srv)
		signedIn(t, h, ann, "ann@example.com", "ann", false) // one credential request
		for i := range 2 {
			if a := ann.post("/account/email", url.Values{"email": {"x@example.com"}, "password": {"guess " + strings.Repeat("x", i+8)}}); a.Status != http.StatusUnauthorized {
				t.Fatalf("guess %d: %d", i, a.Status)
			}
		}
		a := ann.post("/account/email", url.Values{"email": {"x@example.com"}, "password": {testPassword}})
		if a.Status != http.StatusTooManyRequests || a.Header.Get("Retry-After") == "" {
			t.Fatalf("fourth credential request: %d, want 429 with Retry-After", a.Status)
		}
	})
}
