package remotemcp_test

import (
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// deletions records the hooks a domain adds to account deletion.
type deletions struct{ hooks []lifecycle.Hook }

func (d *deletions) AddHooks(hs ...lifecycle.Hook) { d.hooks = append(d.hooks, hs...) }

// Wire adds the revocation of an account's remote servers' tokens to
// account deletion whether the feature is on or off (off, it revokes
// nothing), so a deletion runs the same hooks either way.
func TestWireAddsTheDeletionHook(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	ring, err := envelope.Open(t.Context(), s.DB, s.Keeper)
	if err != nil {
		t.Fatal(err)
	}
	alice := addUser(t, s, "alice")
	o := storage.Owner{ID: alice.OwnerID, StableID: alice.UserID}
	for _, disabled := range []bool{false, true} {
		var d deletions
		reg := capabilities.NewRegistry(capabilities.Options{Logger: quiet()})
		svc, err := remotemcp.Wire(remotemcp.Config{Store: s, Ring: ring, Owners: owners, Registry: reg, BaseURL: "https://enclave.example",
			Logger: quiet(), Options: remotemcp.Options{Timeout: 2 * time.Second, Disabled: disabled}, Deletions: &d},
			schedules.New(nil), retention.NewSet())
		if err != nil {
			t.Fatal(err)
		}
		if (svc == nil) != disabled {
			t.Fatalf("disabled %v: service %v", disabled, svc)
		}
		if len(d.hooks) != 1 || d.hooks[0].Name != "revoke remote MCP server tokens" {
			t.Fatalf("disabled %v: deletion hooks %+v", disabled, d.hooks)
		}
		if err := d.hooks[0].Run(t.Context(), o); err != nil {
			t.Fatalf("disabled %v: the hook of an account without servers: %v", disabled, err)
		}
	}
}
