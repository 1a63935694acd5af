package lifecycle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
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
		if _, err := w.acc.UserByID(ctx, w.alice.ID); err != nil {
			t.Fatalf("alice gone within the grace period: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
		n, err := w.svc.ResumeDeletions(ctx, time.Millisecond)
		if err != nil || n != 1 {
			t.Fatalf("resume: %d, %v", n, err)
		}
		if _, err := w.acc.UserByID(ctx, w.alice.ID); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("alice after the resumed deletion: %v", err)
		}
		if keys, _ := storage.ListBlobs(ctx, s.Bucket, w.alice, storage.BlobPrefix{Domain: "notes"}); len(keys) != 0 {
			t.Fatalf("alice's blobs left: %v", keys)
		}
		if u, err := w.acc.UserByID(ctx, w.bob.ID); err != nil || u.DeletingAt != nil {
			t.Fatalf("bob after the pass: %+v, %v", u, err)
		}
		if n, err := w.svc.ResumeDeletions(ctx, 0); err != nil || n != 0 {
			t.Fatalf("second pass: %d, %v", n, err)
		}
	})
}
