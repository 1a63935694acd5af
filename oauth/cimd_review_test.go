package oauth_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Attacker review of client ID metadata documents (#29).

// The consent page says "app from <host of the client_id>": a document
// that host merely redirects to, on another host, must not speak for it
// (an open redirect on a well-known host would otherwise let anyone be
// "app from" that host). A redirect within the same host still works.
func TestReviewCIMDRedirectToOtherHost(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		other := newDocServer(t) // same test certificate, another host:port
		e, pages := cimdEnv(t, st, docs)
		const redirect = "http://127.0.0.1:9/cb"

		id := docs.url("/open-redirect.json")
		body, _ := json.Marshal(map[string]any{"client_id": id, "client_name": "Trusted Vendor", "redirect_uris": []string{redirect}})
		other.set("/evil.json", docAnswer{body: string(body)})
		docs.set("/open-redirect.json", docAnswer{location: other.url("/evil.json")})
		resp := e.do(http.MethodGet, e.authURL(docClient(e, id, redirect), nil), nil)
		if got := pages.last(); resp.StatusCode != http.StatusBadRequest || got.Reason != oauth.ErrorClientMetadata ||
			!strings.Contains(got.Message, "redirected to another host") {
			t.Fatalf("a document served by another host after a redirect: %d %+v", resp.StatusCode, got)
		}
		tok := e.token(url.Values{"grant_type": {"authorization_code"}, "code": {"x"}, "client_id": {id}, "redirect_uri": {redirect}, "code_verifier": {strings.Repeat("v", 43)}})
		if tok.Status != http.StatusUnauthorized || tok.Error != "invalid_client" {
			t.Fatalf("token: %d %s", tok.Status, tok.Error)
		}

		// Within the host, a redirect is followed.
		moved := docs.url("/moved.json")
		body, _ = json.Marshal(map[string]any{"client_id": moved, "client_name": "Moved", "redirect_uris": []string{redirect}})
		docs.set("/real.json", docAnswer{body: string(body)})
		docs.set("/moved.json", docAnswer{location: "/real.json"})
		if resp := e.do(http.MethodGet, e.authURL(docClient(e, moved, redirect), nil), nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("a redirect within the host: %d %+v", resp.StatusCode, pages.last())
		}
	})
}

// A host has one spelling: a trailing dot or a port with leading zeros
// reaches the same server but would not match a host block nor this
// server's own host (so the page could say "app from <this server>.").
// Such ids are refused before any fetch.
func TestReviewCIMDHostSpellings(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		e, pages := cimdEnv(t, st, docs)
		const redirect = "http://127.0.0.1:9/cb"
		ctx := t.Context()
		if _, err := e.srv.SetHostBlocked(ctx, docs.host(), true); err != nil {
			t.Fatal(err)
		}
		dhost, dport, _ := strings.Cut(docs.host(), ":")
		ohost, oport, _ := strings.Cut(strings.TrimPrefix(e.ts.URL, "http://"), ":")
		for _, id := range []string{
			"https://" + dhost + ":0" + dport + "/zero.json", // a blocked host, its port spelt with a leading zero
			"https://" + dhost + ".:" + dport + "/dot.json",  // a blocked host with a trailing dot
			"https://" + ohost + ":00" + oport + "/own.json", // this server, its port spelt with leading zeros
			"https://" + ohost + ".:" + oport + "/own2.json", // this server with a trailing dot
			"https://" + dhost + ":" + dport + "0/long.json", // no such port
		} {
			body, _ := json.Marshal(map[string]any{"client_id": id, "client_name": "Spelt", "redirect_uris": []string{redirect}})
			u, _ := url.Parse(id)
			docs.set(u.Path, docAnswer{body: string(body)})
			before := docs.fetches.Load()
			resp := e.do(http.MethodGet, e.authURL(docClient(e, id, redirect), nil), nil)
			if got := pages.last(); resp.StatusCode != http.StatusBadRequest || got.Reason != oauth.ErrorClientMetadata ||
				!strings.Contains(got.Message, "not in its canonical form") {
				t.Errorf("%s: %d %+v", id, resp.StatusCode, got)
			}
			if n := docs.fetches.Load() - before; n != 0 {
				t.Errorf("%s: fetched %d times", id, n)
			}
		}
	})
}

// The token endpoint resolves the client fosite authenticates: with HTTP
// Basic credentials fosite takes the client from the header, so naming
// another client in the form must not skip the document's checks (a
// document withdrawn by its publisher, or expired, keeps no refresh
// working).
func TestReviewCIMDTokenBasicClientID(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		e, _ := cimdEnv(t, st, docs)
		const redirect = "http://127.0.0.1:9/cb"
		id := docs.setDoc("/withdrawn.json", "max-age=300", redirect)
		conf := docClient(e, id, redirect)
		_, email := e.createUser(userState{})
		u := e.authorize(conf, email, nil)
		tok := e.exchange(conf, u.Query().Get("code"), nil)
		if tok.Status != http.StatusOK {
			t.Fatalf("exchange: %d %s", tok.Status, tok.Error)
		}
		// The publisher withdraws the document; the cached one expires.
		docs.set("/withdrawn.json", docAnswer{status: http.StatusNotFound, body: "{}"})
		e.clock.Advance(6 * time.Minute)
		if r := e.refresh(conf, tok.RefreshToken); r.Status != http.StatusUnauthorized {
			t.Fatalf("refresh after the document went: %d %s", r.Status, r.Error)
		}
		other := e.publicClient()
		form := e.refreshForm(conf, tok.RefreshToken)
		form.Set("client_id", other.ClientID)
		req, _ := http.NewRequest(http.MethodPost, e.ts.URL+"/oauth/token", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(url.QueryEscape(id), "")
		resp, err := e.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out tokenResponse
		_ = json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode == http.StatusOK || out.AccessToken != "" {
			t.Fatalf("refresh with the client in Basic and another in the form: %d, a token was issued", resp.StatusCode)
		}
	})
}

// A host block names a host: whoever runs it can serve documents on any
// port, so a block of the bare host covers every port of it (existing
// clients' tokens stop, new ids are refused unfetched); a block naming a
// port covers only that port, and lifting the bare block leaves a client
// a ported block covers blocked.
func TestReviewCIMDHostBlockEveryPort(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		e, pages := cimdEnv(t, st, docs)
		const redirect = "http://127.0.0.1:9/cb"
		ctx := t.Context()
		id := docs.setDoc("/ported.json", "", redirect)
		conf := docClient(e, id, redirect)
		_, email := e.createUser(userState{})
		u := e.authorize(conf, email, nil)
		tok := e.exchange(conf, u.Query().Get("code"), nil)
		if tok.Status != http.StatusOK {
			t.Fatalf("exchange: %d %s", tok.Status, tok.Error)
		}
		bare, _, _ := strings.Cut(docs.host(), ":")
		if changed, err := e.srv.SetHostBlocked(ctx, bare, true); err != nil || !changed {
			t.Fatalf("block %s: %v %v", bare, changed, err)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusUnauthorized {
			t.Error("a token of a client on a blocked host (another port) still works")
		}
		if r := e.refresh(conf, tok.RefreshToken); r.Status != http.StatusUnauthorized {
			t.Errorf("refresh: %d %s", r.Status, r.Error)
		}
		fresh := docs.setDoc("/fresh.json", "", redirect)
		before := docs.fetches.Load()
		e.do(http.MethodGet, e.authURL(docClient(e, fresh, redirect), nil), nil)
		if pages.last().Reason != oauth.ErrorBlockedClient || docs.fetches.Load() != before {
			t.Errorf("a new id on a blocked host: %+v, %d fetches", pages.last(), docs.fetches.Load()-before)
		}
		// A ported block too; lifting the bare one keeps the client blocked.
		if _, err := e.srv.SetHostBlocked(ctx, docs.host(), true); err != nil {
			t.Fatal(err)
		}
		if _, err := e.srv.SetHostBlocked(ctx, bare, false); err != nil {
			t.Fatal(err)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusUnauthorized {
			t.Error("lifting the bare host block lifted the ported one")
		}
		if changed, err := e.srv.SetHostBlocked(ctx, docs.host(), false); err != nil || !changed {
			t.Fatalf("unblock %s: %v %v", docs.host(), changed, err)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusOK {
			t.Error("the token does not work again once no block covers its host")
		}
		// A block of another port does not cover this one.
		if _, err := e.srv.SetHostBlocked(ctx, bare+":1", true); err != nil {
			t.Fatal(err)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusOK {
			t.Error("a block of another port blocked this one")
		}
	})
}

// A code issued for a redirect URI the client's document listed is not
// redeemed once the document, fetched again at the token endpoint, no
// longer lists it: its publisher stopped vouching for that URI.
func TestReviewCIMDRedirectDroppedBeforeExchange(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		e, _ := cimdEnv(t, st, docs)
		const first, second = "http://127.0.0.1:9/first", "http://127.0.0.1:9/second"
		id := docs.setDoc("/swap.json", "max-age=300", first, second)
		conf := docClient(e, id, first)
		e.do(http.MethodGet, e.authURL(conf, nil), nil) // fetched now, used for 5 minutes
		e.clock.Advance(4 * time.Minute)
		_, email := e.createUser(userState{})
		u := e.authorize(conf, email, nil)
		docs.setDoc("/swap.json", "max-age=300", second) // the publisher drops the first URI
		e.clock.Advance(2 * time.Minute)
		if tok := e.exchange(conf, u.Query().Get("code"), nil); tok.Status == http.StatusOK || tok.AccessToken != "" {
			t.Fatalf("a code for a redirect URI the document no longer lists was redeemed: %d", tok.Status)
		} else if tok.Error != "invalid_grant" {
			t.Errorf("error %q, want invalid_grant", tok.Error)
		}
		if n := docs.fetches.Load(); n != 2 {
			t.Errorf("%d fetches, want 2", n)
		}
		// The URI it still lists works.
		conf2 := docClient(e, id, second)
		u = e.authorize(conf2, email, nil)
		if tok := e.exchange(conf2, u.Query().Get("code"), nil); tok.Status != http.StatusOK {
			t.Fatalf("exchange for a listed URI: %d %s", tok.Status, tok.Error)
		}
	})
}

// Other spellings of a loopback address never reach it when only public
// addresses are allowed: IPv6 loopback, IPv4-mapped IPv6, and the
// decimal, hexadecimal and short IPv4 forms some resolvers accept.
func TestReviewCIMDLoopbackForms(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		docs := newDocServer(t)
		var pages *pagedLogin
		e := newEnv(t, st, func(o *oauth.Options) {
			pages = &pagedLogin{fakeLogin: o.LoginConsent.(*fakeLogin)}
			o.LoginConsent = pages
			o.MetadataTLSConfig = docs.trust()
		})
		_, port, _ := strings.Cut(docs.host(), ":")
		const redirect = "http://127.0.0.1:9/cb"
		for _, host := range []string{"[::1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:7f00:1]", "2130706433", "0x7f000001", "127.1", "0177.0.0.1"} {
			id := "https://" + host + ":" + port + "/forms.json"
			body, _ := json.Marshal(map[string]any{"client_id": id, "redirect_uris": []string{redirect}})
			docs.set("/forms.json", docAnswer{body: string(body)})
			resp := e.do(http.MethodGet, e.authURL(docClient(e, id, redirect), nil), nil)
			if got := pages.last(); resp.StatusCode != http.StatusBadRequest || got.Reason != oauth.ErrorClientMetadata {
				t.Errorf("%s: %d %+v", id, resp.StatusCode, got)
			}
		}
		if n := docs.fetches.Load(); n != 0 {
			t.Fatalf("the loopback server was reached %d times", n)
		}
	})
}

// The refusal does not tell a name that resolves to a private address
// (an internal service name of the server's network) from a name that
// does not resolve: both read "does not lead to a public address".
func TestReviewCIMDNoInternalNameOracle(t *testing.T) {
	const missing = "no-such-host.invalid"
	if _, err := net.LookupHost(missing); err == nil {
		t.Skip("the resolver answers for " + missing)
	} else if de, ok := err.(*net.DNSError); !ok || !de.IsNotFound {
		t.Skipf("the resolver does not say %s does not exist: %v", missing, err)
	}
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		var pages *pagedLogin
		e := newEnv(t, st, func(o *oauth.Options) {
			pages = &pagedLogin{fakeLogin: o.LoginConsent.(*fakeLogin)}
			o.LoginConsent = pages
		})
		const redirect = "http://127.0.0.1:9/cb"
		reason := func(id string) string {
			e.do(http.MethodGet, e.authURL(docClient(e, id, redirect), nil), nil)
			_, after, _ := strings.Cut(pages.last().Message, "could not use it: ")
			return after
		}
		internal, nowhere := reason("https://localhost/x.json"), reason("https://"+missing+"/x.json")
		if internal == "" || internal != nowhere || !strings.Contains(internal, "does not lead to a public address") {
			t.Fatalf("a private name says %q, a missing one %q", internal, nowhere)
		}
	})
}
