package outbound

import (
	"context"

	"github.com/enclave-mcp/enclave/capabilities"
)

// Capability returns httpRequest: Do for agents, on the calling user's
// behalf and with the calling user's secrets only.
func (g *Gateway) Capability() capabilities.Capability {
	return capabilities.Define(capabilities.Spec[Request, Response]{
		Name: "httpRequest", Domain: "outbound", Title: "Send an HTTP request",
		Description: "Sends an https request to a public host on the signed-in user's behalf and returns the answer. " +
			"Headers and body may use the user's stored secrets as {{secret:NAME}}: each is filled in only for hosts the user approved for that secret " +
			"(otherwise nothing is sent), and any secret value the answer echoes comes back as its placeholder. Counts against a daily quota.",
		Annotations: &capabilities.Annotations{Destructive: true, OpenWorld: true},
		Requires:    capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}},
		Handler: func(ctx context.Context, call *capabilities.Call, in Request) (Response, error) {
			return g.Do(ctx, call.Caller, in)
		},
	})
}
