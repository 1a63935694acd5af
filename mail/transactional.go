package mail

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	netmail "net/mail"
	"slices"
	"strings"
	"sync"
	"time"
)

// TransactionalMessage is one plain-text email the platform sends: a link
// to verify an address or reset a password, a security notice, an
// invitation. (Message is a message of a mailbox.)
type TransactionalMessage struct {
	To      string // one address, "person@example.com" or "Name <person@example.com>"
	Subject string
	Text    string // UTF-8 plain text body
	// HTML is an optional HTML alternative of Text. SMTPMailer sends both
	// parts, making the HTML from Text when this is empty.
	HTML string
}

// Mailer sends email. Send returns once the message is handed over (to an
// SMTP server, or kept by a DevMailer); implementations are safe for
// concurrent use.
type Mailer interface {
	Send(ctx context.Context, msg TransactionalMessage) error
}

// ErrInvalidMessage is returned for a message that cannot be sent as is
// (bad address, line breaks in the subject, empty body).
var ErrInvalidMessage = errors.New("mail: invalid mail message")

// validate checks msg and returns the parsed recipient.
func (msg TransactionalMessage) validate() (*netmail.Address, error) {
	to, err := netmail.ParseAddress(msg.To)
	if err != nil || strings.ContainsAny(to.Address, "\r\n<>") {
		return nil, fmt.Errorf("%w: recipient %q", ErrInvalidMessage, msg.To)
	}
	if strings.ContainsAny(msg.Subject, "\r\n") || strings.TrimSpace(msg.Subject) == "" {
		return nil, fmt.Errorf("%w: subject must be one non-empty line", ErrInvalidMessage)
	}
	if strings.TrimSpace(msg.Text) == "" {
		return nil, fmt.Errorf("%w: empty body", ErrInvalidMessage)
	}
	return to, nil
}

// DevMailer keeps messages in memory instead of sending them, for
// development: they are listed at /dev/mail when Options.DevRoutes is on.
// It keeps the newest DevMailKeep messages.
type DevMailer struct {
	log  *slog.Logger
	mu   sync.Mutex
	msgs []KeptMessage
	next int
}

// DevMailKeep is how many messages a DevMailer keeps.
const DevMailKeep = 100

// KeptMessage is a message kept by a DevMailer.
type KeptMessage struct {
	ID     int
	SentAt time.Time
	TransactionalMessage
}

// NewDevMailer returns an empty DevMailer that logs each message's
// recipient and subject (never its body, which holds one-time links) to log
// (nil: slog.Default()).
func NewDevMailer(log *slog.Logger) *DevMailer {
	if log == nil {
		log = slog.Default()
	}
	return &DevMailer{log: log}
}

// Send keeps msg.
func (d *DevMailer) Send(ctx context.Context, msg TransactionalMessage) error {
	if _, err := msg.validate(); err != nil {
		return err
	}
	d.keep(ctx, msg)
	return nil
}

func (d *DevMailer) keep(ctx context.Context, msg TransactionalMessage) {
	d.mu.Lock()
	d.next++
	d.msgs = append(d.msgs, KeptMessage{ID: d.next, SentAt: time.Now(), TransactionalMessage: msg})
	if len(d.msgs) > DevMailKeep {
		d.msgs = slices.Delete(d.msgs, 0, len(d.msgs)-DevMailKeep)
	}
	id := d.next
	d.mu.Unlock()
	d.log.InfoContext(ctx, "development mail kept; read it at /dev/mail", "id", id, "to", msg.To, "subject", msg.Subject)
}

// Messages returns the kept messages, newest first.
func (d *DevMailer) Messages() []KeptMessage {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := slices.Clone(d.msgs)
	slices.Reverse(out)
	return out
}

// Last returns the newest message sent to the address to, if any.
func (d *DevMailer) Last(to string) (KeptMessage, bool) {
	for _, m := range d.Messages() {
		if a, err := netmail.ParseAddress(m.To); err == nil && strings.EqualFold(a.Address, to) {
			return m, true
		}
	}
	return KeptMessage{}, false
}
