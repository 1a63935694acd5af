package mail_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// failing deletes nothing whose key contains fail.
type failing struct {
	s    *storage.Store
	fail string
}

func (f failing) Delete(ctx context.Context, key string) error {
	if f.fail != "" && strings.Contains(key, f.fail) {
		return errors.New("blob store down")
	}
	return f.s.Bucket.Delete(ctx, key)
}

func policy(t *testing.T, ps []retention.Policy, table string) retention.Policy {
	for _, p := range ps {
		if p.Table == table {
			return p
		}
	}
	t.Fatalf("no policy for %s", table)
	return retention.Policy{}
}

func count(t *testing.T, s *storage.Store, table string) int {
	t.Helper()
	n, err := s.DB.NewSelect().TableExpr(table).Count(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// Messages older than 365 days go, blobs first; a message whose blobs
// cannot be deleted stays, is retried an hour later, and does not hold
// back the others. Delivery events go after 90 days.
func TestMailRetention(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		clock := time.Now().UTC().Add(-400 * 24 * time.Hour)
		e := newEnv(t, s, mail.Config{Now: func() time.Time { return clock }})
		alice := e.user("alice")
		for i := range 3 {
			if _, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: message(fmt.Sprintf("old%d@x.test", i), "old", "", "old", []byte("attached"))}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "postmaster@" + domain, Raw: message("oldsys@x.test", "old", "", "old", nil)}); err != nil {
			t.Fatal(err)
		}
		clock = time.Now().UTC()
		fresh, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: message("new@x.test", "new", "", "new", []byte("new"))})
		if err != nil {
			t.Fatal(err)
		}
		// The oldest message's blobs fail (its raw key holds its digest:
		// fail the first one listed).
		var keys []string
		if err := s.DB.NewRaw("SELECT delivery_key FROM mail_messages ORDER BY received_at, id").Scan(t.Context(), &keys); err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC()
		purge := func(b mail.Blobs, table string, at time.Time) int64 {
			t.Helper()
			p := policy(t, mail.RetentionPolicies(b), table)
			purge := p.Purge
			if purge == nil {
				purge = func(ctx context.Context, db bun.IDB, now time.Time, limit int) (int64, error) {
					return retention.PurgeAge(ctx, db, p, now, limit)
				}
			}
			n, err := purge(t.Context(), s.DB, at, 100)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		blobsBefore := blobCount(t, s)
		if n := purge(failing{s, keys[0]}, "mail_messages", now); n != 2 {
			t.Errorf("purged %d, want 2 (the failing one stays)", n)
		}
		// One blob a message: the raw MIME holds the attachment.
		if got := blobCount(t, s); got != blobsBefore-2 {
			t.Errorf("blobs %d → %d, want 2 fewer", blobsBefore, got)
		}
		if n := purge(failing{s, ""}, "mail_messages", now.Add(time.Minute)); n != 0 {
			t.Errorf("purged %d before the retry time", n)
		}
		if n := purge(failing{s, ""}, "mail_messages", now.Add(2*time.Hour)); n != 1 {
			t.Errorf("retry purged %d, want 1", n)
		}
		if n := purge(failing{s, ""}, "system_mail_messages", now); n != 1 {
			t.Errorf("system purge %d, want 1", n)
		}
		l := must[mail.ListOutput](e, alice, "mailList", map[string]any{})
		if len(l.Messages) != 1 || l.Messages[0].ID != fresh.MessageID {
			t.Errorf("after retention: %+v", l)
		}
		if got := blobCount(t, s); got != 1 {
			t.Errorf("%d blobs left, want the fresh message's 1", got)
		}
		// A thread goes with its last message; the lane finds no orphan.
		if n := purge(failing{s, ""}, "mail_threads", now); n != 0 || count(t, s, "mail_threads") != 1 {
			t.Errorf("%d orphan threads purged, %d left; want 0 and 1", n, count(t, s, "mail_threads"))
		}
		if n := purge(failing{s, ""}, "mail_deliveries", now); n != 3 {
			t.Errorf("%d ledger rows purged, want 3", n)
		}
	})
}

// Account deletion through the inventory removes every row and blob of
// the user's mail and leaves other users' and the system mailboxes'.
func TestMailAccountDeletion(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice, bob := e.user("alice"), e.user("bob")
		for _, rcpt := range []string{"alice", "bob", "abuse"} {
			if _, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: rcpt + "@" + domain, Raw: message(rcpt+"@x.test", "hi", "", "hi", []byte("a"))}); err != nil {
				t.Fatal(err)
			}
		}
		inv := storage.NewInventory()
		if err := mail.RegisterInventory(inv); err != nil {
			t.Fatal(err)
		}
		o := storage.Owner{ID: alice.OwnerID, StableID: alice.UserID}
		for _, p := range inv.BlobPrefixes() {
			if _, err := storage.DeleteBlobs(t.Context(), s.Bucket, o, p); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.RunInTx(t.Context(), func(ctx context.Context, tx bun.Tx) error {
			_, err := inv.DeleteRows(ctx, tx, o)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{"mail_messages", "mail_threads", "mail_attachments", "mail_deliveries"} {
			n, err := s.DB.NewSelect().TableExpr(table).Where("user_id = ?", alice.OwnerID).Count(t.Context())
			if err != nil || n != 0 {
				t.Errorf("%s: %d rows of alice left (%v)", table, n, err)
			}
		}
		if l := must[mail.ListOutput](e, bob, "mailList", map[string]any{}); len(l.Messages) != 1 {
			t.Errorf("bob's mail: %+v", l)
		}
		if count(t, s, "system_mail_messages") != 1 {
			t.Error("system mail touched by an account's deletion")
		}
		// alice's blob is gone; bob's and abuse@'s stay (one each: the
		// attachment is a range of the raw MIME).
		if got := blobCount(t, s); got != 2 {
			t.Errorf("%d blobs left, want 2", got)
		}
	})
}
