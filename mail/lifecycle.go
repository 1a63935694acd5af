package mail

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"gocloud.dev/gcerrors"

	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/storage"
)

// Retention windows (from the reference): messages 365 days, delivery
// events (the ledger) 90 days; a message whose blobs could not be deleted
// is tried again an hour later, without holding back the others.
const (
	MessageRetention  = 365 * 24 * time.Hour
	DeliveryRetention = 90 * 24 * time.Hour
	RetryDelay        = time.Hour
)

// Tables are the user-owned tables of mail, children first. Raw MIME and
// attachment bytes are the blobs of BlobDomain (exported in chunks, paged,
// and deleted with the account).
var Tables = []storage.Table{
	{Name: "mail_outbound_events"},
	{Name: "mail_outbound"},
	{Name: "mail_outbound_pauses"},
	{Name: "mail_attachments"},
	{Name: "mail_deliveries"},
	{Name: "mail_messages", SizeColumn: "size_bytes"},
	{Name: "mail_threads"},
	{Name: "mail_rules"},
}

// SystemTables hold the platform's system mailboxes: no user owns them,
// so accounts' export and deletion leave them alone.
var SystemTables = []string{"system_mail_attachments", "system_mail_deliveries", "system_mail_messages", "system_mail_threads"}

// RegisterInventory records the tables and blobs of mail, and declares the
// system mailbox tables platform-owned. They exist whether or not mail is
// on, so this is always called.
func RegisterInventory(inv *storage.Inventory) error {
	var errs []error
	for _, t := range Tables {
		errs = append(errs, inv.AddTable(t))
	}
	errs = append(errs, inv.AddBlobPrefix(storage.BlobPrefix{Domain: BlobDomain}))
	for _, t := range SystemTables {
		errs = append(errs, inv.DeclarePlatform(t, "the platform's system mailboxes (reserved addresses such as postmaster), read by admins; no user owns them"))
	}
	return errors.Join(errs...)
}

// Blobs is what retention needs of the blob store.
type Blobs interface {
	Delete(ctx context.Context, key string) error
}

// RetentionPolicies declares how long mail lives: messages (with their
// attachments and blobs) 365 days after they arrived, blobs deleted before
// rows; threads while they hold a message; ledger rows 90 days. The same
// holds for the system mailboxes.
func RetentionPolicies(bucket Blobs) []retention.Policy {
	out := []retention.Policy{retention.UntilAccountDeleted("mail_rules").Because("or until the user deletes the rule"),
		retention.Age("mail_outbound", "created_at", MessageRetention).Because("an outbound message's delivery record: 365 days, like the sent copy"),
		retention.Age("mail_outbound_events", "created_at", DeliveryRetention).Because("bounces and complaints are delivery events: 90 days"),
		retention.UntilAccountDeleted("mail_outbound_pauses").Because("the pause stays until an admin lifts it; the lifted row records the last lift"),
	}
	for _, sys := range []bool{false, true} {
		prefix := "mail_"
		if sys {
			prefix = "system_mail_"
		}
		out = append(out,
			retention.Custom(prefix+"messages", "a message is kept 365 days after it arrived (or until deleted); its blobs go first, and one whose blobs cannot be deleted is retried an hour later",
				func(ctx context.Context, db bun.IDB, now time.Time, limit int) (int64, error) {
					return purgeMessages(ctx, db, bucket, sys, now, limit)
				}),
			attachments(prefix),
			retention.Custom(prefix+"threads", "a thread goes with its last message",
				func(ctx context.Context, db bun.IDB, now time.Time, limit int) (int64, error) {
					res, err := db.NewRaw("DELETE FROM ? WHERE id IN (SELECT t.id FROM ? AS t WHERE NOT EXISTS (SELECT 1 FROM ? AS m WHERE m.thread_id = t.id) AND t.last_message_at < ? LIMIT ?)",
						bun.Ident(prefix+"threads"), bun.Ident(prefix+"threads"), bun.Ident(prefix+"messages"), now.Add(-time.Hour), limit).Exec(ctx)
					if err != nil {
						return 0, fmt.Errorf("mail: purge threads: %w", err)
					}
					return res.RowsAffected()
				}),
			retention.Age(prefix+"deliveries", "created_at", DeliveryRetention).Because("the delivery ledger: a retry within 90 days is recognised"),
		)
	}
	return out
}

func attachments(prefix string) retention.Policy {
	if prefix == "mail_" {
		return retention.UntilAccountDeleted(prefix + "attachments").Because("an attachment goes with its message")
	}
	return retention.Kept(prefix+"attachments", "an attachment goes with its message")
}

// purgeMessages deletes at most limit messages past MessageRetention:
// blobs first (keys derived from the owner's stable id, or the system
// mailbox, and the message's delivery key), then the row. A message whose
// blobs fail is given a retry time and skipped until then.
func purgeMessages(ctx context.Context, db bun.IDB, bucket Blobs, sys bool, now time.Time, limit int) (int64, error) {
	cutoff := now.UTC().Add(-MessageRetention)
	var rows []struct {
		ID       int64  `bun:"id"`
		ThreadID int64  `bun:"thread_id"`
		Key      string `bun:"delivery_key"`
		Owner    int64  `bun:"user_id"`
		Stable   string `bun:"stable_user_id"`
		Mailbox  string `bun:"mailbox"`
	}
	var q string
	if sys {
		q = "SELECT m.id, m.thread_id, m.delivery_key, m.mailbox FROM system_mail_messages AS m WHERE m.received_at < ? AND (m.retry_at IS NULL OR m.retry_at <= ?) ORDER BY m.received_at LIMIT ?"
	} else {
		q = "SELECT m.id, m.thread_id, m.delivery_key, m.user_id, u.stable_user_id FROM mail_messages AS m JOIN users AS u ON u.id = m.user_id WHERE m.received_at < ? AND (m.retry_at IS NULL OR m.retry_at <= ?) ORDER BY m.received_at LIMIT ?"
	}
	if err := db.NewRaw(q, cutoff, now.UTC(), limit).Scan(ctx, &rows); err != nil {
		return 0, fmt.Errorf("mail: expired messages: %w", err)
	}
	var n int64
	for _, r := range rows {
		b := userBox(storage.Owner{ID: r.Owner, StableID: r.Stable})
		if sys {
			b = systemBox(r.Mailbox)
		}
		var positions []int
		if err := db.NewRaw("SELECT position FROM ? WHERE message_id = ? AND raw_offset IS NULL", b.table("attachments"), r.ID).Scan(ctx, &positions); err != nil {
			return n, fmt.Errorf("mail: expired attachments: %w", err)
		}
		keys := []string{b.rawKey(r.Key)}
		for _, p := range positions {
			keys = append(keys, b.partKey(r.Key, p))
		}
		failed := false
		for _, k := range keys {
			if err := bucket.Delete(ctx, k); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
				failed = true
				break
			}
		}
		if failed {
			if _, err := db.NewRaw("UPDATE ? SET retry_at = ? WHERE id = ?", b.table("messages"), now.UTC().Add(RetryDelay), r.ID).Exec(ctx); err != nil {
				return n, fmt.Errorf("mail: schedule retry: %w", err)
			}
			continue
		}
		if err := deleteRow(ctx, db, b, r.ID, r.ThreadID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
