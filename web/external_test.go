package web

import (
	"context"
	"encoding/json"
	"html"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// externalEnv is a web handler with one external provider, a GitHub
// stand-in whose person (id, email, verified) the test sets, and a clock
// the test moves.
type externalEnv struct {
	srv *httptest.Server
	acc *accounts.Service
	fed *federation.Service
	mu  sync.Mutex
	// what the stand-in answers
	id, email   string
	verified    bool
	userFailure string // a body /api/user fails with (500)
	now         time.Time
}

func (e *externalEnv) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *externalEnv) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

func (e *externalEnv) as(id, email string, verified bool) {
	e.mu.Lock()
	e.id, e.email, e.verified = id, email, verified
	e.mu.Unlock()
}

func newExternalEnv(t *testing.T, s *storage.Store) *externalEnv {
	t.Helper()
	return newExternalEnvAt(t, s, nil, "http://enclave.test", accounts.Config{})
}

// newExternalEnvAt is newExternalEnv serving on ln (nil: a test server's
// own) with base as the public origin and cfg's passkey and sign-up
// settings. The
// stand-in's /authorize sends the browser straight back with a code.
// edit, when given, changes the handler's options once the services
// exist (a registry holding their capabilities).
func newExternalEnvAt(t *testing.T, s *storage.Store, ln net.Listener, base string, cfg accounts.Config, edit ...func(*Options, *accounts.Service, *federation.Service)) *externalEnv {
	t.Helper()
	e := &externalEnv{now: time.Now().UTC()}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		id, email, verified, failure := e.id, e.email, e.verified, e.userFailure
		e.mu.Unlock()
		switch r.URL.Path {
		case "/authorize":
			back := r.URL.Query().Get("redirect_uri") + "?" + url.Values{"state": {r.URL.Query().Get("state")}, "code": {"good"}}.Encode()
			http.Redirect(w, r, back, http.StatusSeeOther)
		case "/token":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"access_token":"gho_x","token_type":"bearer"}`))
		case "/api/user":
			if failure != "" {
				http.Error(w, failure, http.StatusInternalServerError)
				return
			}
			_, _ = w.Write([]byte(`{"id":` + id + `,"login":"someone"}`))
		case "/api/user/emails":
			_ = json.NewEncoder(w).Encode([]map[string]any{{"email": email, "primary": true, "verified": verified}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(api.Close)
	gh := federation.GitHub("gh-id", "gh-secret")
	gh.AuthURL, gh.TokenURL, gh.APIURL = api.URL+"/authorize", api.URL+"/token", api.URL+"/api"
	cfg.Argon2 = accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}
	cfg.Now, cfg.Logger = e.clock, quietLogger()
	acc, err := accounts.New(context.Background(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	fed, err := federation.New(federation.Config{Store: s, BaseURL: base, Providers: []federation.Provider{gh}, Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHandler(t, s, func(o *Options) {
		o.BaseURL, o.Accounts, o.Federation, o.Now = base, acc, fed, e.clock
		o.CredentialLimit = Limit{Requests: 1000, Window: time.Minute}
		for _, f := range edit {
			f(o, acc, fed)
		}
	})
	e.acc, e.fed = acc, fed
	if ln == nil {
		e.srv = serve(t, h)
		return e
	}
	e.srv = httptest.NewUnstartedServer(h)
	e.srv.Listener.Close()
	e.srv.Listener = ln
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	return e
}

// user creates a verified password account.
func (e *externalEnv) user(t *testing.T, name string) accounts.User {
	t.Helper()
	u, _, err := e.acc.Identity.CreateUser(context.Background(), accounts.CreateUserInput{Email: name + "@example.com", Username: name, Password: "correct horse battery", Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func signInAs(t *testing.T, b *browser, name string) {
	t.Helper()
	if a := b.post(pathLogin, url.Values{"email": {name + "@example.com"}, "password": {"correct horse battery"}}); a.Status != http.StatusSeeOther {
		t.Fatalf("sign in as %s: %d\n%s", name, a.Status, a.Body)
	}
}

// start begins a sign-in with the stand-in and returns its state.
func (e *externalEnv) start(t *testing.T, b *browser) string {
	t.Helper()
	return e.startAt(t, b, pathExternalPrefix+"github/start")
}

func (e *externalEnv) startAt(t *testing.T, b *browser, path string) string {
	t.Helper()
	a := fromOurPage(b, path)
	if a.Status != http.StatusSeeOther || !strings.Contains(a.Location, "/authorize?") {
		t.Fatalf("start: %d %s\n%s", a.Status, a.Location, a.Body)
	}
	u, _ := url.Parse(a.Location)
	return u.Query().Get("state")
}

// fromOurPage follows a link on one of this server's pages (a start from
// the sign-in or security page): the browser says so with Fetch Metadata.
func fromOurPage(b *browser, path string) answer {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return b.do(req)
}

func (e *externalEnv) callback(b *browser, state string, extra url.Values) answer {
	q := url.Values{"state": {state}, "code": {"good"}}
	for k, v := range extra {
		q[k] = v
	}
	return b.get(pathExternalPrefix + "github/callback?" + q.Encode())
}

func (e *externalEnv) identities(t *testing.T, userID int64) []federation.Identity {
	t.Helper()
	ids, err := e.fed.Identities(context.Background(), userID)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// A link started by a signed-in person finishes only while the browser is
// still signed in as that account: after another person signed in on the
// same browser the answer is refused and neither account gets the
// identity. Without the switch the same steps link it.
func TestExternalLinkNeedsTheSameSignedInAccount(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newExternalEnv(t, s)
		alice, bob := e.user(t, "alice"), e.user(t, "bob")
		e.as("4242", "someone@example.org", true)

		b := newBrowser(t, e.srv)
		signInAs(t, b, "alice")
		state := e.start(t, b)
		b.post("/logout", url.Values{})
		signInAs(t, b, "bob")
		a := e.callback(b, state, nil)
		expect(t, "callback after another sign-in", a, http.StatusForbidden, "no longer signed in on this browser")
		if ids := e.identities(t, alice.ID); len(ids) != 0 {
			t.Fatalf("alice got the identity: %+v", ids)
		}
		if ids := e.identities(t, bob.ID); len(ids) != 0 {
			t.Fatalf("bob got the identity: %+v", ids)
		}

		// Signed out: refused too.
		b = newBrowser(t, e.srv)
		signInAs(t, b, "alice")
		state = e.start(t, b)
		b.post("/logout", url.Values{})
		expect(t, "callback signed out", e.callback(b, state, nil), http.StatusForbidden, "no longer signed in")

		// The same browser, still alice: linked.
		b = newBrowser(t, e.srv)
		signInAs(t, b, "alice")
		state = e.start(t, b)
		if a := e.callback(b, state, nil); a.Status != http.StatusSeeOther || a.Location != pathSecurity {
			t.Fatalf("alice's own link: %d %s\n%s", a.Status, a.Location, a.Body)
		}
		if ids := e.identities(t, alice.ID); len(ids) != 1 || ids[0].Subject != "4242" {
			t.Fatalf("alice's identities: %+v", ids)
		}
	})
}

// Linking from a signed-in session needs a recent sign-in: past
// ExternalLinkRecentSignIn the start asks to sign in again (and goes to no
// provider); after a new sign-in it starts.
func TestExternalLinkNeedsARecentSignIn(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newExternalEnv(t, s)
		e.user(t, "alice")
		b := newBrowser(t, e.srv)
		signInAs(t, b, "alice")
		e.advance(ExternalLinkRecentSignIn + time.Minute)
		a := fromOurPage(b, pathExternalPrefix+"github/start")
		expect(t, "start with an old sign-in", a, http.StatusForbidden, `id="link-recent"`, "Sign in again to link GitHub")
		if a.Location != "" {
			t.Fatalf("sent to %s", a.Location)
		}
		expect(t, "unknown provider", b.get(pathExternalPrefix+"nope/start"), http.StatusNotFound)
		signInAs(t, b, "alice")
		e.start(t, b)
		// Signed out, the start needs no recent sign-in (it is a sign-in).
		e.start(t, newBrowser(t, e.srv))
	})
}

// Pages show the package's sentences, never a wrapped error's text (the
// provider's answer): a failing API, a denial with a description, an
// issuer-less mix-up.
func TestExternalErrorsShowOnlySentinels(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newExternalEnv(t, s)
		const secret = "PROVIDER-SAYS-internal-db-host-10.0.0.7"
		e.as("4242", "someone@example.org", true)
		e.mu.Lock()
		e.userFailure = secret
		e.mu.Unlock()
		b := newBrowser(t, e.srv)
		a := e.callback(b, e.start(t, b), nil)
		expect(t, "failing provider API", a, http.StatusBadGateway, "could not be verified")
		a2 := e.callback(b, e.start(t, b), url.Values{"error": {"access_denied"}, "error_description": {secret}})
		expect(t, "denied", a2, http.StatusForbidden, "did not sign you in")
		a3 := b.get(pathExternalPrefix + "github/callback?state=" + url.QueryEscape(secret) + "&code=x")
		expect(t, "unknown state", a3, http.StatusBadRequest, "start again")
		for _, a := range []answer{a, a2, a3} {
			if strings.Contains(a.Body, secret) || strings.Contains(a.Body, "federation:") || strings.Contains(a.Body, "code exchange") {
				t.Fatalf("a page shows a wrapped error's text:\n%s", a.Body)
			}
		}
	})
}

// The link page of an account with a passkey offers it as the proof: the
// options are for the browser holding the link only, and an assertion
// that does not verify links nothing. (A real passkey is in
// TestChromiumExternalLinkWithPasskey.)
func TestExternalLinkOffersThePasskey(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newExternalEnv(t, s)
		ctx := context.Background()
		dave := e.user(t, "dave")
		e.as("77", "dave@example.com", true)
		b := newBrowser(t, e.srv)
		a := e.callback(b, e.start(t, b), nil)
		expect(t, "link page without passkeys", a, http.StatusOK, `id="link-password"`)
		if strings.Contains(a.Body, `id="link-passkey"`) {
			t.Fatal("a passkey offered to an account without one")
		}
		if _, err := s.DB.NewRaw("INSERT INTO user_passkeys (user_id, credential_id, name, credential, created_at) VALUES (?, 'c-dave', 'Dave key', '{}', ?)",
			dave.ID, time.Now().UTC()).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		a = e.callback(b, e.start(t, b), nil)
		expect(t, "link page with a passkey", a, http.StatusOK, `id="link-password"`, `id="link-passkey"`, `data-options="`+pathExternalLinkPasskey+`"`)
		token := hiddenToken(t, a.Body)

		// Another browser cannot start the proof of this link.
		if a := newBrowser(t, e.srv).postJSON(pathExternalLinkPasskey, map[string]string{"token": token}); a.Status != http.StatusBadRequest {
			t.Fatalf("options from another browser: %d %s", a.Status, a.Body)
		}
		a = b.postJSON(pathExternalLinkPasskey, map[string]string{"token": token})
		var c accounts.PasskeyCeremony
		if a.Status != http.StatusOK || json.Unmarshal([]byte(a.Body), &c) != nil || c.Token == "" {
			t.Fatalf("options: %d %s", a.Status, a.Body)
		}
		a = b.post(pathExternalLink, url.Values{"token": {token}, "passkeyToken": {c.Token}, "passkeyCredential": {`{"id":"x","type":"public-key"}`}})
		expect(t, "forged assertion", a, http.StatusUnauthorized, "passkey could not be verified")
		a = b.post(pathExternalLink, url.Values{"token": {token}, "passkeyToken": {"made-up"}, "passkeyCredential": {`{}`}})
		expect(t, "made-up ceremony", a, http.StatusUnauthorized, "passkey could not be verified")
		if ids := e.identities(t, dave.ID); len(ids) != 0 {
			t.Fatalf("linked without a proof: %+v", ids)
		}
		// The password still works on the same held link; the passkey, a
		// second factor, is then asked, and the link waits for it.
		a = b.post(pathExternalLink, url.Values{"token": {token}, "password": {"correct horse battery"}})
		expect(t, "password proof", a, http.StatusOK, `id="passkey-second-factor"`)
		if ids := e.identities(t, dave.ID); len(ids) != 0 {
			t.Fatalf("linked on the password alone, before the second factor: %+v", ids)
		}
	})
}

func hiddenToken(t *testing.T, body string) string {
	t.Helper()
	const marker = `name="token" value="`
	i := strings.Index(body, marker)
	if i < 0 {
		t.Fatalf("no token field:\n%s", body)
	}
	rest := body[i+len(marker):]
	return rest[:strings.IndexByte(rest, '"')]
}

// With --signup invite, the sign-up page's invite code rides along an
// external sign-up: an invite link's page puts it on the buttons, the start
// keeps it for this browser and the account opened at the callback spends
// it. Without a code the identity opens nothing; a spent code opens
// nothing again.
func TestExternalSignUpWithInvite(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newExternalEnvAt(t, s, nil, "http://enclave.test", accounts.Config{Signup: accounts.SignupInvite})
		ctx := context.Background()
		code, _, err := e.acc.Identity.CreateInvite(ctx, "for carol", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		b := newBrowser(t, e.srv)
		page := b.get(pathSignup + "?invite=" + url.QueryEscape(code))
		expect(t, "invite link's sign-up page", page, http.StatusOK, `id="external-github"`)
		m := regexp.MustCompile(`id="external-github" href="([^"]+)"`).FindStringSubmatch(page.Body)
		if m == nil {
			t.Fatalf("no button:\n%s", page.Body)
		}
		startPath := html.UnescapeString(m[1])
		if !strings.Contains(startPath, "invite=") {
			t.Fatalf("the button drops the invite: %s", startPath)
		}

		// No code: nothing opens.
		e.as("501", "carol@example.org", true)
		a := e.callback(b, e.start(t, b), nil)
		expect(t, "without the invite", a, http.StatusForbidden, "by invitation")
		if _, err := e.acc.Identity.UserByEmail(ctx, "carol@example.org"); err == nil {
			t.Fatal("an account opened without an invite")
		}

		// The invite page's button: carol's account opens.
		a = e.callback(b, e.startAt(t, b, startPath), nil)
		if a.Status != http.StatusSeeOther {
			t.Fatalf("sign-up with the invite: %d\n%s", a.Status, a.Body)
		}
		carol, err := e.acc.Identity.UserByEmail(ctx, "carol@example.org")
		if err != nil || !carol.EmailVerified() {
			t.Fatalf("carol: %+v %v", carol, err)
		}
		if ids := e.identities(t, carol.ID); len(ids) != 1 || ids[0].Subject != "501" {
			t.Fatalf("carol's identities: %+v", ids)
		}

		// The code is spent: another identity, same button, another browser.
		e.as("502", "mallory@example.org", true)
		other := newBrowser(t, e.srv)
		a = e.callback(other, e.startAt(t, other, startPath), nil)
		expect(t, "a spent invite", a, http.StatusForbidden, "invite code is unknown, already used or expired")
		if _, err := e.acc.Identity.UserByEmail(ctx, "mallory@example.org"); err == nil {
			t.Fatal("a spent invite opened a second account")
		}
	})
}

// Removing the identity that is an account's only way to sign in is
// refused on the security page with the table's 409 and the refusal as a
// sentence (not the domain's lowercase fragment); the identity stays.
func TestRemovingTheLastIdentityIsRefusedWithASentence(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	e := newExternalEnvAt(t, s, nil, "http://enclave.test", accounts.Config{}, func(o *Options, acc *accounts.Service, fed *federation.Service) {
		reg := capabilities.NewRegistry(capabilities.Options{Logger: quietLogger()})
		caps := append(acc.AccountCapabilities(accounts.AccountOptions{}), acc.FactorCapabilities("enclave", nil)...)
		if err := reg.Register(append(caps, fed.Capabilities(lifecycle.Owners(acc))...)...); err != nil {
			t.Fatal(err)
		}
		o.Registry = reg
	})
	b := newBrowser(t, e.srv)
	e.as("601", "dan@example.org", true)
	if a := e.callback(b, e.start(t, b), nil); a.Status != http.StatusSeeOther {
		t.Fatalf("sign-up with the provider: %d\n%s", a.Status, a.Body)
	}
	dan, err := e.acc.Identity.UserByEmail(context.Background(), "dan@example.org")
	if err != nil {
		t.Fatal(err)
	}
	ids := e.identities(t, dan.ID)
	if len(ids) != 1 {
		t.Fatalf("dan's identities: %+v", ids)
	}
	a := b.post(pathSecurityIdentities+"/"+strconv.FormatInt(ids[0].ID, 10)+"/remove", url.Values{})
	if msg := shownMessage(a.Body); a.Status != http.StatusConflict || msg != "This is the account's only way to sign in; set a password or add a passkey first." {
		t.Fatalf("removing the last identity: %d %q", a.Status, msg)
	}
	if ids := e.identities(t, dan.ID); len(ids) != 1 {
		t.Fatalf("the identity was removed: %+v", ids)
	}
}

// With no registry of the embedder's, the shell's own registry runs the
// security page's linked identities (identityList, identityUnlink): a
// person sees and removes their own identity, and one person cannot
// remove another's (it answers like an identity that does not exist, and
// the identity stays).
func TestOwnRegistryRunsIdentitiesPerPerson(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	e := newExternalEnv(t, s)
	dan := newBrowser(t, e.srv)
	e.as("602", "dan@example.org", true)
	if a := e.callback(dan, e.start(t, dan), nil); a.Status != http.StatusSeeOther {
		t.Fatalf("sign-up with the provider: %d\n%s", a.Status, a.Body)
	}
	danUser, err := e.acc.Identity.UserByEmail(context.Background(), "dan@example.org")
	if err != nil {
		t.Fatal(err)
	}
	ids := e.identities(t, danUser.ID)
	if len(ids) != 1 {
		t.Fatalf("dan's identities: %+v", ids)
	}
	remove := pathSecurityIdentities + "/" + strconv.FormatInt(ids[0].ID, 10) + "/remove"
	if a := dan.get(pathSecurity); a.Status != http.StatusOK || !strings.Contains(a.Body, `action="`+remove+`"`) {
		t.Fatalf("dan's security page does not list his identity: %d\n%s", a.Status, a.Body)
	}

	e.user(t, "bob")
	bob := newBrowser(t, e.srv)
	signInAs(t, bob, "bob")
	if a := bob.get(pathSecurity); a.Status != http.StatusOK || strings.Contains(a.Body, remove) {
		t.Fatalf("bob's security page: %d, lists dan's identity: %v", a.Status, strings.Contains(a.Body, remove))
	}
	if a := bob.post(remove, url.Values{}); a.Status != http.StatusNotFound {
		t.Fatalf("bob removing dan's identity: %d\n%s", a.Status, a.Body)
	}
	if got := e.identities(t, danUser.ID); len(got) != 1 {
		t.Fatalf("bob removed dan's identity: %+v", got)
	}

	// Bob's own identity, linked with his password account, he removes.
	e.as("603", "bob-elsewhere@example.org", true)
	if a := e.callback(bob, e.start(t, bob), nil); a.Status != http.StatusSeeOther {
		t.Fatalf("bob links an identity: %d\n%s", a.Status, a.Body)
	}
	bobUser, err := e.acc.Identity.UserByEmail(context.Background(), "bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	own := e.identities(t, bobUser.ID)
	if len(own) != 1 {
		t.Fatalf("bob's identities: %+v", own)
	}
	if a := bob.post(pathSecurityIdentities+"/"+strconv.FormatInt(own[0].ID, 10)+"/remove", url.Values{}); a.Status != http.StatusSeeOther {
		t.Fatalf("bob removing his identity: %d\n%s", a.Status, a.Body)
	}
	if got := e.identities(t, bobUser.ID); len(got) != 0 {
		t.Fatalf("bob's identity stayed: %+v", got)
	}
	if got := e.identities(t, danUser.ID); len(got) != 1 {
		t.Fatalf("dan's identity went with bob's: %+v", got)
	}
}
