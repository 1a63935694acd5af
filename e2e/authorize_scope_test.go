package e2e

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/web"
)

// scopedURL is the authorization URL of a asking for scope.
func (e *consentEnv) scopedURL(a authorization, scope string) string {
	u, _ := url.Parse(e.url(a))
	q := u.Query()
	q.Set("scope", scope)
	u.RawQuery = q.Encode()
	return u.String()
}

// makeAdmin gives the env's account the admin role (the operator's path).
func (e *consentEnv) makeAdmin(t *testing.T) {
	t.Helper()
	if _, err := e.srv.Accounts().Roles.GrantAdminAsOperator(context.Background(), e.user.ID); err != nil {
		t.Fatal(err)
	}
}

// consentPage signs in on the authorization URL target with a fresh
// browser and returns the consent page and its form action.
func (e *consentEnv) consentPage(t *testing.T, target string) (browser *http.Client, body, action string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	browser = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := browser.Get(target)
	if err != nil {
		t.Fatal(err)
	}
	m := formAction.FindStringSubmatch(readBody(resp))
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("authorize: %d, want the sign-in page", resp.StatusCode)
	}
	resp, err = browser.PostForm(e.base+html.UnescapeString(m[1]), url.Values{"email": {e.email}, "password": {e.password}})
	if err != nil {
		t.Fatal(err)
	}
	body = readBody(resp)
	m = formAction.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil || !strings.Contains(body, `value="approve"`) {
		t.Fatalf("sign-in: %d, want the consent page", resp.StatusCode)
	}
	return browser, body, e.base + html.UnescapeString(m[1])
}

// section is the part of page from the element with id to the end of its
// list (or fieldset), "" when there is none.
func section(page, id, end string) string {
	i := strings.Index(page, `id="`+id+`"`)
	if i < 0 {
		return ""
	}
	j := strings.Index(page[i:], end)
	if j < 0 {
		return page[i:]
	}
	return page[i : i+j]
}

// Every error of /oauth/authorize that cannot be redirected is the shell's
// error page for a person: HTML with the strict security headers, status
// 400, a sentence saying what to do, and never a Basic challenge or JSON.
// That covers an app whose registration the server no longer has (here a
// reset server: registered on one, reconnecting to another) and a
// redirect URI the app did not register. The token and registration
// endpoints keep their RFC JSON.
func TestAuthorizeErrorsForPeople(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			e := newConsentEnv(t, d)
			reset := newConsentEnv(t, d) // the same server after a reset: it knows no client
			id := e.register(t, "Desktop Agent", "http://127.0.0.1:53682/callback")

			tests := []struct {
				name, target, says string
			}{
				{"registration gone", reset.url(reset.newAuthorization(id, "http://127.0.0.1:53682/callback", "state-reset-1")),
					"Remove this server from your app and add it again"},
				{"redirect URI mismatch", e.url(e.newAuthorization(id, "http://127.0.0.1:53682/elsewhere", "state-mismatch-1")),
					"an address it did not register"},
				{"no client", e.base + "/oauth/authorize?response_type=code&state=state-0123456789", "Start connecting again from your app"},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					resp, err := http.Get(tt.target)
					if err != nil {
						t.Fatal(err)
					}
					body := readBody(resp)
					if resp.StatusCode != http.StatusBadRequest {
						t.Errorf("status %d, want 400", resp.StatusCode)
					}
					if h := resp.Header.Get("WWW-Authenticate"); h != "" {
						t.Errorf("WWW-Authenticate %q: the browser would ask for a password", h)
					}
					if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" || strings.HasPrefix(strings.TrimSpace(body), "{") {
						t.Errorf("Content-Type %q, body %.80q: want the HTML page", ct, body)
					}
					if resp.Header.Get("Content-Security-Policy") != web.ContentSecurityPolicy || resp.Header.Get("X-Frame-Options") != "DENY" {
						t.Errorf("headers %v: want the shell's strict policy", resp.Header)
					}
					if !strings.Contains(html.UnescapeString(body), tt.says) || !strings.Contains(body, `<header class="site">`) {
						t.Errorf("the page does not say %q in the shell's layout:\n%s", tt.says, body)
					}
				})
			}

			// The other endpoints answer clients in RFC 6749/7591 JSON.
			resp, err := http.PostForm(reset.base+"/oauth/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {id}})
			if err != nil {
				t.Fatal(err)
			}
			var tokErr struct {
				Error string `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&tokErr)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || tokErr.Error != "invalid_client" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Errorf("token endpoint: %d %q %s, want 401 invalid_client JSON", resp.StatusCode, tokErr.Error, resp.Header.Get("Content-Type"))
			}
			resp, err = http.Post(e.base+"/oauth/register", "application/json", strings.NewReader(`{"redirect_uris":["ftp://x"]}`))
			if err != nil {
				t.Fatal(err)
			}
			body := readBody(resp)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"error":"invalid_redirect_uri"`) && !strings.Contains(body, `"error":"invalid_client_metadata"`) {
				t.Errorf("registration: %d %s, want the RFC 7591 JSON error", resp.StatusCode, body)
			}
		})
	}
}

// The consent page lists, by domain, what the app will be able to call,
// from the registry as the person's agent would see it. The admin
// capabilities are a separate, unticked checkbox, offered only to an admin
// whose app asked for the admin scope; a user never sees them.
func TestConsentListsCapabilities(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			e := newConsentEnv(t, d)
			redirect := "http://127.0.0.1:53682/callback"
			id := e.register(t, "Desktop Agent", redirect)
			userTools := e.srv.Registry().VisibleNames(t.Context(), func() capabilities.Caller {
				c, err := e.srv.Accounts().LoadCaller(t.Context(), e.user.StableID)
				if err != nil {
					t.Fatal(err)
				}
				c.Interactive, c.Scopes = true, []string{"mcp"}
				return c
			}())
			whoami := `data-domain="account"`

			_, body, _ := e.consentPage(t, e.scopedURL(e.newAuthorization(id, redirect, "state-user-admin"), "mcp admin"))
			groups := section(body, "capability-groups", "</ul>")
			if !strings.Contains(groups, whoami) || !strings.Contains(groups, "Who am I") || len(userTools) == 0 {
				t.Fatalf("the consent page does not list the account tools:\n%s", body)
			}
			if strings.Contains(body, `id="admin-scope"`) || strings.Contains(body, `data-domain="admin"`) || strings.Contains(body, `id="admin-not-asked"`) {
				t.Fatalf("a user's consent page offers admin tools:\n%s", body)
			}

			e.makeAdmin(t)
			_, body, _ = e.consentPage(t, e.scopedURL(e.newAuthorization(id, redirect, "state-admin-admin"), "mcp admin"))
			groups = section(body, "capability-groups", "</ul>")
			admin := section(body, "admin-scope", "</fieldset>")
			if !strings.Contains(groups, whoami) || strings.Contains(groups, `data-domain="admin"`) {
				t.Fatalf("the admin's base groups:\n%s", groups)
			}
			if !strings.Contains(admin, `type="checkbox"`) || !strings.Contains(admin, `name="grant" value="admin"`) || strings.Contains(admin, "checked") {
				t.Fatalf("want an unticked admin checkbox:\n%s", admin)
			}
			if !strings.Contains(section(admin, "admin-capability-groups", "</ul>"), `data-domain="admin"`) {
				t.Fatalf("the admin checkbox does not list the admin tools:\n%s", admin)
			}

			_, body, _ = e.consentPage(t, e.scopedURL(e.newAuthorization(id, redirect, "state-admin-mcp"), "mcp"))
			if strings.Contains(body, `id="admin-scope"`) || !strings.Contains(body, `id="admin-not-asked"`) {
				t.Fatalf("an app that did not ask for admin: want the hint, no checkbox:\n%s", body)
			}
		})
	}
}

// Over MCP, an admin's token without the admin scope lists the tools a
// user's does, and calling an admin tool is the step-up answer (403,
// insufficient_scope, the challenge asking for mcp admin); with the scope
// the admin tools are listed.
func TestAdminScopeOverMCP(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ann := s.CreateUser(t, "ann")
		ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
		annTools, err := ann.MCP(t).Tools()
		if err != nil {
			t.Fatal(err)
		}
		plain := ada.TokenWithoutAdmin(t)
		adaPlain, err := s.MCP(t, plain).Tools()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(adaPlain, annTools) || slices.Contains(adaPlain, "adminUserList") {
			t.Fatalf("the admin without the admin scope lists %v, a user %v", adaPlain, annTools)
		}
		adaTools, err := ada.MCP(t).Tools()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(adaTools, "adminUserList") {
			t.Fatalf("the admin with the admin scope lists %v", adaTools)
		}

		session := s.MCP(t, plain).SessionID()
		code, body, _, hdr := rpc(t, s.URL, plain, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"adminUserList","arguments":{}}}`)
		if code != http.StatusForbidden || !strings.Contains(body, "lacks a required scope") ||
			!strings.Contains(hdr.Get("WWW-Authenticate"), `error="insufficient_scope", scope="mcp admin"`) {
			t.Fatalf("admin tool without the admin scope: %d %s %q", code, body, hdr.Get("WWW-Authenticate"))
		}
	})
}
