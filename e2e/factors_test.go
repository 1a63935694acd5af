package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"html"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Second factors are in the account export without secret material, are
// deleted with the account, and --require-admin-2fa refuses admin
// capabilities to an admin without one (any transport: the registry).
func TestSecondFactorsLifecycleAndAdminGate(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) { secondFactorsLifecycle(t, d) })
	}
}

func secondFactorsLifecycle(t *testing.T, d storage.Dialect) {
	ctx := context.Background()
	srv := newServer(t, d, func(c *enclave.Config) { c.RequireAdmin2FA = true })
	acc := srv.Accounts()
	u, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "fay@example.com", Username: "fay", Password: "correct horse battery", Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "gus@example.com", Username: "gus", Password: "correct horse battery", Verified: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{u.ID, other.ID} {
		if _, err := acc.Roles.GrantAdminAsOperator(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	// An admin without a factor is refused with a message naming enrolment.
	call := func(who accounts.User) error {
		c, err := acc.LoadCaller(ctx, who.StableID)
		if err != nil {
			t.Fatal(err)
		}
		c.AllScopes, c.Interactive = true, true
		_, err = srv.Registry().Invoke(ctx, c, "adminUserList", []byte(`{}`))
		return err
	}
	err = call(u)
	if capabilities.CodeOf(err) != capabilities.CodeSecondFactorRequired || !strings.Contains(err.Error(), "/account/security") {
		t.Fatalf("admin without a factor: %v", err)
	}

	en, err := acc.SecondFactors.BeginTOTP(ctx, u, "enclave")
	if err != nil {
		t.Fatal(err)
	}
	code, _ := totp.GenerateCode(en.Secret, time.Now())
	codes, err := acc.SecondFactors.ConfirmTOTP(ctx, u, code)
	if err != nil {
		t.Fatal(err)
	}
	if err := call(u); err != nil {
		t.Fatalf("admin with a factor: %v", err)
	}
	if err := call(other); capabilities.CodeOf(err) != capabilities.CodeSecondFactorRequired {
		t.Fatalf("the other admin is still without a factor: %v", err)
	}
	const publicKey = "PASSKEY-CREDENTIAL-MATERIAL"
	if _, err := srv.Store().DB.NewRaw("INSERT INTO user_passkeys (user_id, credential_id, name, credential, created_at) VALUES (?, 'cred-fay', 'Fay laptop', ?, ?)",
		u.ID, `{"publicKey":"`+publicKey+`"}`, time.Now().UTC()).Exec(ctx); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	owner := storage.Owner{ID: u.ID, StableID: u.StableID}
	if err := srv.Lifecycle().WriteExport(ctx, owner, &out); err != nil {
		t.Fatal(err)
	}
	export := out.String()
	for _, want := range []string{"user_totp", "user_recovery_codes", "user_passkeys", "Fay laptop", "cred-fay"} {
		if !strings.Contains(export, want) {
			t.Errorf("the export lacks %q", want)
		}
	}
	secrets := []string{en.Secret, "otpauth", publicKey}
	for _, c := range codes {
		sum := sha256.Sum256([]byte(c))
		secrets = append(secrets, c, hex.EncodeToString(sum[:]))
	}
	for _, s := range secrets {
		if strings.Contains(export, s) {
			t.Errorf("the export holds secret material %q", s)
		}
	}

	if _, err := srv.Lifecycle().Delete(ctx, owner); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"user_totp", "user_recovery_codes", "user_passkeys", "login_challenges"} {
		n, err := srv.Store().DB.NewSelect().Table(table).Where("user_id = ?", u.ID).Count(ctx)
		if err != nil || n != 0 {
			t.Errorf("%s keeps %d rows of the deleted account (%v)", table, n, err)
		}
	}
}

// On /oauth/authorize the password of an account with a second factor
// gives the second step, not the consent page; a forged pending sign-in
// gives neither a session nor a code; the right code gives the consent
// page, under the authorization page's policy.
func TestAuthorizeSecondStep(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			e := newConsentEnv(t, d)
			ctx := context.Background()
			en, err := e.srv.Accounts().SecondFactors.BeginTOTP(ctx, e.user, "enclave")
			if err != nil {
				t.Fatal(err)
			}
			code, _ := totp.GenerateCode(en.Secret, time.Now().Add(-30*time.Second))
			if _, err := e.srv.Accounts().SecondFactors.ConfirmTOTP(ctx, e.user, code); err != nil {
				t.Fatal(err)
			}
			id := e.register(t, "Two-step client", "http://127.0.0.1:53682/callback")
			a := e.newAuthorization(id, "http://127.0.0.1:53682/callback", "state-second-step")
			jar, _ := cookiejar.New(nil)
			client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := client.Get(e.url(a))
			if err != nil {
				t.Fatal(err)
			}
			action := formAction.FindStringSubmatch(readBody(resp))
			if action == nil {
				t.Fatal("no sign-in form")
			}
			target := e.base + html.UnescapeString(action[1])

			// A forged pending sign-in, from a client that never gave the
			// password.
			resp, err = client.PostForm(target, url.Values{"pending": {"forged"}, "code": {"123456"}})
			if err != nil {
				t.Fatal(err)
			}
			body := readBody(resp)
			if resp.StatusCode != http.StatusBadRequest || strings.Contains(body, `value="approve"`) || resp.Header.Get("Location") != "" || len(jar.Cookies(mustURL(e.base))) != 0 {
				t.Fatalf("forged pending sign-in: %d %q", resp.StatusCode, resp.Header.Get("Location"))
			}

			resp, err = client.PostForm(target, url.Values{"email": {e.email}, "password": {e.password}})
			if err != nil {
				t.Fatal(err)
			}
			body = readBody(resp)
			m := regexp.MustCompile(`name="pending" value="([^"]+)"`).FindStringSubmatch(body)
			if resp.StatusCode != http.StatusOK || m == nil || strings.Contains(body, `value="approve"`) || len(jar.Cookies(mustURL(e.base))) != 0 {
				t.Fatalf("password step: %d, want the code form and no session", resp.StatusCode)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' http://127.0.0.1:53682") {
				t.Errorf("second step CSP %s", csp)
			}
			code, _ = totp.GenerateCode(en.Secret, time.Now())
			resp, err = client.PostForm(target, url.Values{"pending": {m[1]}, "code": {code}})
			if err != nil {
				t.Fatal(err)
			}
			if body := readBody(resp); resp.StatusCode != http.StatusOK || !strings.Contains(body, `value="approve"`) {
				t.Fatalf("code step: %d, want the consent page", resp.StatusCode)
			}
		})
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// Turning off the authenticator app ends the account's OAuth grants, as a
// password change does: a token issued before it is refused at /mcp.
func TestRemovingAFactorRevokesTokens(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		u := s.CreateUser(t, "hal")
		token := u.Token(t)
		status := func() int {
			body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
			req, _ := http.NewRequest(http.MethodPost, s.URL+"/mcp", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readBody(resp)
			return resp.StatusCode
		}
		if got := status(); got != http.StatusOK {
			t.Fatalf("token before: %d", got)
		}
		acct, err := s.Accounts().Identity.UserByID(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		en, err := s.Accounts().SecondFactors.BeginTOTP(ctx, acct, "enclave")
		if err != nil {
			t.Fatal(err)
		}
		code, _ := totp.GenerateCode(en.Secret, time.Now().Add(-30*time.Second))
		if _, err := s.Accounts().SecondFactors.ConfirmTOTP(ctx, acct, code); err != nil {
			t.Fatal(err)
		}
		if got := status(); got != http.StatusOK {
			t.Fatalf("enrolling revoked the token: %d", got)
		}
		code, _ = totp.GenerateCode(en.Secret, time.Now())
		if err := s.Accounts().SecondFactors.DisableTOTP(ctx, acct, u.Password, code); err != nil {
			t.Fatal(err)
		}
		if got := status(); got != http.StatusUnauthorized {
			t.Fatalf("token after the factor was removed: %d", got)
		}
	})
}
