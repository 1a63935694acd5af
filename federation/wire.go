package federation

import (
	"fmt"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/federation/fedtables"
	"github.com/enclave-mcp/enclave/retention"
)

// Wire plugs sign-in with external providers into a server: it declares
// the retention of federation's tables in policies (they exist whether or
// not providers are set), builds the service (never nil: the web shell's
// /auth/external routes use it) and registers identityList and
// identityUnlink on reg.
func Wire(cfg Config, owners capabilities.OwnerOf, reg *capabilities.Registry, policies *retention.Set) (*Service, error) {
	if err := policies.Add(fedtables.RetentionPolicies()...); err != nil {
		return nil, err
	}
	svc, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := reg.Register(svc.Capabilities(owners)...); err != nil {
		return nil, fmt.Errorf("register federation: %w", err)
	}
	return svc, nil
}
