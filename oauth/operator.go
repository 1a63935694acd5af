package oauth

import (
	"context"

	"github.com/enclave-mcp/enclave/capabilities"
)

// OperatorCapability returns operatorSigningKeyRotate, the operator's
// (capabilities.Requirement.Operator) command-line rotation of the ID
// token signing key (RotateSigningKey).
func (s *Server) OperatorCapability() capabilities.Capability {
	return capabilities.Define(capabilities.Spec[struct{}, struct{}]{
		Name: "operatorSigningKeyRotate", Domain: "operator", Title: "Rotate the ID token signing key",
		Description: "Makes a new ID token signing key: it signs from a minute from now, and the previous one stays published until its ID tokens expire.",
		Annotations: &capabilities.Annotations{}, Requires: capabilities.Requirement{Operator: true},
		Handler: func(ctx context.Context, _ *capabilities.Call, _ struct{}) (struct{}, error) {
			return struct{}{}, s.RotateSigningKey(ctx)
		},
	})
}
