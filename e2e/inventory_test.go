package e2e

import (
	"context"
	"testing"

	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The guardrail: with every migration applied, every table that has an
// owner column (user_id or *_user_id) is in the ownership inventory or
// declared platform-owned, and every registration names a real table and
// real columns. A new user-owned table without a registration fails here.
func TestInventoryCoversTheSchema(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			srv := newServer(t, d)
			if err := srv.Inventory().Check(context.Background(), srv.Store().DB); err != nil {
				t.Fatal(err)
			}
		})
	}
}
