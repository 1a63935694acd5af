package mail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	netmail "net/mail"
	"strings"
)

// SendRaw hands a message it did not write to the server as it is: from
// the envelope sender from, to the envelope recipients to. The mail
// domain's outbound mail (package mail) goes through it. The connection
// is secured and authenticated like Send's; the error never contains the
// password.
func (m *SMTPMailer) SendRaw(ctx context.Context, from string, to []string, raw []byte) error {
	if err := checkEnvelope(from, to, raw); err != nil {
		return err
	}
	return m.deliver(ctx, from, to, raw)
}

func (m *SMTPMailer) smtpError(ctx context.Context, err error) error {
	if m.cfg.Password != "" {
		err = errors.New(strings.ReplaceAll(err.Error(), m.cfg.Password, "[redacted]"))
	}
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("mail: smtp: %w (%w)", err, cause)
	}
	return fmt.Errorf("mail: smtp: %w", err)
}

// checkEnvelope refuses an envelope a line break or a bracket could
// extend, and an empty message.
func checkEnvelope(from string, to []string, raw []byte) error {
	bad := func(a string) bool { return a == "" || strings.ContainsAny(a, "\r\n<> ") }
	if bad(from) || len(to) == 0 || len(raw) == 0 {
		return fmt.Errorf("%w: envelope", ErrInvalidMessage)
	}
	for _, r := range to {
		if bad(r) {
			return fmt.Errorf("%w: recipient %q", ErrInvalidMessage, r)
		}
	}
	return nil
}

// SendRaw keeps a message written elsewhere (the mail domain's outbound
// mail), one kept message per recipient, with its subject and its bytes
// as the text.
func (d *DevMailer) SendRaw(ctx context.Context, from string, to []string, raw []byte) error {
	if err := checkEnvelope(from, to, raw); err != nil {
		return err
	}
	subject := "(no subject)"
	if msg, err := netmail.ReadMessage(bytes.NewReader(raw)); err == nil {
		if s, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject")); err == nil && s != "" {
			subject = s
		}
	}
	for _, r := range to {
		d.keep(ctx, TransactionalMessage{To: r, Subject: subject, Text: string(raw)})
	}
	return nil
}
