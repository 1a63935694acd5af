package e2e

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
)

// operatorCapabilities are the command line's account actions, as the
// server registers them (internal/cli invokes them by these names).
var operatorCapabilities = []string{
	"operatorAdminGrant", "operatorAdminRevoke", "operatorSecretKeysRotate", "operatorSessionKeyRotate",
	"operatorSigningKeyRotate", "operatorUserCreate", "operatorUserDelete", "operatorUserExport",
	"operatorUserSuspend", "operatorUserUnsuspend",
}

// The operator's capabilities are registered, kept to the operator, and
// for an admin, over MCP with a real admin token and through the registry
// with the callers of a web page and of MCP, they do not exist: absent
// from tools/list and answered exactly like a made-up name, with the
// refusal audited and nothing changed.
func TestOperatorCapabilitiesRefusedToAdmins(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ctx := t.Context()
		reg := s.Registry()
		var registered []string
		for _, c := range reg.All() {
			if c.Requires.Operator {
				registered = append(registered, c.Name)
			} else if strings.HasPrefix(c.Name, "operator") {
				t.Errorf("%s is named for the operator but open to others", c.Name)
			}
		}
		if !slices.Equal(registered, operatorCapabilities) {
			t.Fatalf("operator capabilities %v, want %v", registered, operatorCapabilities)
		}
		if got := reg.VisibleNames(ctx, capabilities.OperatorCaller()); !slices.Equal(got, operatorCapabilities) {
			t.Fatalf("the operator sees %v", got)
		}

		admin := s.CreateUser(t, "olga", capabilities.RoleAdmin)
		victim := s.CreateUser(t, "vic")
		args := map[string]any{"email": victim.Email}

		// Through the registry: the admin's caller as a web page (session)
		// and as an agent (token scopes) would have it.
		page := admin.Caller(t)
		page.Session = true
		for _, caller := range []capabilities.Caller{page, admin.Caller(t)} {
			if !caller.HasRole(capabilities.RoleAdmin) {
				t.Fatalf("the admin's caller has roles %v", caller.Roles)
			}
			visible := reg.VisibleNames(ctx, caller)
			if !slices.Contains(visible, "adminUserSuspend") {
				t.Fatalf("the admin does not see the admin capabilities: %v", visible)
			}
			for _, name := range operatorCapabilities {
				if slices.Contains(visible, name) {
					t.Errorf("the admin sees %s", name)
				}
				raw, _ := json.Marshal(args)
				_, err := reg.Invoke(ctx, caller, name, raw)
				_, unknown := reg.Invoke(ctx, caller, name+"x", raw)
				if capabilities.CodeOf(err) != capabilities.CodeNotFound || sameAnswer(err, name) != sameAnswer(unknown, name+"x") {
					t.Errorf("Invoke(%s) = %v; an unknown name answers %v", name, err, unknown)
				}
			}
		}

		// Over MCP, with the admin's token (scopes mcp and admin).
		c := admin.MCP(t)
		tools, err := c.Tools()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(tools, "adminUserSuspend") {
			t.Fatalf("the admin's token lists no admin capability: %v", tools)
		}
		for _, name := range operatorCapabilities {
			if slices.Contains(tools, name) {
				t.Errorf("tools/list shows %s to an admin", name)
			}
			got, err := c.Call(name, args)
			want, werr := c.Call(name+"x", args)
			if a, b := mcpAnswer(got, err, name), mcpAnswer(want, werr, name+"x"); a != b || a == "" {
				t.Errorf("tools/call %s answered %q; an unknown name %q", name, a, b)
			}
		}

		// Nothing changed, and the refusals are in the audit log as the
		// admin's, never as operator calls.
		g, err := s.Accounts().Roles.RolesAndPermissions(ctx, victim.ID)
		if err != nil || g.HasRole(capabilities.RoleAdmin) {
			t.Fatalf("the victim's roles %v, %v", g.Roles, err)
		}
		if u, err := s.Accounts().Identity.UserByEmail(ctx, victim.Email); err != nil || u.SuspendedAt != nil {
			t.Fatalf("the victim %+v, %v", u, err)
		}
		rows, err := s.Audit().Query(ctx, audit.Filter{Category: audit.CategoryCapability, Action: "tool:operatorAdminGrant"}, storage.PageRequest{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		denied := 0
		for _, e := range rows.Items {
			if e.Result != audit.ResultDenied || e.Reason != string(capabilities.ReasonOperator) || e.UserHash != s.Audit().HashUser(admin.StableID) {
				t.Errorf("audit row %+v: want the admin's denial, operator_only", e)
			}
			denied++
		}
		if denied < 3 { // two registry callers and the MCP call
			t.Errorf("%d denials of operatorAdminGrant audited, want at least 3", denied)
		}
	})
}

// sameAnswer is err's code and message with name taken out, so that the
// answers for two names can be compared.
func sameAnswer(err error, name string) string {
	e, ok := errors.AsType[*capabilities.Error](err)
	if !ok {
		return "not a capabilities error: " + err.Error()
	}
	return string(e.Code) + " " + strings.ReplaceAll(e.Message, name, "NAME")
}

// mcpAnswer is a tools/call answer with name taken out.
func mcpAnswer(res enclavetest.ToolResult, err error, name string) string {
	if rpc, ok := errors.AsType[*enclavetest.RPCError](err); ok {
		return strings.ReplaceAll(rpc.Error()+" "+string(rpc.Data), name, "NAME")
	}
	if err != nil {
		return "transport: " + err.Error()
	}
	if !res.IsError {
		return ""
	}
	return "tool error: " + strings.ReplaceAll(res.Text, name, "NAME")
}
