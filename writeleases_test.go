package enclave_test

import (
	"context"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The server's registry gives every call that may write a write lease on
// its account (which the account's deletion waits for), and none to a read.
func TestServerCallsHoldWriteLeases(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := extServer(t, d, enclave.Config{})
			leases := func(ctx context.Context, c capabilities.Caller) (int, error) {
				n, err := srv.Store().DB.NewSelect().Table("account_write_leases").Where("user_id = ?", c.OwnerID).Count(ctx)
				return int(n), err
			}
			probe := func(name string, ann capabilities.Annotations) capabilities.Capability {
				return capabilities.Define(capabilities.Spec[struct{}, int]{
					Name: name, Domain: "test", Description: "Counts its caller's write leases.", Annotations: &ann,
					Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (int, error) {
						if err := storage.CheckWrite(ctx); err != nil {
							return 0, err
						}
						return leases(ctx, call.Caller)
					},
				})
			}
			if err := srv.Registry().Register(probe("probeLeaseWrite", capabilities.Annotations{}), probe("probeLeaseRead", capabilities.Annotations{ReadOnly: true})); err != nil {
				t.Fatal(err)
			}
			ann, _ := user(t, srv, "ann")
			if ann.OwnerID == 0 {
				t.Fatal("the caller carries no owner id")
			}
			for name, want := range map[string]int{"probeLeaseWrite": 1, "probeLeaseRead": 0} {
				res, err := srv.Registry().Invoke(ctx, ann, name, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := res.Structured.(int); got != want {
					t.Errorf("%s saw %d write leases of its caller, want %d", name, got, want)
				}
			}
		})
	}
}
