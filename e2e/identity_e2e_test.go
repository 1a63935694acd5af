package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The attack of issue 11 through the real server: sign up, sign in with
// "keep me signed in", keep the cookie, delete the account; when someone
// later opens an account with the same email, the old cookie does not sign
// in to it (identities are never reused).
func TestDeletedAccountsCookieDoesNotOpenItsSuccessor(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			sc := storagetest.Config(t, d)
			l := startLive(t, enclave.Config{DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL})
			srv, base := l.srv, l.base

			const email, password = "victim@example.com", "correct horse battery staple"
			victim, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: email, Username: "victim", Password: password, Verified: true})
			if err != nil {
				t.Fatal(err)
			}
			jar, _ := cookiejar.New(nil)
			browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := browser.PostForm(base+"/login", url.Values{"email": {email}, "password": {password}, "remember": {"1"}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("sign in: %d", resp.StatusCode)
			}
			account := func() (int, string) {
				t.Helper()
				resp, err := browser.Get(base + "/account")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp.StatusCode, string(b)
			}
			if code, body := account(); code != http.StatusOK || !strings.Contains(body, "victim") {
				t.Fatalf("account page while signed in: %d", code)
			}

			if res, err := srv.Lifecycle().Delete(ctx, storage.Owner{ID: victim.ID, StableID: victim.StableID}); err != nil || !res.Completed {
				t.Fatalf("delete: %+v %v", res, err)
			}
			successor, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: email, Username: "successor", Password: "another long passphrase", Verified: true})
			if err != nil {
				t.Fatal(err)
			}
			if successor.StableID == victim.StableID {
				t.Fatal("the successor got the deleted account's stable id")
			}
			// The browser still holds the deleted account's cookie.
			if code, body := account(); code == http.StatusOK || strings.Contains(body, "successor") {
				t.Fatalf("the deleted account's cookie opened the successor's account page: %d", code)
			}
		})
	}
}
