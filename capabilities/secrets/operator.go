package secrets

import (
	"context"

	"github.com/enclave-mcp/enclave/capabilities"
)

// OperatorRotateOutput is the answer of operatorSecretKeysRotate.
type OperatorRotateOutput struct {
	KeyID       int64 `json:"keyId" jsonschema:"the new current data key"`
	Reencrypted int   `json:"reencrypted" jsonschema:"secrets sealed again under the new key"`
	Failed      int   `json:"failed" jsonschema:"secrets that did not open and were left as they were"`
}

// OperatorCapability returns operatorSecretKeysRotate, the operator's
// (capabilities.Requirement.Operator) command-line key rotation: a new
// data key, and every secret sealed again under it (RotateKeys).
func (s *Service) OperatorCapability() capabilities.Capability {
	return capabilities.Define(capabilities.Spec[struct{}, OperatorRotateOutput]{
		Name: "operatorSecretKeysRotate", Domain: "operator", Title: "Rotate the data key",
		Description: "Makes a new data key and seals every stored secret again under it; secrets that do not open are counted and left as they were.",
		Annotations: &capabilities.Annotations{}, Requires: capabilities.Requirement{Operator: true},
		Handler: func(ctx context.Context, _ *capabilities.Call, _ struct{}) (OperatorRotateOutput, error) {
			res, err := s.RotateKeys(ctx)
			return OperatorRotateOutput{KeyID: res.KeyID, Reencrypted: res.Reencrypted, Failed: res.Failed}, err
		},
	})
}
