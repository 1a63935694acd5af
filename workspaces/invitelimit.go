package workspaces

import (
	"context"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/quota"
)

// InvitationLimitOf is Config.InvitationLimit counted in the quota meter
// (durable, shared by replicas): any account may create a workspace and
// invite any address, and each invitation is a mail the server sends.
// perDay 0 means DefaultInvitationsPerDay; negative, no bound (nil).
func InvitationLimitOf(meter *quota.Meter, perDay int) func(ctx context.Context, c capabilities.Caller) error {
	if perDay < 0 {
		return nil
	}
	if perDay == 0 {
		perDay = DefaultInvitationsPerDay
	}
	return func(ctx context.Context, c capabilities.Caller) error {
		return meter.AllowClass(ctx, c, InvitationQuotaClass, int64(perDay))
	}
}
