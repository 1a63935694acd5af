package accounts_test

import (
	"context"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// An account suspended while its deletion is pending (either order) is a
// suspended caller: suspension wins over deletion, as it does for the
// session cookie, so not even the reads a deleting account keeps run for
// it (a workspace key, a background job, a session Authenticate answers
// with ErrSuspended). A deleting caller would be let through to them.
func TestSuspensionWinsOverDeletionInTheCaller(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		reg := capabilities.NewRegistry(capabilities.Options{Logger: quietLogger()})
		read := capabilities.Define(capabilities.Spec[struct{}, struct{}]{
			Name: "readOwn", Domain: "test", Description: "reads the caller's own data",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.ReadUserOwn}},
			Handler:     func(context.Context, *capabilities.Call, struct{}) (struct{}, error) { return struct{}{}, nil },
		})
		if err := reg.Register(read); err != nil {
			t.Fatal(err)
		}
		for _, order := range []string{"suspended then deleting", "deleting then suspended"} {
			t.Run(order, func(t *testing.T) {
				u := signup(t, svc, map[string]string{"suspended then deleting": "sdel", "deleting then suspended": "dsus"}[order])
				steps := []func(context.Context, int64) (bool, error){svc.Lifecycle.Suspend, svc.Lifecycle.MarkDeleting}
				if order == "deleting then suspended" {
					steps[0], steps[1] = steps[1], steps[0]
				}
				for _, step := range steps {
					if _, err := step(ctx, u.ID); err != nil {
						t.Fatal(err)
					}
				}
				c, err := svc.LoadCaller(ctx, u.StableID)
				if err != nil {
					t.Fatal(err)
				}
				if c.State != capabilities.AccountSuspended {
					t.Fatalf("caller state %v, want suspended", c.State)
				}
				cur, err := svc.Identity.UserByID(ctx, u.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got := accounts.CallerFor(cur, accounts.Grants{}).State; got != capabilities.AccountSuspended {
					t.Fatalf("CallerFor state %v, want suspended", got)
				}
				c.AllScopes, c.Interactive, c.Session = true, true, true
				_, err = reg.Invoke(ctx, c, "readOwn", []byte(`{}`))
				if capabilities.CodeOf(err) != capabilities.CodeAccountSuspended {
					t.Fatalf("a read as the suspended, deleting account: %v, want account_suspended", err)
				}
			})
		}
	})
}
