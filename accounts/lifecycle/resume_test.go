package lifecycle_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A deletion that a store failure (or a crash) interrupted is finished by
// ResumeDeletions once its grace period has passed, without anyone asking
// again; accounts that are not being deleted are left alone.
func TestResumeDeletions(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		w.faulty.failDeletes.Store(true)
		if _, err := w.svc.Delete(ctx, w.alice); err == nil {
			t.Fatal("deletion with failing blob storage succeeded")
		}
		w.faulty.failDeletes.Store(false)

		// Within the grace period, a deletion may still be running: left alone.
		if n, err := w.svc.ResumeDeletions(ctx, time.Hour); err != nil || n != 0 {
			t.Fatalf("resume within the grace period: %d, %v", n, err)
		}
		if _, err := w.acc.Identity.UserByID(ctx, w.alice.ID); err != nil {
			t.Fatalf("alice gone within the grace period: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
		n, err := w.svc.ResumeDeletions(ctx, time.Millisecond)
		if err != nil || n != 1 {
			t.Fatalf("resume: %d, %v", n, err)
		}
		if _, err := w.acc.Identity.UserByID(ctx, w.alice.ID); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("alice after the resumed deletion: %v", err)
		}
		if keys, _ := storage.ListBlobs(ctx, s.Bucket, w.alice, storage.BlobPrefix{Domain: "notes"}); len(keys) != 0 {
			t.Fatalf("alice's blobs left: %v", keys)
		}
		if u, err := w.acc.Identity.UserByID(ctx, w.bob.ID); err != nil || u.DeletingAt != nil {
			t.Fatalf("bob after the pass: %+v, %v", u, err)
		}
		if n, err := w.svc.ResumeDeletions(ctx, 0); err != nil || n != 0 {
			t.Fatalf("second pass: %d, %v", n, err)
		}
	})
}

// Suspension freezes an interrupted deletion: the account may not finish
// its own deletion (the web pages refuse a suspended account), and the
// deletion-resume lane must not finish it on its behalf either. Once the
// suspension is lifted, the lane finishes it.
func TestResumeDeletionsLeavesSuspendedAccounts(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		w.faulty.failDeletes.Store(true)
		if _, err := w.svc.Delete(ctx, w.alice); err == nil {
			t.Fatal("deletion with failing blob storage succeeded")
		}
		w.faulty.failDeletes.Store(false)
		if _, err := w.acc.Lifecycle.Suspend(ctx, w.alice.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		if n, err := w.svc.ResumeDeletions(ctx, time.Millisecond); err != nil || n != 0 {
			t.Fatalf("resume with the account suspended: %d, %v", n, err)
		}
		if _, err := w.acc.Identity.UserByID(ctx, w.alice.ID); err != nil {
			t.Fatalf("the suspended account was deleted by the lane: %v", err)
		}
		if keys, _ := storage.ListBlobs(ctx, s.Bucket, w.alice, storage.BlobPrefix{Domain: "notes"}); len(keys) == 0 {
			t.Fatal("the suspended account's blobs were deleted by the lane")
		}
		if _, err := w.acc.Lifecycle.Unsuspend(ctx, w.alice.ID); err != nil {
			t.Fatal(err)
		}
		if n, err := w.svc.ResumeDeletions(ctx, time.Millisecond); err != nil || n != 1 {
			t.Fatalf("resume after the suspension was lifted: %d, %v", n, err)
		}
		if _, err := w.acc.Identity.UserByID(ctx, w.alice.ID); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("alice after the resumed deletion: %v", err)
		}
	})
}

// One deletion that keeps failing (the oldest, so first in line) does not
// stop the lane from finishing the others: the pass goes on and reports
// the failure.
func TestResumeDeletionsGoesPastAFailingAccount(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		stuck := errors.New("alice's grants cannot be revoked")
		svc := lifecycle.New(s, w.inv, w.acc, lifecycle.Options{Logger: quiet(), Hooks: []lifecycle.Hook{{
			Name: "oauth", Run: func(_ context.Context, o storage.Owner) error {
				if o.ID == w.alice.ID {
					return stuck
				}
				return nil
			},
		}}})
		if _, err := svc.Delete(ctx, w.alice); !errors.Is(err, stuck) {
			t.Fatalf("alice's deletion: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
		if _, err := w.acc.Lifecycle.MarkDeleting(ctx, w.bob.ID); err != nil { // bob's deletion was cut short after its mark
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		n, err := svc.ResumeDeletions(ctx, time.Millisecond)
		if n != 1 || !errors.Is(err, stuck) {
			t.Fatalf("resume: %d, %v", n, err)
		}
		if _, err := w.acc.Identity.UserByID(ctx, w.bob.ID); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("bob's deletion waits behind alice's: %v", err)
		}
		if _, err := w.acc.Identity.UserByID(ctx, w.alice.ID); err != nil {
			t.Fatalf("alice: %v", err)
		}
	})
}

// The lane and the account holder's own retry may finish the same
// deletion at once: both succeed or step aside, and the account is gone.
func TestResumeDeletionsConcurrentWithRetry(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		w.faulty.failDeletes.Store(true)
		if _, err := w.svc.Delete(ctx, w.alice); err == nil {
			t.Fatal("deletion with failing blob storage succeeded")
		}
		w.faulty.failDeletes.Store(false)
		time.Sleep(5 * time.Millisecond)
		// The fixture's hook and custom surface are not safe for
		// concurrent use: the same tables and blobs without them.
		inv := storage.NewInventory()
		if err := errors.Join(lifecycle.RegisterInventory(inv), secrets.RegisterInventory(inv),
			inv.AddTable(storage.Table{Name: "notes"}), inv.AddBlobPrefix(storage.BlobPrefix{Domain: "notes"})); err != nil {
			t.Fatal(err)
		}
		svc := lifecycle.New(s, inv, w.acc, lifecycle.Options{Logger: quiet()})
		var wg sync.WaitGroup
		var laneErr, retryErr error
		wg.Add(2)
		go func() { defer wg.Done(); _, laneErr = svc.ResumeDeletions(ctx, time.Millisecond) }()
		go func() { defer wg.Done(); _, retryErr = svc.Delete(ctx, w.alice) }()
		wg.Wait()
		if laneErr != nil {
			t.Errorf("lane: %v", laneErr)
		}
		if retryErr != nil && !errors.Is(retryErr, accounts.ErrNotFound) {
			t.Errorf("retry: %v", retryErr)
		}
		if _, err := w.acc.Identity.UserByID(ctx, w.alice.ID); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("alice after both: %v", err)
		}
		if _, err := w.acc.Identity.UserByID(ctx, w.bob.ID); err != nil {
			t.Fatalf("bob: %v", err)
		}
	})
}

// The lane respects the last-active-admin rule: an admin whose deletion
// was interrupted no longer counts as an active admin, so the other admin
// can be neither suspended nor demoted meanwhile, and the lane finishing
// the deletion leaves that other admin in place.
func TestResumeDeletionsKeepsAnActiveAdmin(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		for _, o := range []storage.Owner{w.alice, w.bob} {
			if _, err := w.acc.Roles.GrantAdminAsOperator(ctx, o.ID); err != nil {
				t.Fatal(err)
			}
		}
		w.faulty.failDeletes.Store(true)
		if _, err := w.svc.Delete(ctx, w.alice); err == nil {
			t.Fatal("deletion with failing blob storage succeeded")
		}
		w.faulty.failDeletes.Store(false)
		if _, err := w.acc.Lifecycle.Suspend(ctx, w.bob.ID); !errors.Is(err, accounts.ErrLastAdmin) {
			t.Fatalf("suspending the only admin not being deleted: %v", err)
		}
		if _, err := w.acc.Roles.RevokeAdminAsOperator(ctx, w.bob.ID); !errors.Is(err, accounts.ErrLastAdmin) {
			t.Fatalf("demoting the only admin not being deleted: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
		if n, err := w.svc.ResumeDeletions(ctx, time.Millisecond); err != nil || n != 1 {
			t.Fatalf("resume: %d, %v", n, err)
		}
		g, err := w.acc.Roles.RolesAndPermissions(ctx, w.bob.ID)
		if err != nil || !g.HasRole(capabilities.RoleAdmin) {
			t.Fatalf("bob's roles after the pass: %v, %v", g.Roles, err)
		}
	})
}
