package audit_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// BenchmarkRecordDenial is one audit write: a denial at the choke point,
// inserted into audit_events.
func BenchmarkRecordDenial(b *testing.B) {
	for _, d := range storagetest.Dialects() {
		b.Run(string(d), func(b *testing.B) {
			st := storagetest.Open(b, d)
			l := audit.New(st, []byte("0123456789abcdef0123456789abcdef"), slog.New(slog.NewTextHandler(io.Discard, nil)))
			ctx := context.Background()
			den := capabilities.Denial{
				At: time.Now(), Subject: l.HashUser("0f1e2d3c4b5a6978"), Surface: "tool", Name: "adminAuditLogQuery",
				Reason: capabilities.ReasonRole,
			}
			b.ReportAllocs()
			for b.Loop() {
				l.RecordDenial(ctx, den)
			}
		})
	}
}
