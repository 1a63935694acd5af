package mail

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/uptrace/bun"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// Delivery errors. ErrNotOurs and ErrTooLarge are permanent (SMTP 5xx),
// ErrOverQuota temporary (4xx: the sender retries tomorrow).
var (
	ErrTooLarge  = errors.New("mail: message too large")
	ErrOverQuota = errors.New("mail: the mailbox has received its daily limit of messages")
)

// Delivery is one inbound message for one recipient.
type Delivery struct {
	// Recipient is the envelope recipient (RCPT TO), without brackets.
	Recipient string
	// Raw is the message as received.
	Raw []byte
	// ProviderID, when the transport has one, identifies the delivery: a
	// retry carrying the same id is stored once. Without it the delivery
	// id is the Message-ID and the recipient (or, for a message without a
	// Message-ID, a digest of its bytes and the recipient).
	ProviderID string
	// AuthResults records the sender checks made (SPF, DKIM, DMARC).
	AuthResults string
	// Quarantine stores the message in the quarantine folder.
	Quarantine bool

	// parsed and checked, when set, are Raw already parsed and
	// authenticated: the SMTP listener does both once per transaction,
	// not once per recipient.
	parsed  *Parsed
	checked *authOutcome
	// rcpt, when set, is Recipient as the listener resolved it at RCPT
	// (the transaction still checks that the account is live).
	rcpt *target
}

// authOutcome is what Options.Authenticate answered.
type authOutcome struct {
	results string
	fail    bool
}

func (s *Service) authenticate(ctx context.Context, in AuthInput) authOutcome {
	if s.opts.Authenticate == nil {
		return authOutcome{results: "none"}
	}
	r, fail := s.opts.Authenticate(ctx, in)
	return authOutcome{results: r, fail: fail}
}

// Delivered is the outcome of Deliver.
type Delivered struct {
	// MessageID is the stored message's id (msg_…).
	MessageID string
	// Duplicate is set when the delivery had been stored before: nothing
	// was stored or counted this time.
	Duplicate bool
	// System is set for a system mailbox.
	System bool
}

// target is a resolved recipient: its mailbox and address.
type target struct {
	box     box
	rcpt    Recipient
	address string
}

// Resolve checks that addr is a mailbox of this server (RCPT TO): a live
// user's address or a reserved local part. It returns ErrNotOurs
// otherwise.
func (s *Service) Resolve(ctx context.Context, addr string) error {
	_, err := s.resolve(ctx, addr)
	return err
}

func (s *Service) resolve(ctx context.Context, addr string) (target, error) {
	rcpt, err := ParseRecipient(addr, s.opts.Domain, s.opts.Reserved)
	if err != nil {
		return target{}, err
	}
	t := target{rcpt: rcpt, address: rcpt.Address(s.opts.Domain)}
	if rcpt.Local == BounceLocal && !rcpt.System {
		// The report addresses are the server's: a report never lands in
		// a mailbox (not even of an account named after them), and one
		// whose token names no message is refused like an unknown user.
		return target{}, ErrNotOurs
	}
	if rcpt.System {
		t.box = systemBox(rcpt.Local)
		return t, nil
	}
	u, ok, err := s.lookupUser(ctx, rcpt.Local)
	if err != nil {
		return target{}, err
	}
	if !ok {
		return target{}, ErrNotOurs
	}
	t.box = userBox(storage.Owner{ID: u.ID, StableID: u.StableID})
	return t, nil
}

// deliveryID is the idempotency key of a delivery to t.
func deliveryID(d Delivery, p Parsed, t target) string {
	switch {
	case d.ProviderID != "":
		return "provider:" + d.ProviderID
	case p.MessageID != "":
		return "msgid:" + strings.ToLower(p.MessageID) + " " + t.address
	default:
		sum := sha256.Sum256(d.Raw)
		return "raw:" + hex.EncodeToString(sum[:]) + " " + t.address
	}
}

// Deliver stores an inbound message durably and once: the raw MIME goes to
// a blob first (under a key derived from the delivery id and the bytes;
// the attachments are byte ranges of it), then the ledger row, the thread,
// the message and its attachments in one transaction. A delivery whose id
// the ledger already holds is reported as a duplicate and neither stored
// nor counted against the receive quota again.
func (s *Service) Deliver(ctx context.Context, d Delivery) (Delivered, error) {
	if int64(len(d.Raw)) > s.opts.MaxMessageBytes {
		return Delivered{}, ErrTooLarge
	}
	var t target
	var err error
	if d.rcpt != nil {
		t = *d.rcpt
	} else if t, err = s.resolve(ctx, d.Recipient); err != nil {
		return Delivered{}, err
	}
	var p Parsed
	if d.parsed != nil {
		p = *d.parsed
	} else if p, err = Parse(d.Raw); err != nil {
		return Delivered{}, err
	}
	id := deliveryID(d, p, t)
	b := t.box
	out := Delivered{System: t.rcpt.System}
	if pub, ok, err := s.delivered(ctx, s.store.Reader, b, id); err != nil {
		return Delivered{}, err
	} else if ok {
		out.MessageID, out.Duplicate = pub, true
		return out, nil
	}
	if !t.rcpt.System && s.meter != nil && s.opts.ReceivesPerDay > 0 {
		err := s.meter.AllowClass(ctx, capabilities.Caller{UserID: b.owner.StableID}, ReceiveClass, s.opts.ReceivesPerDay)
		if err != nil {
			return Delivered{}, fmt.Errorf("%w: %v", ErrOverQuota, err)
		}
	}
	// The blob keys derive from the delivery id and the bytes: deliveries
	// racing with the same id but other bytes (a sender who knows a
	// Message-ID about to arrive) write keys of their own, so the loser
	// can never overwrite the winner's raw MIME or attachments.
	sum := sha256.Sum256(d.Raw)
	key := deliveryKey(id + "\n" + hex.EncodeToString(sum[:]))
	if err := s.writeBlob(ctx, b.rawKey(key), d.Raw); err != nil {
		return Delivered{}, fmt.Errorf("mail: store raw message: %w", err)
	}
	// Attachments are byte ranges of the raw blob; only a part whose body
	// the parser could not find verbatim in the message gets a blob.
	for n, part := range p.Parts {
		if part.RawOffset >= 0 {
			continue
		}
		if err := s.writeBlob(ctx, b.partKey(key, n), part.Data); err != nil {
			return Delivered{}, fmt.Errorf("mail: store attachment: %w", err)
		}
	}
	folder := FolderInbox
	if d.Quarantine {
		folder = FolderQuarantine
	}
	// A message whose DKIM signatures all fail is quarantined, whatever
	// the rules say (an allow rule trusts a sender, not a forgery).
	checked := d.checked
	if checked == nil {
		a := s.authenticate(ctx, AuthInput{Raw: d.Raw})
		checked = &a
	}
	authResults, dkimFailed := checked.results, checked.fail
	if d.AuthResults != "" {
		authResults = d.AuthResults + "; " + authResults
	}
	if !t.rcpt.System {
		switch rule, err := s.ruleFor(ctx, b.owner, p.FromAddress); {
		case err != nil:
			return Delivered{}, err
		case rule == RuleBlock:
			folder = FolderQuarantine
		case rule == RuleAllow && !d.Quarantine:
			folder = FolderInbox
		}
	}
	if dkimFailed {
		folder = FolderQuarantine
	}
	now := s.now().UTC()
	// On SQLite (one writer) concurrent deliveries share one transaction
	// (a group commit), each in a savepoint of its own; Deliver returns
	// after that commit. PostgreSQL runs them in parallel transactions
	// (and groups their WAL flushes itself).
	inTx := s.store.RunInTx
	if s.store.Dialect() == storage.SQLite {
		inTx = s.group.run
	}
	err = inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if !t.rcpt.System {
			// The account may have been suspended or marked for deletion
			// since RCPT: its deletion would not see this message.
			var live int
			if err := tx.NewRaw("SELECT count(*) FROM users WHERE id = ? AND deleting_at IS NULL AND suspended_at IS NULL", b.owner.ID).Scan(ctx, &live); err != nil {
				return fmt.Errorf("mail: look up recipient: %w", err)
			}
			if live == 0 {
				return ErrNotOurs
			}
		}
		res, err := tx.NewRaw("INSERT INTO ? (?, delivery_id, event, created_at) VALUES (?, ?, 'received', ?) ON CONFLICT DO NOTHING",
			b.table("deliveries"), b.owned(), b.val, id, now).Exec(ctx)
		if err != nil {
			return fmt.Errorf("mail: record delivery: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			pub, _, err := s.delivered(ctx, tx, b, id)
			out.MessageID, out.Duplicate = pub, true
			return err
		}
		threadID, created, err := s.threadFor(ctx, tx, b, p, now)
		if err != nil {
			return err
		}
		headers, _ := json.Marshal(p.Headers)
		if p.Headers == nil {
			headers = []byte("[]")
		}
		var sent any
		if !p.Date.IsZero() {
			sent = p.Date
		}
		out.MessageID = newID("msg_")
		// The bodies and headers (up to hundreds of KB) are bound as
		// parameters: formatted into the statement, as bun does with its
		// arguments, the database would parse them as SQL literals on
		// every delivery. The other values, dates included, are
		// formatted by bun as everywhere else.
		bodies := bindPlaceholders(s.store.Dialect(), 3)
		q := tx.NewRaw(`INSERT INTO ? (public_id, ?, thread_id, folder, delivery_key, message_id, in_reply_to, refs, from_addr,
				to_addrs, cc_addrs, rcpt, subject, text_body, html_body, headers, auth_results, size_bytes, sent_at, received_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			b.table("messages"), b.owned(), out.MessageID, b.val, threadID, folder, key, p.MessageID, p.InReplyTo,
			strings.Join(p.References, " "), p.From, strings.Join(p.To, ", "), strings.Join(p.Cc, ", "), t.address,
			p.Subject, bodies[0], bodies[1], bodies[2], headerText(authResults), len(d.Raw), sent, now).String()
		var msgID int64
		err = tx.Tx.QueryRowContext(ctx, q, p.Text, p.HTML, string(headers)).Scan(&msgID)
		if err != nil {
			return fmt.Errorf("mail: store message: %w", err)
		}
		for n, part := range p.Parts {
			var off, length, enc any // NULL: the part has a blob of its own
			if part.RawOffset >= 0 {
				off, length, enc = part.RawOffset, part.RawLength, part.Encoding+part.layout
			}
			if _, err := tx.NewRaw(`INSERT INTO ? (public_id, ?, message_id, position, filename, content_type, size_bytes, raw_offset, raw_length, transfer_encoding)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				b.table("attachments"), b.owned(), newID("att_"), b.val, msgID, n, part.Filename, part.ContentType, len(part.Data), off, length, enc).Exec(ctx); err != nil {
				return fmt.Errorf("mail: store attachment: %w", err)
			}
		}
		if !created { // a new thread was made counting this message
			if _, err := tx.NewRaw("UPDATE ? SET message_count = message_count + 1, last_message_at = ? WHERE id = ?",
				b.table("threads"), now, threadID).Exec(ctx); err != nil {
				return fmt.Errorf("mail: update thread: %w", err)
			}
		}
		if _, err := tx.NewRaw("UPDATE ? SET message_id = ? WHERE ? = ? AND delivery_id = ?",
			b.table("deliveries"), msgID, b.owned(), b.val, id).Exec(ctx); err != nil {
			return fmt.Errorf("mail: record delivery: %w", err)
		}
		return nil
	})
	if errors.Is(err, ErrNotOurs) {
		s.dropLoserBlobs(ctx, b, key, p.Parts)
	}
	if err != nil {
		return Delivered{}, err
	}
	if out.Duplicate {
		s.dropLoserBlobs(ctx, b, key, p.Parts)
	}
	return out, nil
}

// writeBlob writes a message's blob. Unlike Bucket.WriteAll it passes no
// Content-MD5: WriteAll hashes the bytes twice (once to send the sum, once
// to check what it wrote against it), the file driver a third time for its
// attributes; the bytes are in memory, and the transport (TLS) and the
// providers' own checksums guard them on the way.
//
// A failed Write abandons the object (its context is cancelled before
// Close): closed normally, drivers such as the file driver commit what was
// written, and a retry racing the stored delivery writes the very keys of
// the stored message, whose raw MIME or attachment would be left cut.
func (s *Service) writeBlob(ctx context.Context, key string, data []byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.store.Bucket.NewWriter(ctx, key, &blob.WriterOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		cancel()
		_ = w.Close()
		return err
	}
	return w.Close()
}

// bindPlaceholders returns n driver placeholders for dialect, to be
// formatted into a statement by bun (as bun.Safe) and bound by the driver
// after the statement's other values: ?1… on SQLite (numbered, so their
// position is explicit), $1… on PostgreSQL.
func bindPlaceholders(d storage.Dialect, n int) []bun.Safe {
	out := make([]bun.Safe, n)
	for i := range out {
		if d == storage.Postgres {
			out[i] = bun.Safe(fmt.Sprintf("$%d", i+1))
		} else {
			out[i] = bun.Safe(fmt.Sprintf("?%d", i+1))
		}
	}
	return out
}

// dropLoserBlobs removes the blobs a delivery that lost a race wrote,
// unless a stored message uses them (an identical retry writes the very
// keys of the stored message).
func (s *Service) dropLoserBlobs(ctx context.Context, b box, key string, parts []Part) {
	var n int
	err := s.store.DB.NewRaw("SELECT count(*) FROM ? WHERE ? = ? AND delivery_key = ?", b.table("messages"), b.owned(), b.val, key).Scan(ctx, &n)
	if err != nil || n > 0 {
		return
	}
	keys := []string{b.rawKey(key)}
	for i, p := range parts {
		if p.RawOffset < 0 {
			keys = append(keys, b.partKey(key, i))
		}
	}
	for _, k := range keys {
		if err := s.store.Bucket.Delete(ctx, k); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			s.log.Warn("mail: removing a duplicate delivery's blob failed", "err", err)
		}
	}
}

// delivered looks a delivery id up in the ledger.
func (s *Service) delivered(ctx context.Context, db bun.IDB, b box, id string) (string, bool, error) {
	var pub sql.NullString
	err := db.NewRaw("SELECT m.public_id FROM ? AS d LEFT JOIN ? AS m ON m.id = d.message_id WHERE d.? = ? AND d.delivery_id = ?",
		b.table("deliveries"), b.table("messages"), b.owned(), b.val, id).Scan(ctx, &pub)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("mail: read delivery ledger: %w", err)
	}
	return pub.String, true, nil
}

// threadFor returns the thread a message belongs to: that of the newest
// message of the same mailbox it replies to or references, else a new one
// (created is then set: the new thread already counts the message).
func (s *Service) threadFor(ctx context.Context, tx bun.Tx, b box, p Parsed, now any) (id int64, created bool, err error) {
	refs := make([]string, 0, len(p.References)+1)
	if p.InReplyTo != "" {
		refs = append(refs, p.InReplyTo)
	}
	refs = append(refs, p.References...)
	if len(refs) > 0 {
		err := tx.NewRaw("SELECT thread_id FROM ? WHERE ? = ? AND message_id IN (?) ORDER BY id DESC LIMIT 1",
			b.table("messages"), b.owned(), b.val, bun.In(refs)).Scan(ctx, &id)
		if err == nil {
			return id, false, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, false, fmt.Errorf("mail: find thread: %w", err)
		}
	}
	err = tx.NewRaw("INSERT INTO ? (public_id, ?, subject, message_count, last_message_at, created_at) VALUES (?, ?, ?, 1, ?, ?) RETURNING id",
		b.table("threads"), b.owned(), newID("thr_"), b.val, p.Subject, now, now).Scan(ctx, &id)
	if err != nil {
		return 0, false, fmt.Errorf("mail: new thread: %w", err)
	}
	return id, true, nil
}
