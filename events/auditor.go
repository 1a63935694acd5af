package events

import (
	"context"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/internal/clientnet"
)

// BurstAuditor passes each denial at the choke point to Next (the audit
// log) and counts it for the denial-burst alert, per user and per client
// network (clientnet.Addr of the call's context).
type BurstAuditor struct {
	Next capabilities.Auditor
	// Bursts returns the publisher counting denials (nil: none yet; the
	// registry is built before the bus the publisher publishes on).
	Bursts func() *BurstPublisher
}

// RecordDenial implements capabilities.Auditor.
func (a BurstAuditor) RecordDenial(ctx context.Context, d capabilities.Denial) {
	a.Next.RecordDenial(ctx, d)
	if b := a.Bursts(); b != nil {
		at := d.At
		if at.IsZero() {
			at = time.Now()
		}
		b.Observe(ctx, at, d.UserID, clientnet.Addr(ctx))
	}
}
