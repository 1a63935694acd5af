package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// accountDelete: only through a web session, only one's own account, with
// the username and password; a deletion that failed midway is finished by
// calling it again while the account is deleting.
func TestDeleteCapability(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		reg := capabilities.NewRegistry(capabilities.Options{Logger: quiet()})
		if err := reg.Register(w.svc.DeleteCapability()); err != nil {
			t.Fatal(err)
		}
		caller := func(o storage.Owner, session bool) capabilities.Caller {
			c, err := w.acc.LoadCaller(ctx, o.StableID)
			if err != nil {
				t.Fatal(err)
			}
			c.AllScopes, c.Interactive, c.Session = true, true, session
			return c
		}
		call := func(c capabilities.Caller, confirm, password string) (lifecycle.DeletionResult, error) {
			args, _ := json.Marshal(lifecycle.DeleteInput{Confirm: confirm, Password: password})
			res, err := reg.Invoke(ctx, c, "accountDelete", args)
			if err != nil {
				return lifecycle.DeletionResult{}, err
			}
			return res.Structured.(lifecycle.DeletionResult), nil
		}
		const alicePW = "correct horse battery alice"
		// An agent never sees or calls it.
		if _, err := call(caller(w.alice, false), "alice", alicePW); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("an agent deletes the account: %v", err)
		}
		if slices.Contains(reg.VisibleNames(ctx, caller(w.alice, false)), "accountDelete") {
			t.Fatal("an agent sees accountDelete")
		}
		// Confirmation and password are checked; bob's name and password
		// do not delete bob (or alice) from alice's session.
		if _, err := call(caller(w.alice, true), "bob", alicePW); !errors.Is(err, lifecycle.ErrConfirmMismatch) {
			t.Fatalf("wrong username: %v", err)
		}
		if _, err := call(caller(w.alice, true), "alice", "correct horse battery bob"); !errors.Is(err, accounts.ErrInvalidCredentials) || capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("wrong password: %v", err)
		}
		for _, o := range []storage.Owner{w.alice, w.bob} {
			if u, err := w.acc.Identity.UserByID(ctx, o.ID); err != nil || u.DeletingAt != nil {
				t.Fatalf("after refused attempts %s is %+v, %v", o.StableID, u, err)
			}
		}
		// A failure midway leaves the account deleting; calling again
		// (as the deleting account) finishes it.
		w.faulty.failDeletes.Store(true)
		if _, err := call(caller(w.alice, true), "alice", alicePW); err == nil || capabilities.CodeOf(err) != capabilities.CodeInternal {
			t.Fatalf("deletion with failing storage: %v", err)
		}
		w.faulty.failDeletes.Store(false)
		deleting := caller(w.alice, true)
		if deleting.State != capabilities.AccountDeleting {
			t.Fatalf("state after the failure: %v", deleting.State)
		}
		res, err := call(deleting, " alice ", alicePW)
		if err != nil || !res.Completed || res.Deleted["sql:notes"] != 30 {
			t.Fatalf("finishing the deletion: %+v %v", res, err)
		}
		if _, err := w.acc.Identity.UserByID(ctx, w.bob.ID); err != nil {
			t.Fatalf("bob is gone: %v", err)
		}
	})
}
