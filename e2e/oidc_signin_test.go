package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/pquerna/otp/totp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/internal/chromiumtest"
	"github.com/enclave-mcp/enclave/oauth"
)

// TestOIDCSignInWithSecondServer: a second enclave server (B, on
// 127.0.0.1) is the external OpenID Provider of server A (on 127.0.0.2),
// found by discovery at its issuer, its ID tokens checked with its JWKS.
// In headless Chromium: carol, who has an account at B only, signs up at
// A with "Sign in with Server B", signs out and signs in with it again;
// dave, who has a password account at A with the email his account at B
// has, is asked for his A password before the identity is linked, then
// signed in; eve, whose address B never verified, is refused.
func TestOIDCSignInWithSecondServer(t *testing.T) {
	bin := chromiumtest.Bin(t)
	for _, d := range enclavetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			// B lets accounts with an unverified address sign in (its
			// ID tokens then say email_verified false).
			b := enclavetest.Start(t, enclavetest.Options{Dialect: d, Config: enclave.Config{OAuth: oauth.Options{AllowUnverifiedEmail: true}}})
			carolAtB := b.CreateUser(t, "carol")
			daveAtB := b.CreateUser(t, "dave")
			eveAtB := &enclavetest.User{Email: "eve@example.com", Password: "test password of eve 0123"}
			if _, _, err := b.Accounts().Identity.CreateUser(t.Context(), accounts.CreateUserInput{Email: eveAtB.Email, Username: "eve", Password: eveAtB.Password}); err != nil {
				t.Fatal(err)
			}
			clientID := oidcRegisterRelyingParty(t, b.URL, "http://127.0.0.2"+federation.CallbackPath("b"))
			a := enclavetest.Start(t, enclavetest.Options{Dialect: d, Host: "127.0.0.2", Config: enclave.Config{
				SignInProviders: []federation.Provider{{Name: "b", Label: "Server B", Kind: federation.KindOIDC, Issuer: b.URL, ClientID: clientID}},
			}})
			daveAtA := a.CreateUser(t, "dave")

			// carol: sign up with B, sign out, sign in with B.
			browser, ctx := chromiumtest.Start(t, bin, 60*time.Second)
			fail := oidcFail(t, browser)
			fail("sign-up page", chromedp.Do(ctx, chromedp.Navigate(a.URL+"/signup"), chromedp.WaitVisible(chromedp.ID("external-b"))))
			fail("sign up with B", chromedp.Do(ctx, chromedp.Click(chromedp.ID("external-b"))))
			oidcThroughB(t, ctx, fail, a.URL, carolAtB)
			fail("signed up at A", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`form[action$="/logout"] button`))))
			carolAtA, err := a.Accounts().Identity.UserByEmail(t.Context(), carolAtB.Email)
			if err != nil || !carolAtA.EmailVerified() {
				t.Fatalf("carol's account at A: %+v %v", carolAtA, err)
			}
			if ids, err := a.Federation().Identities(t.Context(), carolAtA.ID); err != nil || len(ids) != 1 || ids[0].Subject != carolAtB.StableID || ids[0].Issuer != b.URL {
				t.Fatalf("carol's identities: %+v %v", ids, err)
			}
			fail("sign out", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`form[action$="/logout"] button`)), chromedp.WaitVisible(chromedp.ID("external-b"))))
			fail("sign in with B", chromedp.Do(ctx, chromedp.Click(chromedp.ID("external-b"))))
			oidcThroughB(t, ctx, fail, a.URL, carolAtB)
			fail("signed in at A", chromedp.Do(ctx, chromedp.Navigate(a.URL+"/account/security"), chromedp.WaitVisible(chromedp.ID("identities-table"))))
			if n, _ := a.Accounts().Roles.CountUsers(t.Context(), time.Time{}); n.Total != 2 {
				t.Errorf("accounts at A after carol signed in again: %+v", n)
			}

			// An agent's consent flow at A begins with "Sign in with Server
			// B" and comes back to the same authorization request.
			agent := oidcRegisterRelyingParty(t, a.URL, "http://127.0.0.1:9/callback")
			sum := sha256.Sum256([]byte("verifier-of-the-agent-0123456789-0123456789"))
			authorize := a.URL + "/oauth/authorize?" + url.Values{"response_type": {"code"}, "client_id": {agent}, "redirect_uri": {"http://127.0.0.1:9/callback"},
				"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
				"state": {"state-of-the-agent-0123"}, "scope": {"mcp"}, "resource": {a.URL + "/mcp"}}.Encode()
			browser, ctx = chromiumtest.Start(t, bin, 60*time.Second)
			fail = oidcFail(t, browser)
			fail("authorize: sign in with B", chromedp.Do(ctx, chromedp.Navigate(authorize), chromedp.WaitVisible(chromedp.ID("external-b")), chromedp.Click(chromedp.ID("external-b"))))
			oidcThroughB(t, ctx, fail, a.URL, carolAtB)
			fail("consent at A", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`button[value="approve"]`))))
			if loc, _ := chromedp.Run(ctx, chromedp.Location()); !strings.HasPrefix(loc, a.URL+"/oauth/authorize?") || !strings.Contains(loc, agent) {
				t.Fatalf("after the external sign-in the agent's flow is at %s", loc)
			}

			// dave: the identity links only after his A password.
			browser, ctx = chromiumtest.Start(t, bin, 60*time.Second)
			fail = oidcFail(t, browser)
			fail("dave: sign in with B", chromedp.Do(ctx, chromedp.Navigate(a.URL+"/login"), chromedp.WaitVisible(chromedp.ID("external-b")), chromedp.Click(chromedp.ID("external-b"))))
			oidcThroughB(t, ctx, fail, a.URL, daveAtB)
			fail("proof page", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("link-password"))))
			if ids, _ := a.Federation().Identities(t.Context(), daveAtA.ID); len(ids) != 0 {
				t.Fatalf("linked before the proof: %+v", ids)
			}
			fail("wrong password", chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("link-password"), "not daves password"), chromedp.Click(chromedp.ID("link-submit")),
				chromedp.WaitVisible(chromedp.CSS(`p.error`))))
			if ids, _ := a.Federation().Identities(t.Context(), daveAtA.ID); len(ids) != 0 {
				t.Fatalf("linked after a wrong password: %+v", ids)
			}
			fail("prove", chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("link-password"), daveAtA.Password), chromedp.Click(chromedp.ID("link-submit")),
				chromedp.WaitVisible(chromedp.CSS(`form[action$="/logout"] button`))))
			if ids, err := a.Federation().Identities(t.Context(), daveAtA.ID); err != nil || len(ids) != 1 || ids[0].Subject != daveAtB.StableID {
				t.Fatalf("dave's identities: %+v %v", ids, err)
			}

			// dave turns on an authenticator app at A: signing in with B
			// (not trusted for MFA) still asks for his second factor.
			acct, err := a.Accounts().Identity.UserByID(t.Context(), daveAtA.ID)
			fail("dave's account", err)
			en, err := a.Accounts().SecondFactors.BeginTOTP(t.Context(), acct, "enclave")
			fail("begin totp", err)
			code, err := totp.GenerateCode(en.Secret, time.Now())
			fail("totp code", err)
			recovery, err := a.Accounts().SecondFactors.ConfirmTOTP(t.Context(), acct, code)
			fail("confirm totp", err)
			browser, ctx = chromiumtest.Start(t, bin, 60*time.Second)
			fail = oidcFail(t, browser)
			fail("dave with a second factor", chromedp.Do(ctx, chromedp.Navigate(a.URL+"/login"), chromedp.WaitVisible(chromedp.ID("external-b")), chromedp.Click(chromedp.ID("external-b"))))
			oidcThroughB(t, ctx, fail, a.URL, daveAtB)
			fail("second factor asked", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("code"))))
			if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('form[action$="/logout"]').length`)); n != 0 {
				t.Fatal("signed in before the second factor")
			}
			fail("recovery code", chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("code"), recovery[0]), chromedp.Click(chromedp.ID("code-submit")),
				chromedp.WaitVisible(chromedp.CSS(`form[action$="/logout"] button`))))

			// eve: B never verified her address; A refuses it.
			browser, ctx = chromiumtest.Start(t, bin, 60*time.Second)
			fail = oidcFail(t, browser)
			fail("eve: sign in with B", chromedp.Do(ctx, chromedp.Navigate(a.URL+"/login"), chromedp.WaitVisible(chromedp.ID("external-b")), chromedp.Click(chromedp.ID("external-b"))))
			oidcThroughB(t, ctx, fail, a.URL, eveAtB)
			text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main").innerText`))
			fail("eve's page", err)
			if !strings.Contains(text, "did not verify this email address") {
				t.Fatalf("eve's answer: %q", text)
			}
			if _, err := a.Accounts().Identity.UserByEmail(t.Context(), eveAtB.Email); err == nil {
				t.Fatal("an account was opened for an unverified address")
			}
		})
	}
}

func oidcFail(t *testing.T, browser context.Context) func(string, error) {
	return func(step string, err error) {
		t.Helper()
		if err != nil {
			loc, _ := chromedp.Run(browser, chromedp.Location())
			t.Logf("at %s", loc)
			chromiumtest.Screenshot(t, browser, "oidc-signin-"+strings.ReplaceAll(step, " ", "-"))
			t.Fatalf("%s: %v", step, err)
		}
	}
}

// oidcThroughB signs u in at B and consents, as B asks, until the browser
// is back at A (at aURL). It waits for the browser to leave the page of A
// with the "external-b" button first: right after the click on it the
// browser may still show that page.
func oidcThroughB(t *testing.T, ctx context.Context, fail func(string, error), aURL string, u *enclavetest.User) {
	t.Helper()
	// signedIn and consented: each is done once. Right after a click the
	// browser may still show the page it leaves, which would ask again.
	signedIn, consented, away := false, false, false
	for range 100 {
		// One look at the page: its address, what it asks and whether it
		// is A's page with the button (two looks could see two pages).
		snap, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[location.href,
			document.readyState !== "complete" ? "" : document.querySelector('button[value="approve"]') ? "consent" : document.querySelector("#password") ? "login" : document.querySelector("main") ? "page" : "",
			document.getElementById("external-b") ? "button" : ""].join("\n")`))
		fail("look at the page", err)
		parts := strings.SplitN(snap, "\n", 3)
		if len(parts) != 3 {
			t.Fatalf("page snapshot %q", snap)
		}
		loc, state, button := parts[0], parts[1], parts[2] != ""
		if !strings.HasPrefix(loc, aURL+"/") {
			away = true // at B: the page of A the click left is behind
		} else if !away && state != "" && !button {
			// At A, not the page the click leaves: B remembered the
			// person and only redirected; this is already the answer.
			away = true
		}
		if away && strings.HasPrefix(loc, aURL+"/") && !strings.Contains(loc, "/auth/external/") {
			return
		}
		switch {
		case state == "login" && !signedIn && !strings.HasPrefix(loc, aURL):
			signedIn = true
			fail("sign in at B", chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("email"), u.Email), chromedp.SendKeys(chromedp.ID("password"), u.Password),
				chromedp.Click(chromedp.CSS(`form button[type="submit"]`))))
		case state == "consent" && !consented && !strings.HasPrefix(loc, aURL):
			consented = true
			fail("consent at B", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[value="approve"]`))))
		case state == "page" && away && strings.HasPrefix(loc, aURL):
			return // an answer of A's callback
		}
		time.Sleep(200 * time.Millisecond)
	}
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	t.Fatalf("never came back to A (at %s)", loc)
}

// oidcRegisterRelyingParty registers a public client at the server at
// base with one redirect URI.
func oidcRegisterRelyingParty(t *testing.T, base, redirect string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"client_name": "server A", "redirect_uris": []string{redirect},
		"token_endpoint_auth_method": "none", "grant_types": []string{"authorization_code"}, "response_types": []string{"code"},
	})
	resp, err := http.Post(base+oauth.PathRegister, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		ClientID string `json:"client_id"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil || out.ClientID == "" {
		t.Fatalf("register at B: %d %s", resp.StatusCode, raw)
	}
	return out.ClientID
}
