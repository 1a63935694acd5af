package e2e

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// The account-administration capabilities work over MCP for admins only,
// never grant admin, and adminUserCreate mails its setup link through the
// outbox instead of answering with it.
func TestAdminUserCapabilitiesOverMCP(t *testing.T) {
	mailer := &recordingMailer{}
	enclavetest.Each(t, enclavetest.Options{Config: enclave.Config{Mailer: mailer}}, func(t *testing.T, s *enclavetest.Server) {
		ann := s.CreateUser(t, "ann")
		ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
		annMCP, adaMCP := ann.MCP(t), ada.MCP(t)
		names := []string{"adminUserList", "adminUserGet", "adminUserSuspend", "adminUserUnsuspend", "adminUserVerify", "adminRoleAssign", "adminRoleRemove", "adminUserCreate"}
		annTools, _ := annMCP.Tools()
		adaTools, _ := adaMCP.Tools()
		for _, n := range names {
			if slices.Contains(annTools, n) || !slices.Contains(adaTools, n) {
				t.Fatalf("%s: ann sees it %v, ada sees it %v", n, slices.Contains(annTools, n), slices.Contains(adaTools, n))
			}
		}
		// A plain user cannot suspend the admin.
		if res, err := annMCP.Call("adminUserSuspend", map[string]any{"userId": ada.StableID}); err == nil && !res.IsError {
			t.Fatal("a plain user suspended an admin over MCP")
		}
		if u, _ := s.Accounts().Identity.UserByID(t.Context(), ada.ID); u.SuspendedAt != nil {
			t.Fatal("the admin is suspended")
		}

		res, err := adaMCP.Call("adminUserGet", map[string]any{"userId": ann.StableID})
		if err != nil || res.IsError {
			t.Fatalf("get: %+v %v", res, err)
		}
		var got accounts.AdminUserOutput
		if err := res.Decode(&got); err != nil || got.User.Email != ann.Email {
			t.Fatalf("get: %s %v", res.Structured, err)
		}
		res, err = adaMCP.Call("adminRoleAssign", map[string]any{"userId": ann.StableID, "role": capabilities.RoleAdmin})
		if err != nil || !res.IsError || !strings.Contains(res.Text, "operator") {
			t.Fatalf("assign admin over MCP: %+v %v", res, err)
		}
		if g, _ := s.Accounts().Roles.RolesAndPermissions(t.Context(), ann.ID); g.HasRole(capabilities.RoleAdmin) {
			t.Fatal("MCP granted admin")
		}

		email := "fresh-" + strings.ToLower(string(s.Store().Dialect())) + "@example.com"
		res, err = adaMCP.Call("adminUserCreate", map[string]any{"email": email, "username": "fresh-one"})
		if err != nil || res.IsError {
			t.Fatalf("create: %+v %v", res, err)
		}
		if strings.Contains(string(res.Structured)+res.Text, "token=") {
			t.Fatalf("the answer carries the setup link: %s", res.Structured)
		}
		var msg string
		for deadline := time.Now().Add(15 * time.Second); msg == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			for _, m := range mailer.messages() {
				if m.To == email {
					msg = m.Text
				}
			}
		}
		m := regexp.MustCompile(`/password/setup\?token=(\S+)`).FindStringSubmatch(msg)
		if m == nil {
			t.Fatalf("no setup link delivered to %s: %q", email, msg)
		}
		token, _ := url.QueryUnescape(m[1])
		if _, err := s.Accounts().Credentials.SetPasswordWithToken(t.Context(), token, "a long enough password"); err != nil {
			t.Fatalf("the mailed link does not work: %v", err)
		}
	})
}

// What the reference keeps to the session-authenticated web shell is not
// reachable over MCP, even by an interactive agent session of the owner.
func TestSessionOnlyCapabilitiesNotOverMCP(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{})
	ann := s.CreateUser(t, "ann")
	c := ann.MCP(t)
	if res, err := c.Call("secretSet", map[string]any{"name": "key", "value": "sk-ann"}); err != nil || res.IsError {
		t.Fatalf("secretSet: %+v %v", res, err)
	}
	tools, err := c.Tools()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]any{
		"secretReveal":             map[string]any{"name": "key"},
		"accountPasswordChange":    map[string]any{"current": ann.Password, "new": "another long passphrase"},
		"accountDelete":            map[string]any{"confirm": ann.Username, "password": ann.Password},
		"accountEmailChange":       map[string]any{"password": ann.Password, "email": "elsewhere@example.com"},
		"accountEmailClaimRelease": map[string]any{"email": "former@example.com"},
	}
	for name, args := range calls {
		if slices.Contains(tools, name) {
			t.Errorf("tools/list shows %s", name)
		}
		res, err := c.Call(name, args)
		if err == nil && (!res.IsError || strings.Contains(res.Text, "sk-ann")) {
			t.Errorf("%s ran over MCP: %+v", name, res)
		}
	}
	if _, err := s.Accounts().Credentials.Login(t.Context(), ann.Email, ann.Password); err != nil {
		t.Fatalf("the password changed over MCP: %v", err)
	}
}
