package mail

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	netmail "net/mail"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
)

// SendClass is the quota class a sent message counts against (one per
// message, per UTC day): the plan meter quota.MeterMailSend.
const SendClass = "mail_send"

// DefaultSendsPerDay is how many messages a user may send per UTC day by
// default (a plan may lower it).
const DefaultSendsPerDay = 100

// Limits of one outbound message.
const (
	MaxSendRecipients = 5
	MaxSubjectChars   = 250
	MaxSendTextBytes  = 256 << 10
	MaxSendHTMLBytes  = 512 << 10
)

// OutboundTopic is the outbox topic of outbound mail: its payload is an
// Outgoing, handled by Service.OutboundHandler.
const OutboundTopic = "mail.outbound"

// BounceLocal is the local part of the envelope sender of users' outbound
// mail: bounces+<token>@D, where the token names one message (VERP).
const BounceLocal = "bounces"

// Outgoing is one message handed to the outbox: the envelope and the
// bytes as they are sent.
type Outgoing struct {
	// OutboundID is the public id (out_…) of the user's outbound row; ""
	// for a system mailbox's message.
	OutboundID string   `json:"outboundId,omitempty"`
	From       string   `json:"from"`
	To         []string `json:"to"`
	Raw        []byte   `json:"raw"`
}

// RawSender hands a message to the outside world: the SMTP relay of the
// server (SMTPMailer implements it), or a DevMailer.
type RawSender interface {
	SendRaw(ctx context.Context, from string, to []string, raw []byte) error
}

// Outbox records work in a transaction (internal/outbox.Outbox).
type Outbox interface {
	Add(ctx context.Context, db bun.IDB, topic string, payload []byte) error
	AddOwned(ctx context.Context, db bun.IDB, topic string, ownerID int64, payload []byte) error
}

// SendInput is the input of mailSend.
type SendInput struct {
	To        []string `json:"to" jsonschema:"the recipients: one to five plain addresses (alice@example.com), without display names" schema:"minItems=1,maxItems=5"`
	Subject   string   `json:"subject" jsonschema:"the subject: one line" schema:"minLength=1,maxLength=250"`
	Text      string   `json:"text" jsonschema:"the plain-text body"`
	HTML      string   `json:"html,omitempty" jsonschema:"an optional HTML alternative of the text"`
	InReplyTo string   `json:"inReplyTo,omitempty" jsonschema:"the id (msg_…) of the message of your mailbox this answers: the reply joins its thread"`
}

// SendOutput is the output of mailSend.
type SendOutput struct {
	Status     string   `json:"status" jsonschema:"queued (the person confirmed and the message is on its way), declined or cancelled (nothing was sent)" schema:"enum=queued|declined|cancelled"`
	From       string   `json:"from"`
	To         []string `json:"to"`
	OutboundID string   `json:"outboundId,omitempty" jsonschema:"the sent message's delivery record (out_…)"`
	MessageID  string   `json:"messageId,omitempty" jsonschema:"the copy in your sent folder (msg_…)"`
	ThreadID   string   `json:"threadId,omitempty"`
	Message    string   `json:"message" jsonschema:"what happened, in a sentence"`
}

// draft is a checked outbound message.
type draft struct {
	from, subject, text, html string
	to                        []string
}

// plainAddr is an address an agent may send to: a dot-atom local part
// without the routing characters % and !, and a domain name.
var plainAddr = regexp.MustCompile(`^[A-Za-z0-9.#$&'*+/=?^_{|}~-]{1,64}@[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63})+$`)

// checkRecipient returns addr as a single plain address, or an error that
// says what is wrong. Display names, comments, quoted local parts,
// source routes and several addresses in one string are refused.
func checkRecipient(addr string) (string, error) {
	a := strings.TrimSpace(addr)
	if a == "" || len(a) > 254 || strings.ContainsAny(a, "\r\n\t \"<>(),;:\\[]%!") || !plainAddr.MatchString(a) ||
		strings.HasPrefix(a, ".") || strings.Contains(a, "..") || strings.Contains(a, ".@") {
		return "", invalid("recipient %q is not a single plain address like alice@example.com (no names, quotes, brackets, commas or %%/! routing)", clip(addr, 80))
	}
	if p, err := netmail.ParseAddress(a); err != nil || p.Name != "" || !strings.EqualFold(p.Address, a) {
		return "", invalid("recipient %q is not a single plain address like alice@example.com", clip(addr, 80))
	}
	return a, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// checkDraft checks a message an agent asks to send.
func checkDraft(from string, to []string, subject, text, html string) (draft, error) {
	if len(to) == 0 || len(to) > MaxSendRecipients {
		return draft{}, invalid("to needs one to %d recipients, got %d", MaxSendRecipients, len(to))
	}
	d := draft{from: from, subject: strings.TrimSpace(subject), text: text, html: html}
	seen := map[string]bool{}
	for _, a := range to {
		addr, err := checkRecipient(a)
		if err != nil {
			return draft{}, err
		}
		if k := strings.ToLower(addr); !seen[k] {
			seen[k] = true
			d.to = append(d.to, addr)
		}
	}
	switch {
	case d.subject == "":
		return draft{}, invalid("subject is empty: write one line")
	case !utf8.ValidString(d.subject) || strings.IndexFunc(d.subject, unicode.IsControl) >= 0 || strings.IndexFunc(d.subject, bidiControl) >= 0:
		return draft{}, invalid("subject must be one line of text, without line breaks or control characters")
	case utf8.RuneCountInString(d.subject) > MaxSubjectChars:
		return draft{}, invalid("subject is longer than %d characters", MaxSubjectChars)
	case strings.TrimSpace(text) == "":
		return draft{}, invalid("text is empty: a message needs a plain-text body")
	case !utf8.ValidString(text) || !utf8.ValidString(html):
		return draft{}, invalid("text and html must be UTF-8")
	case len(text) > MaxSendTextBytes:
		return draft{}, invalid("text is over %d KiB", MaxSendTextBytes>>10)
	case len(html) > MaxSendHTMLBytes:
		return draft{}, invalid("html is over %d KiB", MaxSendHTMLBytes>>10)
	}
	return d, nil
}

// bidiControl reports the characters that reorder text: in a subject they
// could make the confirmation show something else than what is sent.
func bidiControl(r rune) bool {
	return r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f || r == 0x061c
}

// confirm asks the person to confirm d exactly. It returns "accept",
// "decline" or "cancel", or an error: a client that cannot ask is refused
// (nothing is ever sent without the person).
func confirm(ctx context.Context, call *capabilities.Call, what string, d draft) (string, error) {
	var b strings.Builder
	// The headers come first and the text after a marked line, so a text
	// that imitates headers cannot pass for them.
	fmt.Fprintf(&b, "%s\n\nFrom: %s\nTo: %s\nSubject: %s\n", what, d.from, strings.Join(d.to, ", "), d.subject)
	if d.html != "" {
		b.WriteString("(an HTML version goes with it: shown after the text)\n")
	}
	fmt.Fprintf(&b, "\n----- text of the message (%d characters) -----\n%s\n----- end of the message -----", utf8.RuneCountInString(d.text), d.text)
	if d.html != "" {
		// Most mail programs show the HTML version instead of the text:
		// the person confirms it too, as its source.
		fmt.Fprintf(&b, "\n\n----- HTML version, as its source (%d characters; most mail programs show this instead of the text) -----\n%s\n----- end of the HTML version -----",
			utf8.RuneCountInString(d.html), d.html)
	}
	schema := json.RawMessage(`{"type":"object","properties":{"send":{"type":"boolean","title":"Send this message","description":"Send exactly this message now"}},"required":["send"]}`)
	ans, err := call.Elicit(ctx, capabilities.ElicitRequest{Message: b.String(), Schema: schema})
	if err != nil {
		if capabilities.CodeOf(err) == capabilities.CodeUnsupported {
			return "", capabilities.Errorf(capabilities.CodeUnsupported,
				"sending mail needs the person's confirmation, and this client cannot ask them (it does not support MCP elicitation); nothing was sent. Use a client that supports elicitation")
		}
		return "", err
	}
	switch ans.Action {
	case "accept":
		// Only the form's send=true sends: an accept without it (an empty
		// form, a string, false) is not the person saying "send".
		if v, ok := ans.Content["send"].(bool); !ok || !v {
			return "decline", nil
		}
		return "accept", nil
	case "decline":
		return "decline", nil
	default:
		return "cancel", nil
	}
}

// compose writes d as an RFC 5322 message with the given Message-ID and
// threading headers.
func compose(d draft, msgID, inReplyTo string, refs []string, now time.Time) []byte {
	var b bytes.Buffer
	h := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	h("From", d.from)
	h("To", strings.Join(d.to, ", "))
	h("Subject", encodeSubject(d.subject))
	h("Date", now.Format(time.RFC1123Z))
	h("Message-ID", "<"+msgID+">")
	if inReplyTo != "" {
		h("In-Reply-To", "<"+inReplyTo+">")
	}
	if len(refs) > 0 {
		h("References", "<"+strings.Join(refs, "> <")+">")
	}
	h("MIME-Version", "1.0")
	text := strings.ReplaceAll(d.text, "\r\n", "\n")
	part := func(ct, body string) {
		b.WriteString("Content-Type: " + ct + "; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n")
		w := quotedprintable.NewWriter(&b)
		_, _ = w.Write([]byte(strings.ReplaceAll(body, "\n", "\r\n")))
		_ = w.Close()
		b.WriteString("\r\n")
	}
	if d.html == "" {
		part("text/plain", text)
		return b.Bytes()
	}
	boundary := "=_" + strings.ToLower(idEncoding.EncodeToString(randomBytes(12)))
	b.WriteString("Content-Type: multipart/alternative; boundary=\"" + boundary + "\"\r\n\r\n")
	b.WriteString("--" + boundary + "\r\n")
	part("text/plain", text)
	b.WriteString("--" + boundary + "\r\n")
	part("text/html", strings.ReplaceAll(d.html, "\r\n", "\n"))
	b.WriteString("--" + boundary + "--\r\n")
	return b.Bytes()
}

// encodeSubject writes a subject as RFC 2047 encoded words when it needs
// them, and always when it holds "=?": a subject that is itself an encoded
// word would otherwise be shown to the person literally and decoded by
// every recipient into other text. The words are folded onto lines of
// their own, so no header line grows past the 998 bytes of RFC 5322.
func encodeSubject(subject string) string {
	if !strings.Contains(subject, "=?") {
		return strings.ReplaceAll(mime.QEncoding.Encode("utf-8", subject), "?= =?", "?=\r\n =?")
	}
	var words []string
	for rest := subject; rest != ""; {
		n := min(len(rest), 45)
		for n < len(rest) && !utf8.RuneStart(rest[n]) {
			n--
		}
		words = append(words, "=?utf-8?b?"+base64.StdEncoding.EncodeToString([]byte(rest[:n]))+"?=")
		rest = rest[n:]
	}
	return strings.Join(words, "\r\n ")
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// newVERPToken returns an unguessable token for one message's envelope
// sender (160 random bits).
func newVERPToken() string { return strings.ToLower(idEncoding.EncodeToString(randomBytes(20))) }

var verpToken = regexp.MustCompile(`^[a-z2-7]{32}$`)

// bounceAddress is the envelope sender of a message with token.
func (s *Service) bounceAddress(token string) string {
	return BounceLocal + "+" + token + "@" + s.opts.Domain
}

// Send errors.
var errNoDomain = capabilities.Errorf(capabilities.CodeUnsupported, "this server has no mail domain, so it cannot send mail")

// replyTarget is the message of the caller's mailbox a reply answers.
type replyTarget struct {
	ThreadID  int64  `bun:"thread_id"`
	ThreadPub string `bun:"thread_pub"`
	MessageID string `bun:"message_id"`
	Refs      string `bun:"refs"`
	Subject   string `bun:"subject"`
}

func (s *Service) replyTarget(ctx context.Context, b box, pub string) (replyTarget, error) {
	var r replyTarget
	err := s.store.Reader.NewRaw("SELECT m.thread_id, t.public_id AS thread_pub, m.message_id, m.refs, m.subject FROM ? AS m JOIN ? AS t ON t.id = m.thread_id WHERE m.? = ? AND m.public_id = ?",
		b.table("messages"), b.table("threads"), b.owned(), b.val, pub).Scan(ctx, &r)
	if errors.Is(err, sql.ErrNoRows) {
		return r, notFound("message", pub)
	}
	if err != nil {
		return r, fmt.Errorf("mail: look up the message replied to: %w", err)
	}
	return r, nil
}

// pauseRow is a user's outbound pause.
type pauseRow struct {
	Reason   string       `bun:"reason"`
	PausedAt time.Time    `bun:"paused_at"`
	LiftedAt sql.NullTime `bun:"lifted_at"`
}

// paused reports the user's pause in force, if any.
func (s *Service) paused(ctx context.Context, db bun.IDB, userID int64) (pauseRow, bool, error) {
	var p pauseRow
	err := db.NewRaw("SELECT reason, paused_at, lifted_at FROM mail_outbound_pauses WHERE user_id = ?", userID).Scan(ctx, &p)
	if errors.Is(err, sql.ErrNoRows) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("mail: read outbound pause: %w", err)
	}
	return p, !p.LiftedAt.Valid, nil
}

func pausedError(p pauseRow) error {
	why := "five of your messages bounced in one day"
	if p.Reason == "complaint" {
		why = "a recipient reported one of your messages as spam"
	}
	return capabilities.Errorf(capabilities.CodeConflict,
		"your outbound mail is paused since %s because %s; nothing was sent. Check your recipients, then ask an administrator to review and lift the pause",
		p.PausedAt.UTC().Format(time.RFC3339), why)
}

// send is mailSend: check, ask, count, store the sent copy and queue.
func (s *Service) send(ctx context.Context, call *capabilities.Call, in SendInput) (SendOutput, error) {
	if s.opts.Domain == "" || s.outbox == nil {
		return SendOutput{}, errNoDomain
	}
	from := s.Address(call.Caller.Username)
	if from == "" {
		return SendOutput{}, capabilities.Errorf(capabilities.CodeUnsupported, "your account has no mail address to send from")
	}
	d, err := checkDraft(from, in.To, in.Subject, in.Text, in.HTML)
	if err != nil {
		return SendOutput{}, err
	}
	o, err := s.owner(ctx, call.Caller)
	if err != nil {
		return SendOutput{}, err
	}
	b := userBox(o)
	var reply replyTarget
	if in.InReplyTo != "" {
		if reply, err = s.replyTarget(ctx, b, in.InReplyTo); err != nil {
			return SendOutput{}, err
		}
	}
	// Refuse a paused account before asking: the person is not asked to
	// confirm what cannot be sent.
	if p, on, err := s.paused(ctx, s.store.Reader, o.ID); err != nil {
		return SendOutput{}, err
	} else if on {
		return SendOutput{}, pausedError(p)
	}
	out := SendOutput{From: from, To: d.to}
	switch action, err := confirm(ctx, call, "Your agent asks to send this email from your address. Send it?", d); {
	case err != nil:
		return SendOutput{}, err
	case action == "decline":
		out.Status, out.Message = "declined", "The person declined: nothing was sent."
		return out, nil
	case action == "cancel":
		out.Status, out.Message = "cancelled", "The person dismissed the confirmation: nothing was sent."
		return out, nil
	}
	if s.meter != nil && s.opts.SendsPerDay > 0 {
		if err := s.meter.AllowClass(ctx, call.Caller, SendClass, s.opts.SendsPerDay); err != nil {
			if capabilities.CodeOf(err) == capabilities.CodeQuotaExceeded {
				return SendOutput{}, capabilities.Errorf(capabilities.CodeQuotaExceeded,
					"you have sent your limit of messages for today (quota %s: %d a UTC day, or your plan's mail_send limit); nothing was sent: try again tomorrow (UTC)", SendClass, s.opts.SendsPerDay)
			}
			return SendOutput{}, err
		}
	}
	now := s.now().UTC()
	msgID := strings.ToLower(idEncoding.EncodeToString(randomBytes(15))) + "@" + s.opts.Domain
	var refs []string
	if reply.MessageID != "" {
		refs = append(strings.Fields(reply.Refs), reply.MessageID)
		if len(refs) > 20 {
			refs = refs[len(refs)-20:]
		}
	}
	raw := compose(d, msgID, reply.MessageID, refs, now)
	p, err := Parse(raw)
	if err != nil {
		return SendOutput{}, fmt.Errorf("mail: read back the composed message: %w", err)
	}
	out.MessageID, out.OutboundID = newID("msg_"), newID("out_")
	key := deliveryKey("sent:" + out.MessageID)
	if err := s.store.Bucket.WriteAll(ctx, b.rawKey(key), raw, nil); err != nil {
		return SendOutput{}, fmt.Errorf("mail: store the sent message: %w", err)
	}
	token := newVERPToken()
	payload, err := json.Marshal(Outgoing{OutboundID: out.OutboundID, From: s.bounceAddress(token), To: d.to, Raw: raw})
	if err != nil {
		return SendOutput{}, err
	}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) (err error) {
		if p, on, err := s.paused(ctx, tx, o.ID); err != nil {
			return err
		} else if on {
			return pausedError(p)
		}
		threadID, created := reply.ThreadID, false
		if threadID == 0 {
			if threadID, created, err = s.threadFor(ctx, tx, b, p, now); err != nil {
				return err
			}
		}
		headers, _ := json.Marshal(p.Headers)
		var rowID int64
		err = tx.NewRaw(`INSERT INTO ? (public_id, ?, thread_id, folder, delivery_key, message_id, in_reply_to, refs, from_addr,
				to_addrs, cc_addrs, rcpt, subject, text_body, html_body, headers, auth_results, size_bytes, sent_at, received_at)
			VALUES (?, ?, ?, 'sent', ?, ?, ?, ?, ?, ?, '', ?, ?, ?, ?, ?, '', ?, ?, ?) RETURNING id`,
			b.table("messages"), b.owned(), out.MessageID, b.val, threadID, key, p.MessageID, p.InReplyTo,
			strings.Join(p.References, " "), p.From, strings.Join(p.To, ", "), from,
			p.Subject, p.Text, p.HTML, string(headers), len(raw), now, now).Scan(ctx, &rowID)
		if err != nil {
			return fmt.Errorf("mail: store the sent message: %w", err)
		}
		if !created { // a new thread was made counting this message
			if _, err := tx.NewRaw("UPDATE ? SET message_count = message_count + 1, last_message_at = ? WHERE id = ?",
				b.table("threads"), now, threadID).Exec(ctx); err != nil {
				return fmt.Errorf("mail: update thread: %w", err)
			}
		}
		if err := tx.NewRaw("SELECT public_id FROM ? WHERE id = ?", b.table("threads"), threadID).Scan(ctx, &out.ThreadID); err != nil {
			return fmt.Errorf("mail: read thread: %w", err)
		}
		if _, err := tx.NewRaw(`INSERT INTO mail_outbound (public_id, user_id, message_id, header_message_id, verp_token, rcpts, subject, state, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?)`,
			out.OutboundID, o.ID, rowID, msgID, token, strings.Join(d.to, ", "), d.subject, now, now).Exec(ctx); err != nil {
			return fmt.Errorf("mail: record the outbound message: %w", err)
		}
		return s.outbox.AddOwned(ctx, tx, OutboundTopic, o.ID, payload)
	})
	if err != nil {
		if err := s.store.Bucket.Delete(ctx, b.rawKey(key)); err != nil {
			s.log.Warn("mail: removing an unsent message's blob failed", "err", err)
		}
		return SendOutput{}, err
	}
	out.Status = "queued"
	out.Message = fmt.Sprintf("The person confirmed; the message to %s is queued for delivery from %s.", strings.Join(d.to, ", "), from)
	return out, nil
}

// OutboundHandler is the outbox handler of OutboundTopic: it hands the
// message to the sender and marks a user's message sent.
func (s *Service) OutboundHandler() func(ctx context.Context, payload []byte) error {
	return func(ctx context.Context, payload []byte) error {
		var m Outgoing
		if err := json.Unmarshal(payload, &m); err != nil {
			return fmt.Errorf("mail: decode outbound message: %w", err)
		}
		if s.sender == nil {
			return errors.New("mail: no sender is configured for outbound mail")
		}
		snd := s.sender()
		if snd == nil {
			return errors.New("mail: the configured mailer cannot send raw messages")
		}
		if err := snd.SendRaw(ctx, m.From, m.To, m.Raw); err != nil {
			if m.OutboundID != "" {
				s.setDetail(ctx, m.OutboundID, err)
			}
			return err
		}
		if m.OutboundID == "" {
			return nil
		}
		_, err := s.store.DB.NewRaw("UPDATE mail_outbound SET state = 'sent', detail = '', updated_at = ? WHERE public_id = ? AND state = 'queued'",
			s.now().UTC(), m.OutboundID).Exec(ctx)
		if err != nil {
			return fmt.Errorf("mail: mark the message sent: %w", err)
		}
		return nil
	}
}

func (s *Service) setDetail(ctx context.Context, outboundID string, sendErr error) {
	_, err := s.store.DB.NewRaw("UPDATE mail_outbound SET detail = ?, updated_at = ? WHERE public_id = ? AND state = 'queued'",
		clip("last attempt failed: "+sendErr.Error(), 300), s.now().UTC(), outboundID).Exec(ctx)
	if err != nil {
		s.log.Warn("mail: recording a send failure failed", "err", err)
	}
}
