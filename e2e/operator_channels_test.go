package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/enclavetest"
)

// The operator's capabilities are absent from every other way an admin's
// agent learns of or reaches a capability: capabilitiesSearch finds none
// of them, code mode's declarations and its codemode object hold none of
// them, and a program that calls one is refused as for a made-up name.
func TestOperatorCapabilitiesAbsentFromSearchAndCodeMode(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		admin := s.CreateUser(t, "olga", "admin")
		victim := s.CreateUser(t, "vic")
		c := admin.MCP(t)
		leaks := func(where, text string) {
			t.Helper()
			for _, name := range operatorCapabilities {
				if strings.Contains(text, name) {
					t.Errorf("%s names %s: %.400s", where, name, text)
				}
			}
		}
		for _, q := range []string{"operator", "grant admin", "rotate key", "create account", "suspend", "delete account", "export"} {
			res, err := c.Call("capabilitiesSearch", map[string]any{"query": q, "limit": 50})
			if err != nil || res.IsError {
				t.Fatalf("capabilitiesSearch %q: %v %+v", q, err, res)
			}
			leaks("capabilitiesSearch "+q, res.Text+string(res.Structured))
		}
		if res, err := c.Call("codemodeTypes", map[string]any{}); err == nil && !res.IsError {
			leaks("codemodeTypes", res.Text+string(res.Structured))
		}
		tools, err := c.Request("tools/list", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		leaks("tools/list (descriptions and schemas included)", string(tools))

		res, err := c.Call("execute", map[string]any{"code": `return Object.keys(codemode).join(",")`})
		if err != nil || res.IsError {
			t.Fatalf("execute: %v %+v", err, res)
		}
		if !strings.Contains(res.Text+string(res.Structured), "adminUserSuspend") {
			t.Fatalf("the admin's program has no admin binding: %s", res.Text)
		}
		leaks("the codemode object", res.Text+string(res.Structured))
		email, _ := json.Marshal(victim.Email)
		for _, name := range []string{"operatorAdminGrant", "operatorUserSuspend"} {
			res, err := c.Call("execute", map[string]any{"code": `try { return JSON.stringify(await codemode.` + name + `({email: ` + string(email) + `})) } catch (e) { return "refused: " + e }`})
			if err != nil {
				t.Fatalf("execute: %v", err)
			}
			if out := res.Text + string(res.Structured); !strings.Contains(out, "refused") {
				t.Errorf("a program's call of %s was not refused: %s", name, out)
			}
		}
		g, err := s.Accounts().Roles.RolesAndPermissions(t.Context(), victim.ID)
		if err != nil || g.HasRole("admin") {
			t.Fatalf("the victim's roles %v, %v", g.Roles, err)
		}
		if u, err := s.Accounts().Identity.UserByEmail(t.Context(), victim.Email); err != nil || u.SuspendedAt != nil {
			t.Fatalf("the victim %+v, %v", u, err)
		}
	})
}
