package capabilities_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// A capability kept to the admin role needs the admin scope from a token:
// an admin's agent whose token lacks it does not list the capability, and
// calling it is the step-up answer naming the scope to obtain.
func ExampleScopeAdmin() {
	reg := capabilities.NewRegistry(capabilities.Options{NoBuiltins: true, Auditor: &capabilitiestest.Auditor{}})
	_ = reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "adminReport", Domain: "admin", Description: "Reports on every account.",
		Annotations: &capabilities.Annotations{ReadOnly: true},
		Requires:    capabilities.Requirement{Role: capabilities.RoleAdmin},
		Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) {
			return capabilities.TextResult("report"), nil
		},
	}))
	agent := capabilitiestest.Admin("ada")
	agent.AllScopes, agent.Scopes = false, []string{"mcp"}

	fmt.Println("listed:", reg.VisibleNames(context.Background(), agent))
	_, err := reg.Invoke(context.Background(), agent, "adminReport", json.RawMessage(`{}`))
	fmt.Println("call:", capabilities.CodeOf(err), reg.CheckScope(context.Background(), agent, "adminReport").Scopes)

	agent.Scopes = append(agent.Scopes, capabilities.ScopeAdmin)
	fmt.Println("with admin:", reg.VisibleNames(context.Background(), agent))
	// Output:
	// listed: []
	// call: insufficient_scope [admin]
	// with admin: [adminReport]
}
