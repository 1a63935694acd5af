package mail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/uptrace/bun"
)

// TransactionalTopic is the outbox topic of transactional mail (the value
// is kept from when the sender lived in package web: rows queued by an
// older binary are still delivered).
const TransactionalTopic = "mail"

// TransactionalConfig configures a Transactional sender.
type TransactionalConfig struct {
	// Mailer hands messages to the outside world (an SMTPMailer). Nil
	// outside production: a DevMailer that keeps them. Nil in production
	// leaves the sender without a mailer, which the web shell refuses to
	// start with (see Transactional.Mailer).
	Mailer Mailer
	// Outbox, when set, makes sends durable: a message is written in the
	// caller's transaction (topic TransactionalTopic) and the outbox
	// relay hands it to Mailer through Handler. Without one, messages go
	// to an in-memory queue with retries. A DevMailer keeps mail at once
	// either way.
	Outbox Outbox
	// Production refuses nothing here; it only stops a nil Mailer from
	// becoming a DevMailer.
	Production bool
	Logger     *slog.Logger
}

// Transactional sends the platform's own mail (verification, reset and
// setup links, security notices, invitations), as opposed to the mail a
// user sends from their mailbox (mailSend). It decides how a message
// travels: in the caller's transaction through the outbox when there is
// one, through an in-memory queue with retries otherwise, at once to a
// DevMailer in development. It is safe for concurrent use.
type Transactional struct {
	mailer Mailer
	dev    *DevMailer
	outbox Outbox
	queue  *mailQueue // nil with a DevMailer or an outbox
	log    *slog.Logger
}

// NewTransactional returns a sender for cfg. With neither an outbox nor
// a DevMailer it starts the queue's worker: call Close at shutdown.
func NewTransactional(cfg TransactionalConfig) *Transactional {
	t := &Transactional{mailer: cfg.Mailer, outbox: cfg.Outbox, log: cfg.Logger}
	if t.log == nil {
		t.log = slog.Default()
	}
	switch m := cfg.Mailer.(type) {
	case nil:
		if !cfg.Production {
			t.dev = NewDevMailer(t.log)
			t.mailer = t.dev
		}
	case *DevMailer:
		t.dev = m
	}
	if t.dev == nil && t.outbox == nil && t.mailer != nil {
		t.queue = newMailQueue(t.mailer, t.log)
	}
	return t
}

// Mailer returns the mailer in use (nil in production without one).
func (t *Transactional) Mailer() Mailer { return t.mailer }

// DevMail returns the development mailer in use, or nil when mail is
// really sent.
func (t *Transactional) DevMail() *DevMailer { return t.dev }

// RawSender returns what hands the mail domain's outbound mail (mailSend)
// to the outside world: the same mailer, when it can send raw messages
// (SMTPMailer and DevMailer can); else nil.
func (t *Transactional) RawSender() RawSender {
	rs, _ := t.mailer.(RawSender)
	return rs
}

// Durable reports whether SendInTx writes to the outbox, so that a
// message is sent exactly when the transaction commits. When it is false
// SendInTx hands the message over at once, and a caller that must not
// send before its commit calls Send after it instead.
func (t *Transactional) Durable() bool { return t.outbox != nil && t.dev == nil }

// SendInTx sends msg as part of tx: written to the outbox inside tx when
// the sender is durable, else checked and handed over at once (queue or
// DevMailer). An invalid message is an error (wrapping
// ErrInvalidMessage), so the caller's transaction can roll back.
func (t *Transactional) SendInTx(ctx context.Context, tx bun.IDB, msg TransactionalMessage) error {
	if _, err := msg.validate(); err != nil {
		return err
	}
	if t.Durable() {
		payload, err := json.Marshal(msg)
		if err != nil {
			return fmt.Errorf("mail: encode mail: %w", err)
		}
		return t.outbox.Add(ctx, tx, TransactionalTopic, payload)
	}
	t.Send(ctx, msg)
	return nil
}

// Send hands msg over outside any transaction: to the queue when there is
// one, else at once to the mailer (a DevMailer keeps it). It never writes
// to the outbox: a caller that wants durability uses SendInTx or
// SendNotice. A failure is logged.
func (t *Transactional) Send(ctx context.Context, msg TransactionalMessage) {
	if t.queue != nil {
		t.queue.enqueue(ctx, msg)
		return
	}
	if t.mailer == nil {
		t.log.ErrorContext(ctx, "mail: no mailer: mail not sent", "to", msg.To, "subject", msg.Subject)
		return
	}
	if err := t.mailer.Send(ctx, msg); err != nil {
		t.log.ErrorContext(ctx, "mail: send mail", "to", msg.To, "err", err)
	}
}

// SendNotice sends msg, which carries no link to act on and belongs to no
// transaction: through the outbox (one row, written on its own) when the
// sender is durable, else like Send. db is where the outbox row is
// written (the store's database). A failure is logged.
func (t *Transactional) SendNotice(ctx context.Context, db bun.IDB, msg TransactionalMessage) {
	if !t.Durable() {
		t.Send(ctx, msg)
		return
	}
	if err := t.SendInTx(ctx, db, msg); err != nil {
		t.log.ErrorContext(ctx, "mail: queue mail", "to", msg.To, "err", err)
	}
}

// Handler is the outbox handler of TransactionalTopic: it hands a queued
// message to the mailer. Register it with the outbox relay.
func (t *Transactional) Handler() func(ctx context.Context, payload []byte) error {
	return func(ctx context.Context, payload []byte) error {
		var msg TransactionalMessage
		if err := json.Unmarshal(payload, &msg); err != nil {
			return fmt.Errorf("mail: decode mail: %w", err)
		}
		if t.mailer == nil {
			return errors.New("mail: no mailer is configured")
		}
		return t.mailer.Send(ctx, msg)
	}
}

// Close stops the background queue, if any: it waits until queued mail
// is handed to the mailer or ctx ends (then the rest is dropped and
// logged). It is safe to call more than once.
func (t *Transactional) Close(ctx context.Context) error {
	if t.queue == nil {
		return nil
	}
	if err := t.queue.close(ctx); err != nil {
		return fmt.Errorf("mail: close mail queue: %w", err)
	}
	return nil
}
