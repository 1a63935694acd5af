package enclave

import (
	"context"
	"fmt"
	"net"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/mail"
)

// assembleMail declares the retention of the mail tables (they exist
// whether or not mail is on) and, unless Config.Mail.Disabled is set,
// builds mail: its capabilities and, when Config.Mail.SMTPListen is set,
// the inbound SMTP listener, bound here (so SMTPAddr is known before
// serving) and served by Serve.
func (s *Server) assembleMail(owners capabilities.OwnerOf) error {
	if err := s.retention.Add(mail.RetentionPolicies(s.store.Bucket)...); err != nil {
		return err
	}
	if s.cfg.Mail.Disabled {
		return nil
	}
	svc, err := mail.New(mail.Config{Options: s.cfg.Mail, Store: s.store, Owners: owners, Meter: s.meter, Audit: s.audit, Logger: s.log,
		Outbox: s.outbox,
		// Outbound mail leaves through the transactional sender's mailer.
		Sender: s.txMail.RawSender,
		Publish: func(ctx context.Context, db bun.IDB, typ string, data any) error {
			if s.events == nil {
				return nil
			}
			_, err := s.events.Publish(ctx, db, typ, data)
			return err
		}})
	if err != nil {
		return err
	}
	if err := s.registry.Register(svc.Capabilities()...); err != nil {
		return fmt.Errorf("register mail: %w", err)
	}
	if addr := s.cfg.Mail.SMTPListen; addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("enclave: smtp listen: %w", err)
		}
		s.smtpLn = ln
	}
	s.mail = svc
	return nil
}

// assembleTransactionalMail builds the sender of the platform's own mail
// (verification, reset and setup links, notices, invitations) from
// Config.Mailer, writing through the outbox; the web shell and the
// account, workspace and feedback mailers get it directly.
func (s *Server) assembleTransactionalMail() {
	s.txMail = mail.NewTransactional(mail.TransactionalConfig{Mailer: s.cfg.Mailer, Outbox: s.outbox,
		Production: s.cfg.Production, Logger: s.log})
	s.accountMail = mail.NewAccountMail(s.txMail, s.store.DB, s.cfg.SiteName, s.cfg.BaseURL)
}

// mailOutboxHandlers are the outbox handlers of mail: outbound messages.
func (s *Server) mailOutboxHandlers() map[string]outbox.Handler {
	if s.mail == nil {
		return nil
	}
	return map[string]outbox.Handler{mail.OutboundTopic: s.mail.OutboundHandler()}
}

// serveSMTP serves the inbound SMTP listener, if any, until the returned
// stop is called.
func (s *Server) serveSMTP() (stop func()) {
	if s.mail == nil || s.smtpLn == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.log.Info("serving SMTP", "addr", s.smtpLn.Addr().String(), "domain", s.mail.Options().Domain)
		if err := s.mail.Serve(ctx, s.smtpLn); err != nil {
			s.log.Error("smtp listener stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }
}

// Mail returns the mail service, or nil when Config.Mail.Disabled turned
// it off.
func (s *Server) Mail() *mail.Service { return s.mail }

// SMTPAddr returns the address the inbound SMTP listener is bound to, or
// "" without one.
func (s *Server) SMTPAddr() string {
	if s.smtpLn == nil {
		return ""
	}
	return s.smtpLn.Addr().String()
}
