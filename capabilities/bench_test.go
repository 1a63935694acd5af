package capabilities_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// benchRegistry has n capabilities, a third of them admin-only.
func benchRegistry(b *testing.B, n int) *capabilities.Registry {
	reg := capabilities.NewRegistry(capabilities.Options{Auditor: &capabilitiestest.Auditor{}})
	s := &spy{}
	for i := range n {
		req := capabilities.Requirement{}
		if i%3 == 0 {
			req.Role = capabilities.RoleAdmin
		}
		if err := reg.Register(s.echo(fmt.Sprintf("cap%d", i), read, req)); err != nil {
			b.Fatal(err)
		}
	}
	return reg
}

func BenchmarkInvoke(b *testing.B) {
	reg := benchRegistry(b, 200)
	user := capabilitiestest.User("u")
	args := json.RawMessage(`{"text":"hello"}`)
	ctx := context.Background()
	for b.Loop() {
		if _, err := reg.Invoke(ctx, user, "cap1", args); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVisible(b *testing.B) {
	reg := benchRegistry(b, 200)
	user := capabilitiestest.User("u")
	ctx := context.Background()
	for b.Loop() {
		if len(reg.Visible(ctx, user)) == 0 {
			b.Fatal("nothing visible")
		}
	}
}
