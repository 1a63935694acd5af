package web

import (
	"context"
	"log/slog"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/mail"
)

// The transactional mail sender lives in package mail; web only calls it
// (MailSender). These names are kept for embedders.
type (
	// Deprecated: use mail.TransactionalMessage.
	Message = mail.TransactionalMessage
	// Deprecated: use mail.Mailer.
	Mailer = mail.Mailer
	// Deprecated: use mail.DevMailer.
	DevMailer = mail.DevMailer
	// Deprecated: use mail.KeptMessage.
	KeptMessage = mail.KeptMessage
	// Deprecated: use mail.SMTPMailer.
	SMTPMailer = mail.SMTPMailer
	// Deprecated: use mail.SMTPConfig.
	SMTPConfig = mail.SMTPConfig
	// Deprecated: use mail.SMTPSecurity.
	SMTPSecurity = mail.SMTPSecurity
	// Deprecated: use mail.SMTPAuth.
	SMTPAuth = mail.SMTPAuth
)

// Deprecated: use the constants of package mail.
const (
	SMTPStartTLS    = mail.SMTPStartTLS
	SMTPImplicitTLS = mail.SMTPImplicitTLS
	SMTPPlaintext   = mail.SMTPPlaintext
	SMTPAuthPlain   = mail.SMTPAuthPlain
	SMTPAuthXOAUTH2 = mail.SMTPAuthXOAUTH2
	DevMailKeep     = mail.DevMailKeep
	MailTopic       = mail.TransactionalTopic
)

// Deprecated: use mail.ErrInvalidMessage.
var ErrInvalidMessage = mail.ErrInvalidMessage

// NewDevMailer returns mail.NewDevMailer(log).
//
// Deprecated: use mail.NewDevMailer.
func NewDevMailer(log *slog.Logger) *DevMailer { return mail.NewDevMailer(log) }

// NewSMTPMailer returns mail.NewSMTPMailer(cfg).
//
// Deprecated: use mail.NewSMTPMailer.
func NewSMTPMailer(cfg SMTPConfig) (*SMTPMailer, error) { return mail.NewSMTPMailer(cfg) }

// ParseSMTPURL returns mail.ParseSMTPURL(raw).
//
// Deprecated: use mail.ParseSMTPURL.
func ParseSMTPURL(raw string) (SMTPConfig, error) { return mail.ParseSMTPURL(raw) }

// MailSender is how the pages send the platform's own mail: package
// mail's *Transactional implements it. Options.Mail sets it; without one
// New builds a mail.Transactional from Options.Mailer and Options.Outbox.
type MailSender interface {
	// Durable reports whether SendInTx writes to the outbox (sent exactly
	// when the transaction commits).
	Durable() bool
	// SendInTx sends msg as part of tx (see mail.Transactional.SendInTx).
	SendInTx(ctx context.Context, tx bun.IDB, msg Message) error
	// Send hands msg over outside any transaction; failures are logged.
	Send(ctx context.Context, msg Message)
	// SendNotice sends a message that belongs to no transaction, through
	// the outbox (a row written in db) when durable; failures are logged.
	SendNotice(ctx context.Context, db bun.IDB, msg Message)
	// DevMail returns the development mailer, or nil when mail is really
	// sent (the /dev/mail page exists only with one).
	DevMail() *DevMailer
	// Mailer returns the mailer in use; nil when none is configured,
	// which production refuses.
	Mailer() Mailer
}

var _ MailSender = (*mail.Transactional)(nil)

// sendMail hands msg over outside any transaction (after a commit).
func (h *Handler) sendMail(ctx context.Context, msg Message) { h.mail.Send(ctx, msg) }

// sendNotice mails msg, which carries no link to act on: through the
// outbox (one row, written on its own) when the sender is durable,
// otherwise like sendMail. A failure is logged.
func (h *Handler) sendNotice(ctx context.Context, msg Message) {
	h.mail.SendNotice(ctx, h.opts.Store.DB, msg)
}

// mailInTx sends msg as part of tx: through the outbox inside tx when the
// sender is durable; otherwise to the mail queue or a DevMailer at once.
func (h *Handler) mailInTx(ctx context.Context, tx bun.IDB, msg Message) error {
	return h.mail.SendInTx(ctx, tx, msg)
}

// MailHandler is the outbox handler of MailTopic when New built the
// sender (Options.Mail unset); nil when the sender came from Options.Mail,
// whose owner registers its own handler (mail.Transactional.Handler).
func (h *Handler) MailHandler() outbox.Handler {
	if h.ownMail == nil {
		return nil
	}
	return h.ownMail.Handler()
}
