package e2e

import (
	"context"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

type leaseCount struct {
	N int `json:"n"`
}

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
				return capabilities.Define(capabilities.Spec[struct{}, leaseCount]{
					Name: name, Domain: "test", Description: "Counts its caller's write leases.", Annotations: &ann,
					Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (leaseCount, error) {
						if err := storage.CheckWrite(ctx); err != nil {
							return leaseCount{}, err
						}
						n, err := leases(ctx, call.Caller)
						return leaseCount{N: n}, err
					},
				})
			}
			if err := srv.Registry().Register(probe("probeLeaseWrite", capabilities.Annotations{}), probe("probeLeaseRead", capabilities.Annotations{ReadOnly: true})); err != nil {
				t.Fatal(err)
			}
			// Each its own account: a lease stays a moment after its call.
			ann, _ := user(t, srv, "ann")
			bea, _ := user(t, srv, "bea")
			if ann.OwnerID == 0 || bea.OwnerID == 0 {
				t.Fatal("the caller carries no owner id")
			}
			for _, c := range []struct {
				caller capabilities.Caller
				name   string
				want   int
			}{{ann, "probeLeaseWrite", 1}, {bea, "probeLeaseRead", 0}} {
				res, err := srv.Registry().Invoke(ctx, c.caller, c.name, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := res.Structured.(leaseCount).N; got != c.want {
					t.Errorf("%s saw %d write leases of its caller, want %d", c.name, got, c.want)
				}
			}
		})
	}
}
