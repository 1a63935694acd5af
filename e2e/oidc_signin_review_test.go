package e2e

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/storage"
)

// The attacker review of sign-in with external providers (#29): a Go
// HTTP client with a cookie jar plays the browser (it sets the Fetch
// Metadata and Referer headers an attacker's page makes a browser send),
// server B is the OpenID Provider and server A the relying party, as in
// TestOIDCSignInWithSecondServer.

// oidcReviewServers starts B (the provider, on 127.0.0.1) and A (on
// 127.0.0.2, with provider "b"); A's accounts clock runs offset behind
// (when not nil), and its sign-up mode is signup ("" for open).
func oidcReviewServers(t *testing.T, d storage.Dialect, offset *atomic.Int64, signup ...accounts.SignupMode) (a, b *enclavetest.Server) {
	t.Helper()
	b = enclavetest.Start(t, enclavetest.Options{Dialect: d})
	clientID := oidcRegisterRelyingParty(t, b.URL, "http://127.0.0.2"+federation.CallbackPath("b"))
	cfg := enclave.Config{SignInProviders: []federation.Provider{{Name: "b", Label: "Server B", Kind: federation.KindOIDC, Issuer: b.URL, ClientID: clientID}}}
	if offset != nil {
		cfg.Accounts.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	}
	if len(signup) > 0 {
		cfg.Accounts.Signup = signup[0]
	}
	a = enclavetest.Start(t, enclavetest.Options{Dialect: d, Host: "127.0.0.2", Config: cfg})
	return a, b
}

// oidcReviewBrowser is a browser without JavaScript: it follows no
// redirect by itself.
type oidcReviewBrowser struct {
	t *testing.T
	c *http.Client
}

func newOIDCReviewBrowser(t *testing.T) *oidcReviewBrowser {
	jar, _ := cookiejar.New(nil)
	return &oidcReviewBrowser{t: t, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// do sends a request with headers and returns the answer and its body.
func (b *oidcReviewBrowser) do(method, target string, form url.Values, hdr map[string]string) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, string(raw)
}

// signIn signs u in at s with the password.
func (b *oidcReviewBrowser) signIn(s *enclavetest.Server, u *enclavetest.User) {
	b.t.Helper()
	resp, body := b.do("POST", s.URL+"/login", url.Values{"email": {u.Email}, "password": {u.Password}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("sign in %s: %d %.300s", u.Email, resp.StatusCode, body)
	}
}

func (b *oidcReviewBrowser) signOut(s *enclavetest.Server) {
	b.t.Helper()
	if resp, _ := b.do("POST", s.URL+"/logout", url.Values{}, nil); resp.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("sign out: %d", resp.StatusCode)
	}
}

var oidcReviewForm = regexp.MustCompile(`<form[^>]*method="post"[^>]*action="([^"]*/oauth/authorize[^"]*)"`)

// throughB follows the redirect to B's authorization endpoint, signs u in
// there and consents, and returns the URL of A's callback B redirects to
// (not yet visited).
func (b *oidcReviewBrowser) throughB(bs *enclavetest.Server, authURL string, u *enclavetest.User) string {
	b.t.Helper()
	step := "authorize"
	next := func(resp *http.Response, body string) string {
		b.t.Helper()
		m := oidcReviewForm.FindStringSubmatch(body)
		if resp.StatusCode != http.StatusOK || m == nil {
			b.t.Fatalf("%s at B: %d %.300s", step, resp.StatusCode, body)
		}
		return bs.URL + html.UnescapeString(m[1])
	}
	action := next(b.do("GET", authURL, nil, nil))
	step = "sign in"
	resp, body := b.do("POST", action, url.Values{"email": {u.Email}, "password": {u.Password}}, nil)
	if resp.StatusCode != http.StatusSeeOther { // B asks for consent unless u gave it before
		action = next(resp, body)
		resp, body = b.do("POST", action, url.Values{"decision": {"approve"}}, nil)
	}
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, federation.CallbackPath("b")) {
		b.t.Fatalf("consent at B: %d %s %.300s", resp.StatusCode, loc, body)
	}
	return loc
}

// start visits A's start link with hdr and returns the answer.
func (b *oidcReviewBrowser) start(a *enclavetest.Server, hdr map[string]string) (*http.Response, string) {
	b.t.Helper()
	return b.do("GET", a.URL+"/auth/external/b/start", nil, hdr)
}

var sameOrigin = map[string]string{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "navigate"}

func identitiesOf(t *testing.T, a *enclavetest.Server, u *enclavetest.User) []federation.Identity {
	t.Helper()
	ids, err := a.Federation().Identities(t.Context(), u.ID)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestOIDCReviewLinkFinishesOnlyForTheSameSignedInPerson: a link started
// by a signed-in person is finished only while the same person is signed
// in on that browser. Alice starts linking on a shared browser and walks
// away; mallory, at the provider's page, signs in there as himself, and
// the browser signs out (or bob signs in) before the provider's answer
// comes back: the identity must not land on alice's (or anyone's)
// account, which would give mallory a lasting way into alice's account.
func TestOIDCReviewLinkFinishesOnlyForTheSameSignedInPerson(t *testing.T) {
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			a, b := oidcReviewServers(t, d, nil)
			aliceAtB, malloryAtB := b.CreateUser(t, "alice"), b.CreateUser(t, "mallory")
			alice, bob := a.CreateUser(t, "alice"), a.CreateUser(t, "bob")

			for _, tc := range []struct {
				name  string
				after func(br *oidcReviewBrowser)
			}{
				{"signed out", func(br *oidcReviewBrowser) { br.signOut(a) }},
				{"another person signed in", func(br *oidcReviewBrowser) { br.signOut(a); br.signIn(a, bob) }},
			} {
				br := newOIDCReviewBrowser(t)
				br.signIn(a, alice)
				resp, _ := br.start(a, sameOrigin)
				if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), b.URL) {
					t.Fatalf("%s: alice's link start: %d %s", tc.name, resp.StatusCode, resp.Header.Get("Location"))
				}
				callback := br.throughB(b, resp.Header.Get("Location"), malloryAtB)
				tc.after(br)
				resp, body := br.do("GET", callback, nil, nil)
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("%s: the callback answered %d %s", tc.name, resp.StatusCode, resp.Header.Get("Location"))
				}
				if strings.Contains(body, malloryAtB.StableID) {
					t.Errorf("%s: the page shows the provider's subject", tc.name)
				}
				if ids := identitiesOf(t, a, alice); len(ids) != 0 {
					t.Fatalf("%s: mallory's identity was linked to alice's account: %+v", tc.name, ids)
				}
				if ids := identitiesOf(t, a, bob); len(ids) != 0 {
					t.Fatalf("%s: mallory's identity was linked to bob's account: %+v", tc.name, ids)
				}
			}

			// The same person still signed in links her identity.
			br := newOIDCReviewBrowser(t)
			br.signIn(a, alice)
			resp, _ := br.start(a, sameOrigin)
			callback := br.throughB(b, resp.Header.Get("Location"), aliceAtB)
			if resp, body := br.do("GET", callback, nil, nil); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("alice's own link: %d %.300s", resp.StatusCode, body)
			}
			if ids := identitiesOf(t, a, alice); len(ids) != 1 || ids[0].Subject != aliceAtB.StableID {
				t.Fatalf("alice's identities: %+v", ids)
			}
		})
	}
}

// TestOIDCReviewLinkStartIsNotCrossSite: the start link is a GET, so any
// site can send a signed-in person's browser to it. For a signed-in
// person it links whatever identity the provider's session holds (an
// attacker who logged the browser in to the provider as himself, or who
// controls the provider session, gets a lasting way into the account):
// only a navigation from this server's own pages may start a link. A
// person who is not signed in may still arrive from anywhere.
func TestOIDCReviewLinkStartIsNotCrossSite(t *testing.T) {
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			a, b := oidcReviewServers(t, d, nil)
			alice := a.CreateUser(t, "alice")
			br := newOIDCReviewBrowser(t)
			br.signIn(a, alice)
			for name, hdr := range map[string]map[string]string{
				"cross-site":                   {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"},
				"same-site":                    {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate"},
				"no fetch metadata, elsewhere": {"Referer": "https://attacker.example/page"},
				"no fetch metadata, nothing":   {},
			} {
				resp, body := br.start(a, hdr)
				if resp.StatusCode != http.StatusForbidden || strings.HasPrefix(resp.Header.Get("Location"), b.URL) {
					t.Errorf("%s: a signed-in person's link start answered %d %s", name, resp.StatusCode, resp.Header.Get("Location"))
				} else if !strings.Contains(body, "security page") {
					t.Errorf("%s: the refusal does not say where to link from: %.400s", name, body)
				}
			}
			for name, hdr := range map[string]map[string]string{
				"same-origin":                     sameOrigin,
				"no fetch metadata, our own page": {"Referer": a.URL + "/account/security"},
			} {
				if resp, _ := br.start(a, hdr); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), b.URL) {
					t.Errorf("%s: the link start answered %d %s", name, resp.StatusCode, resp.Header.Get("Location"))
				}
			}
			// Signed out, a sign-in may start from anywhere.
			anon := newOIDCReviewBrowser(t)
			if resp, _ := anon.start(a, map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), b.URL) {
				t.Errorf("a signed-out sign-in from another site answered %d", resp.StatusCode)
			}
		})
	}
}

// TestOIDCReviewLinkNeedsARecentSignIn: linking adds a lasting way into
// the account, so a session cookie alone (stolen, or a browser left
// signed in for days) does not link: the person signed in within the last
// ten minutes.
func TestOIDCReviewLinkNeedsARecentSignIn(t *testing.T) {
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			var offset atomic.Int64
			offset.Store(int64(-2 * time.Hour))
			a, b := oidcReviewServers(t, d, &offset)
			alice := a.CreateUser(t, "alice")
			old := newOIDCReviewBrowser(t)
			old.signIn(a, alice) // two hours ago
			offset.Store(0)
			resp, body := old.start(a, sameOrigin)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "sign in again") {
				t.Errorf("a link from a two-hour-old session answered %d %s %.400s", resp.StatusCode, resp.Header.Get("Location"), body)
			}
			fresh := newOIDCReviewBrowser(t)
			fresh.signIn(a, alice)
			if resp, _ := fresh.start(a, sameOrigin); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), b.URL) {
				t.Errorf("a link right after signing in answered %d", resp.StatusCode)
			}
		})
	}
}

// TestOIDCReviewStartIsRateLimited: every visit of the start link (no
// session, no form, no CSRF check: a GET) records a sign-in state row for
// ten minutes. Without a bound one client fills the table as fast as it
// can send requests; visits are counted per client network.
func TestOIDCReviewStartIsRateLimited(t *testing.T) {
	a, b := oidcReviewServers(t, storage.SQLite, nil)
	anon := newOIDCReviewBrowser(t)
	refused := 0
	for range 200 {
		resp, _ := anon.start(a, nil)
		switch {
		case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "":
			refused++
		case resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), b.URL):
			t.Fatalf("start: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if refused < 150 {
		t.Fatalf("%d of 200 starts in a row from one client were refused", refused)
	}
}

// TestOIDCReviewSignupModesApplyToExternalSignIn: with sign-up closed or
// by invitation, a new identity (verified email, no account) opens no
// account, from the sign-in page or from an agent's /oauth/authorize;
// an identity already linked still signs in.
func TestOIDCReviewSignupModesApplyToExternalSignIn(t *testing.T) {
	for _, d := range enclavetest.Dialects() {
		for _, mode := range []accounts.SignupMode{accounts.SignupClosed, accounts.SignupInvite} {
			t.Run(string(d)+"/"+string(mode), func(t *testing.T) {
				a, b := oidcReviewServers(t, d, nil, mode)
				carolAtB, daveAtB := b.CreateUser(t, "carol"), b.CreateUser(t, "dave")
				dave := a.CreateUser(t, "dave")
				if err := a.Federation().Link(t.Context(), dave.ID, &federation.Result{Provider: "b", Issuer: b.URL, Subject: daveAtB.StableID}); err != nil {
					t.Fatal(err)
				}
				for _, redirect := range []string{"", "/oauth/authorize?client_id=x"} {
					br := newOIDCReviewBrowser(t)
					start := a.URL + "/auth/external/b/start"
					if redirect != "" {
						start += "?" + url.Values{"redirectTo": {redirect}}.Encode()
					}
					resp, _ := br.do("GET", start, nil, nil)
					callback := br.throughB(b, resp.Header.Get("Location"), carolAtB)
					resp, body := br.do("GET", callback, nil, nil)
					if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "sign-up") {
						t.Errorf("%s: a new identity answered %d %s %.300s", redirect, resp.StatusCode, resp.Header.Get("Location"), body)
					}
					if _, err := a.Accounts().Identity.UserByEmail(t.Context(), carolAtB.Email); err == nil {
						t.Fatalf("%s: sign-up %s opened an account for a new identity", redirect, mode)
					}
				}
				br := newOIDCReviewBrowser(t)
				resp, _ := br.start(a, nil)
				callback := br.throughB(b, resp.Header.Get("Location"), daveAtB)
				if resp, body := br.do("GET", callback, nil, nil); resp.StatusCode != http.StatusSeeOther {
					t.Errorf("dave's linked identity: %d %.300s", resp.StatusCode, body)
				}
			})
		}
	}
}

var (
	oidcReviewToken      = regexp.MustCompile(`name="token" value="([^"]+)"`)
	oidcReviewPending    = regexp.MustCompile(`name="pending" value="([^"]+)"`)
	oidcReviewRedirectTo = regexp.MustCompile(`name="redirectTo" value="([^"]*)"`)
)

// TestOIDCReviewLinkWaitsForTheSecondFactor: an identity whose verified
// email is an account's is linked once the person proves that account;
// when the account has a second factor, the proof is the password AND
// the second factor. Linked after the password alone, whoever has the
// password (not the authenticator) adds a lasting way in, and through a
// provider trusted for its MFA claim (trust-mfa) signs in without ever
// giving the account's second factor.
func TestOIDCReviewLinkWaitsForTheSecondFactor(t *testing.T) {
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			var offset atomic.Int64
			a, b := oidcReviewServers(t, d, &offset)
			ctx := t.Context()
			daveAtB, dave := b.CreateUser(t, "dave"), a.CreateUser(t, "dave")
			u, err := a.Accounts().Identity.UserByID(ctx, dave.ID)
			if err != nil {
				t.Fatal(err)
			}
			e, err := a.Accounts().SecondFactors.BeginTOTP(ctx, u, "A")
			if err != nil {
				t.Fatal(err)
			}
			code, _ := totp.GenerateCode(e.Secret, time.Now())
			if _, err := a.Accounts().SecondFactors.ConfirmTOTP(ctx, u, code); err != nil {
				t.Fatal(err)
			}
			offset.Store(int64(time.Minute)) // the next time step: a fresh code

			br := newOIDCReviewBrowser(t)
			resp, _ := br.start(a, nil)
			resp, body := br.do("GET", br.throughB(b, resp.Header.Get("Location"), daveAtB), nil, nil)
			m := oidcReviewToken.FindStringSubmatch(body)
			if resp.StatusCode != http.StatusOK || m == nil {
				t.Fatalf("proof page: %d %.300s", resp.StatusCode, body)
			}
			resp, body = br.do("POST", a.URL+"/auth/external/link", url.Values{"token": {html.UnescapeString(m[1])}, "password": {dave.Password}}, nil)
			pending, redirect := oidcReviewPending.FindStringSubmatch(body), oidcReviewRedirectTo.FindStringSubmatch(body)
			if resp.StatusCode != http.StatusOK || pending == nil || redirect == nil {
				t.Fatalf("after the password: %d %.300s", resp.StatusCode, body)
			}
			if ids := identitiesOf(t, a, dave); len(ids) != 0 {
				t.Fatalf("linked after the password alone, before the second factor: %+v", ids)
			}
			// The link's finish is not reached without the second factor.
			if resp, _ := br.do("GET", a.URL+"/auth/external/link/finish?"+url.Values{"token": {html.UnescapeString(m[1])}}.Encode(), nil, nil); resp.StatusCode != http.StatusBadRequest {
				t.Errorf("the link's finish before the second factor answered %d %s", resp.StatusCode, resp.Header.Get("Location"))
			}
			if ids := identitiesOf(t, a, dave); len(ids) != 0 {
				t.Fatalf("linked without the second factor: %+v", ids)
			}
			code, _ = totp.GenerateCode(e.Secret, time.Now().Add(time.Minute))
			resp, body = br.do("POST", a.URL+"/login/two-factor", url.Values{"pending": {html.UnescapeString(pending[1])},
				"redirectTo": {html.UnescapeString(redirect[1])}, "code": {code}}, nil)
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("second factor: %d %.300s", resp.StatusCode, body)
			}
			for range 3 { // to where the sign-in was started for
				if loc := resp.Header.Get("Location"); resp.StatusCode == http.StatusSeeOther && strings.Contains(loc, "/auth/external/") {
					resp, body = br.do("GET", a.URL+loc, nil, nil)
				}
			}
			if resp.StatusCode != http.StatusSeeOther || strings.Contains(resp.Header.Get("Location"), "/auth/external/") {
				t.Fatalf("after the second factor: %d %s %.300s", resp.StatusCode, resp.Header.Get("Location"), body)
			}
			if ids := identitiesOf(t, a, dave); len(ids) != 1 || ids[0].Subject != daveAtB.StableID {
				t.Fatalf("dave's identities after the password and the second factor: %+v", ids)
			}
		})
	}
}

// TestOIDCReviewSuspendedAccountGetsNoLink: a suspended account's
// password on the proof page links nothing (the sign-in after it was
// refused, but the identity stayed linked to the account).
func TestOIDCReviewSuspendedAccountGetsNoLink(t *testing.T) {
	a, b := oidcReviewServers(t, storage.SQLite, nil)
	daveAtB, dave := b.CreateUser(t, "dave"), a.CreateUser(t, "dave")
	if _, err := a.Accounts().Lifecycle.Suspend(t.Context(), dave.ID); err != nil {
		t.Fatal(err)
	}
	br := newOIDCReviewBrowser(t)
	resp, _ := br.start(a, nil)
	resp, body := br.do("GET", br.throughB(b, resp.Header.Get("Location"), daveAtB), nil, nil)
	m := oidcReviewToken.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("proof page: %d %.300s", resp.StatusCode, body)
	}
	resp, body = br.do("POST", a.URL+"/auth/external/link", url.Values{"token": {html.UnescapeString(m[1])}, "password": {dave.Password}}, nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a suspended account's proof answered %d %.300s", resp.StatusCode, body)
	}
	if ids := identitiesOf(t, a, dave); len(ids) != 0 {
		t.Fatalf("an identity was linked to a suspended account: %+v", ids)
	}
}
