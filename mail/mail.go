package mail

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"database/sql"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
)

// BlobDomain is the blob domain of user mail: a user's raw messages and
// attachments are under "<stableID>/mail/".
const BlobDomain = "mail"

// ReceiveClass is the quota class an accepted inbound message counts
// against (one per message and recipient mailbox, per UTC day).
const ReceiveClass = "mail_receive"

// DefaultReceivesPerDay is how many messages a user's mailbox accepts per
// UTC day by default.
const DefaultReceivesPerDay = 500

// Folders of a mailbox.
const (
	FolderInbox      = "inbox"
	FolderQuarantine = "quarantine"
	FolderSent       = "sent"
)

// Options configure mail. Every zero value is a documented default.
type Options struct {
	// Disabled turns mail off: no capability, no listener. The tables
	// exist, and are exported and deleted with accounts all the same.
	Disabled bool
	// Domain is the mail domain D: users receive mail at
	// <username>@D and <username>+<tag>@D. Empty: no address is ours,
	// and the SMTP listener does not start.
	Domain string
	// SMTPListen is the address of the inbound SMTP listener
	// (enclave serve --smtp-listen), e.g. ":2525". Empty: no listener.
	SMTPListen string
	// TLS, when set, offers STARTTLS with this configuration (enclave
	// serve --smtp-tls-cert/--smtp-tls-key build it).
	TLS *tls.Config
	// MaxMessageBytes bounds one message (the SMTP SIZE). Default 25 MiB.
	MaxMessageBytes int64
	// ReceivesPerDay is how many messages one user's mailbox accepts per
	// UTC day (quota class mail_receive, the meter a plan limits too). Default 500; a
	// negative value is unlimited.
	ReceivesPerDay int64
	// SendsPerDay is how many messages one user may send per UTC day
	// (quota class mail_send, the meter a plan limits too). Default 100;
	// a negative value is unlimited.
	SendsPerDay int64
	// Reserved are the local parts of system mailboxes. Default
	// DefaultReserved.
	Reserved []string
	// Hostname is the name the listener greets with. Default Domain.
	Hostname string
	// MaxConnections bounds the SMTP connections served at once (each
	// may hold a message of up to MaxMessageBytes in memory); further
	// ones are answered 421 and closed. Default 100.
	MaxConnections int
	// MaxConnectionsPerIP bounds the SMTP connections served at once from
	// one client address. Default 10.
	MaxConnectionsPerIP int
	// MaxSessionTime bounds how long one SMTP connection may last,
	// however slowly its client trickles bytes. Default 15 minutes.
	MaxSessionTime time.Duration
	// Authenticate checks a message's sender authentication (SPF, DKIM,
	// DMARC) from the message and its SMTP envelope, and returns the
	// results to record and whether the message fails them; a failing
	// message is quarantined. Nil: no check (results "none"). It must
	// bound its own DNS lookups (ctx ends them too). Package mailauth
	// provides the checker the enclave binary sets.
	Authenticate func(ctx context.Context, in AuthInput) (results string, fail bool)
}

// AuthInput is what a sender check sees: the message as received and,
// over SMTP, its envelope.
type AuthInput struct {
	// Raw is the message.
	Raw []byte
	// RemoteIP is the SMTP client's address; nil for a message that did
	// not arrive over SMTP (no SPF check is possible then).
	RemoteIP net.IP
	// Helo is the name the client gave in HELO/EHLO.
	Helo string
	// MailFrom is the envelope sender (MAIL FROM), "" for a bounce.
	MailFrom string
}

// Meter counts uses of a quota class (quota.Meter implements it).
type Meter interface {
	AllowClass(ctx context.Context, caller capabilities.Caller, class string, limit int64) error
}

// Config configures the service: Options plus what the server provides.
// Store and Owners are required.
type Config struct {
	Options
	Store  *storage.Store
	Owners capabilities.OwnerOf
	// Meter counts receives; nil counts nothing.
	Meter Meter
	// Outbox queues outbound mail in the transaction that records it
	// (internal/outbox); nil: mailSend is refused.
	Outbox Outbox
	// Sender returns what hands outbound mail to the outside world (the
	// server's mailer), resolved at each send; nil: queued mail waits.
	Sender func() RawSender
	// Publish publishes an admin event inside a transaction (events.Bus);
	// nil publishes nothing.
	Publish func(ctx context.Context, db bun.IDB, typ string, data any) error
	// Audit records admins' reads of system mail; nil records nothing.
	Audit  *audit.Log
	Logger *slog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// Service keeps mailboxes.
type Service struct {
	opts   Options
	store  *storage.Store
	owners capabilities.OwnerOf
	meter  Meter
	audit  *audit.Log
	log    *slog.Logger
	now    func() time.Time

	outbox  Outbox
	sender  func() RawSender
	publish func(ctx context.Context, db bun.IDB, typ string, data any) error

	// group commits concurrent deliveries together.
	group *groupCommit
}

// New returns the service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Owners == nil {
		return nil, errors.New("mail: Store and Owners are required")
	}
	o := cfg.Options
	o.Domain = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(o.Domain), "."))
	if o.Domain != "" && !validDomain(o.Domain) {
		return nil, fmt.Errorf("mail: domain %q is not a domain name", cfg.Domain)
	}
	if o.SMTPListen != "" && o.Domain == "" {
		return nil, errors.New("mail: an SMTP listener needs a mail domain (--mail-domain)")
	}
	o.MaxMessageBytes = cmp.Or(o.MaxMessageBytes, DefaultMaxMessageBytes)
	o.ReceivesPerDay = cmp.Or(o.ReceivesPerDay, DefaultReceivesPerDay)
	o.SendsPerDay = cmp.Or(o.SendsPerDay, DefaultSendsPerDay)
	if o.Reserved == nil {
		o.Reserved = DefaultReserved
	}
	o.Reserved = slices.Clone(o.Reserved)
	for i, r := range o.Reserved {
		o.Reserved[i] = strings.ToLower(r)
		if !localName.MatchString(o.Reserved[i]) {
			return nil, fmt.Errorf("mail: reserved local part %q: want lowercase letters, digits and hyphens", r)
		}
	}
	o.Hostname = cmp.Or(o.Hostname, o.Domain, "localhost")
	o.MaxConnections = cmp.Or(max(o.MaxConnections, 0), DefaultMaxConnections)
	o.MaxConnectionsPerIP = cmp.Or(max(o.MaxConnectionsPerIP, 0), DefaultMaxConnectionsPerIP)
	o.MaxSessionTime = cmp.Or(max(o.MaxSessionTime, 0), DefaultMaxSessionTime)
	s := &Service{opts: o, store: cfg.Store, owners: cfg.Owners, meter: cfg.Meter, audit: cfg.Audit, log: cfg.Logger, now: cfg.Now,
		outbox: cfg.Outbox, sender: cfg.Sender, publish: cfg.Publish, group: &groupCommit{store: cfg.Store}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Options returns the options in force (defaults filled in).
func (s *Service) Options() Options { return s.opts }

// Address returns the address a user gives out, or "" without a domain.
func (s *Service) Address(username string) string {
	if s.opts.Domain == "" || username == "" {
		return ""
	}
	return username + "@" + s.opts.Domain
}

func validDomain(d string) bool {
	if len(d) > 253 || !strings.Contains(d, ".") && d != "localhost" {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if !localName.MatchString(label) {
			return false
		}
	}
	return true
}

// box is one mailbox: a user's (tables mail_*, owner column user_id,
// blobs under the user's stable id) or a system mailbox (tables
// system_mail_*, owner column mailbox, blobs under "system/mail/<name>").
type box struct {
	prefix string
	col    string
	val    any
	blobs  string
	owner  storage.Owner // user boxes only
}

func userBox(o storage.Owner) box {
	return box{prefix: "mail_", col: "user_id", val: o.ID, blobs: o.StableID + "/" + BlobDomain, owner: o}
}

func systemBox(name string) box {
	return box{prefix: "system_mail_", col: "mailbox", val: name, blobs: "system/" + BlobDomain + "/" + name}
}

func (b box) table(name string) bun.Ident { return bun.Ident(b.prefix + name) }
func (b box) owned() bun.Ident            { return bun.Ident(b.col) }

// rawKey and partKey are the blob keys of a message's raw MIME and its
// attachments, derived from the mailbox and the message's delivery key.
func (b box) rawKey(key string) string         { return b.blobs + "/raw/" + key + ".eml" }
func (b box) partKey(key string, n int) string { return fmt.Sprintf("%s/att/%s/%d", b.blobs, key, n) }

// deliveryKey names a delivery's blobs: a digest of its delivery id, so a
// retried delivery writes the same keys.
func deliveryKey(deliveryID string) string {
	sum := sha256.Sum256([]byte(deliveryID))
	return hex.EncodeToString(sum[:16])
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

func newID(prefix string) string {
	var b [15]byte
	_, _ = rand.Read(b[:])
	return prefix + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

func invalid(format string, args ...any) error {
	return capabilities.Errorf(capabilities.CodeInvalidInput, format, args...)
}

func notFound(what, id string) error {
	return capabilities.Errorf(capabilities.CodeNotFound, "%s %q not found", what, id)
}

func (s *Service) owner(ctx context.Context, c capabilities.Caller) (storage.Owner, error) {
	o, err := s.owners(ctx, c)
	return storage.Owner(o), err
}

// userRow is what delivery needs of a recipient's account.
type userRow struct {
	ID         int64        `bun:"id"`
	StableID   string       `bun:"stable_user_id"`
	DeletingAt sql.NullTime `bun:"deleting_at"`
	Suspended  sql.NullTime `bun:"suspended_at"`
}

// lookupUser finds the live account named username, or reports none.
func (s *Service) lookupUser(ctx context.Context, username string) (userRow, bool, error) {
	var u userRow
	err := s.store.Reader.NewRaw("SELECT id, stable_user_id, deleting_at, suspended_at FROM users WHERE username = ?", username).Scan(ctx, &u)
	if errors.Is(err, sql.ErrNoRows) {
		return userRow{}, false, nil
	}
	if err != nil {
		return userRow{}, false, fmt.Errorf("mail: look up recipient: %w", err)
	}
	if u.DeletingAt.Valid || u.Suspended.Valid {
		return userRow{}, false, nil
	}
	return u, true, nil
}
