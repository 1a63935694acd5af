package community

import (
	"fmt"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/retention"
)

// Wire plugs the community into a server: it declares the retention of
// the community's tables in policies (they exist whether or not the
// community is on) and, unless opts.Disabled is set or code mode is off
// (code is nil), builds the service on code's packages, registers the
// enrichers of its community.* events and registers its capabilities on
// reg, every admin moderation action wrapped by audited. The service is
// nil when the community is off.
func Wire(cfg Config, opts Options, code *codemode.Service, reg *capabilities.Registry,
	audited func([]capabilities.Capability) []capabilities.Capability, policies *retention.Set) (*Service, error) {
	if err := policies.Add(RetentionPolicies()...); err != nil {
		return nil, err
	}
	if opts.Disabled || code == nil {
		return nil, nil
	}
	cfg.Packages = code
	svc, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := reg.Register(audited(svc.Capabilities())...); err != nil {
		return nil, fmt.Errorf("register the community: %w", err)
	}
	return svc, nil
}
