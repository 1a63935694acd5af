package mail

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"html"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	netmail "net/mail"
	"net/textproto"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// SMTPSecurity says how an SMTPMailer protects its connection.
type SMTPSecurity int

const (
	// SMTPStartTLS connects in plain text and upgrades with STARTTLS before
	// anything else is sent; a server that does not offer it is refused.
	// Usually port 587. The default.
	SMTPStartTLS SMTPSecurity = iota
	// SMTPImplicitTLS speaks TLS from the first byte. Usually port 465.
	SMTPImplicitTLS
	// SMTPPlaintext never uses TLS. Only for a relay on a loopback address;
	// NewSMTPMailer refuses it for any other host.
	SMTPPlaintext
)

// SMTPAuth names a SASL mechanism.
type SMTPAuth string

// The mechanisms SMTPMailer speaks.
const (
	SMTPAuthPlain   SMTPAuth = "plain"
	SMTPAuthXOAUTH2 SMTPAuth = "xoauth2"
)

// ParseSMTPURL reads the server, credentials and security of an SMTP URL:
//
//	smtp://USER:PASS@HOST:PORT?tls=starttls|tls|none&auth=plain|xoauth2
//
// tls defaults to starttls (port 587 when none is given; 465 for tls, 25
// for none); user and password are URL-encoded. The sender (From) is not
// part of the URL.
func ParseSMTPURL(raw string) (SMTPConfig, error) {
	var c SMTPConfig
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "smtp" && u.Scheme != "smtps") || u.Hostname() == "" || (u.Path != "" && u.Path != "/") {
		return c, errors.New("mail: smtp URL: want smtp://USER:PASS@HOST:PORT?tls=starttls|tls|none")
	}
	q := u.Query()
	tlsMode := q.Get("tls")
	if tlsMode == "" && u.Scheme == "smtps" {
		tlsMode = "tls"
	}
	port := u.Port()
	switch tlsMode {
	case "", "starttls":
		c.Security = SMTPStartTLS
		port = cmp.Or(port, "587")
	case "tls":
		c.Security = SMTPImplicitTLS
		port = cmp.Or(port, "465")
	case "none":
		c.Security = SMTPPlaintext
		port = cmp.Or(port, "25")
	default:
		return c, fmt.Errorf("mail: smtp URL: tls=%q: want starttls, tls or none", tlsMode)
	}
	switch auth := SMTPAuth(q.Get("auth")); auth {
	case "", SMTPAuthPlain, SMTPAuthXOAUTH2:
		c.Auth = cmp.Or(auth, SMTPAuthPlain)
	default:
		return c, fmt.Errorf("mail: smtp URL: auth=%q: want plain or xoauth2", auth)
	}
	for k := range q {
		if k != "tls" && k != "auth" {
			return c, fmt.Errorf("mail: smtp URL: unknown parameter %q", k)
		}
	}
	c.Addr = net.JoinHostPort(u.Hostname(), port)
	if u.User != nil {
		c.Username = u.User.Username()
		c.Password, _ = u.User.Password()
	}
	return c, nil
}

// SMTPConfig configures an SMTPMailer.
type SMTPConfig struct {
	// Addr is the server's host:port. Required.
	Addr string
	// From is the sender address, "noreply@example.com" or
	// "Example <noreply@example.com>". Required.
	From string
	// Username and Password, when Username is set, authenticate with AUTH
	// PLAIN (only ever over TLS or to a loopback relay).
	Username, Password string
	// Auth selects the SASL mechanism when Username is set: SMTPAuthPlain
	// (default) or SMTPAuthXOAUTH2, where Password is an OAuth 2 access
	// token (Google Workspace, Microsoft 365).
	Auth SMTPAuth
	// Security is how the connection is protected. Default SMTPStartTLS.
	Security SMTPSecurity
	// TLSConfig is used for STARTTLS and implicit TLS. Default: verify the
	// server's certificate against the system roots for Addr's host.
	TLSConfig *tls.Config
	// HelloName is the name sent in EHLO. Default "localhost". With
	// STARTTLS it is sent in the EHLO after the upgrade; the one before
	// it says "localhost".
	HelloName string
	// Timeout bounds one Send when its context has no earlier deadline.
	// Default 30 s.
	Timeout time.Duration
}

// SMTPMailer sends mail through an SMTP server, one connection per message.
type SMTPMailer struct {
	cfg  SMTPConfig
	host string
	from *netmail.Address
}

var _ Mailer = (*SMTPMailer)(nil)

// NewSMTPMailer checks cfg and returns a mailer. It does not connect.
func NewSMTPMailer(cfg SMTPConfig) (*SMTPMailer, error) {
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil || host == "" {
		return nil, fmt.Errorf("mail: smtp address %q: want host:port", cfg.Addr)
	}
	from, err := netmail.ParseAddress(cfg.From)
	if err != nil {
		return nil, fmt.Errorf("mail: smtp sender %q: %w", cfg.From, err)
	}
	switch cfg.Security {
	case SMTPStartTLS, SMTPImplicitTLS:
	case SMTPPlaintext:
		if !isLoopbackHost(host) {
			return nil, fmt.Errorf("mail: smtp to %s without TLS: plain text is allowed only to a loopback relay", host)
		}
	default:
		return nil, fmt.Errorf("mail: smtp security %d: unknown", cfg.Security)
	}
	if cfg.HelloName == "" {
		cfg.HelloName = "localhost"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.TLSConfig == nil {
		cfg.TLSConfig = &tls.Config{}
	}
	cfg.TLSConfig = cfg.TLSConfig.Clone()
	if cfg.TLSConfig.ServerName == "" {
		cfg.TLSConfig.ServerName = host
	}
	if cfg.TLSConfig.MinVersion < tls.VersionTLS12 {
		cfg.TLSConfig.MinVersion = tls.VersionTLS12
	}
	return &SMTPMailer{cfg: cfg, host: host, from: from}, nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Send delivers msg to the server as a multipart/alternative message with
// a plain-text part and an HTML part (TransactionalMessage.HTML, or one
// made from the text), both UTF-8 and quoted-printable. It fails when the
// context ends, the connection cannot be secured as configured, or the
// server refuses the message; the error never contains the password.
func (m *SMTPMailer) Send(ctx context.Context, msg TransactionalMessage) error {
	to, err := msg.validate()
	if err != nil {
		return err
	}
	raw, err := m.compose(msg, to)
	if err != nil {
		return err
	}
	return m.deliver(ctx, m.from.Address, []string{to.Address}, raw)
}

// compose writes msg as an RFC 5322 message from m's sender to to.
func (m *SMTPMailer) compose(msg TransactionalMessage, to *netmail.Address) ([]byte, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, part := range []struct{ typ, text string }{
		{"text/plain", strings.ReplaceAll(msg.Text, "\r\n", "\n")},
		{"text/html", strings.ReplaceAll(cmp.Or(msg.HTML, textToHTML(msg.Text)), "\r\n", "\n")},
	} {
		w, err := mw.CreatePart(textproto.MIMEHeader{
			"Content-Type":              {part.typ + "; charset=UTF-8"},
			"Content-Transfer-Encoding": {"quoted-printable"},
		})
		if err != nil {
			return nil, err
		}
		qp := quotedprintable.NewWriter(w)
		// Lines end in CRLF on the wire; quotedprintable keeps a CRLF
		// as a line break.
		if _, err := io.WriteString(qp, strings.ReplaceAll(part.text, "\n", "\r\n")); err != nil {
			return nil, err
		}
		if err := qp.Close(); err != nil {
			return nil, err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	_, domain, _ := strings.Cut(m.from.Address, "@")
	var b bytes.Buffer
	for _, h := range [][2]string{
		{"Date", time.Now().Format(time.RFC1123Z)},
		{"From", m.from.String()},
		{"To", to.String()},
		{"Subject", encodeHeaderText(msg.Subject)},
		{"Message-ID", "<" + hex.EncodeToString(id[:]) + "@" + cmp.Or(domain, "localhost") + ">"},
		{"Auto-Submitted", "auto-generated"},
		{"MIME-Version", "1.0"},
		{"Content-Type", "multipart/alternative; boundary=\"" + mw.Boundary() + "\""},
	} {
		writeHeader(&b, h[0], h[1])
	}
	b.WriteString("\r\n")
	b.Write(body.Bytes())
	return b.Bytes(), nil
}

// maxHeaderLine is the length a header line is folded to where a space
// allows (RFC 5322 2.1.1 recommends 78 octets; 998 is the hard limit).
const maxHeaderLine = 78

// writeHeader writes the header field name: value, folded at its spaces
// so that its lines stay within maxHeaderLine: a subject or a name people
// chose may be long, and an encoded-word is up to 75 octets (RFC 2047).
// A line never holds only white space.
func writeHeader(b *bytes.Buffer, name, value string) {
	b.WriteString(name + ":")
	line := len(name) + 1
	for _, w := range strings.Split(value, " ") {
		if w != "" && line+1+len(w) > maxHeaderLine {
			b.WriteString("\r\n")
			line = 0
		}
		b.WriteString(" " + w)
		line += 1 + len(w)
	}
	b.WriteString("\r\n")
}

// encodeHeaderText encodes s for an unstructured header field (Subject):
// as RFC 2047 encoded-words when it is not plain printable ASCII, or
// when plain text could not be folded (a word longer than a line) or
// would read as encoded-words ("=?").
func encodeHeaderText(s string) string {
	if enc := mime.QEncoding.Encode("UTF-8", s); enc != s {
		return enc
	}
	force := strings.Contains(s, "=?")
	for _, w := range strings.Split(s, " ") {
		force = force || len(w) > maxHeaderLine-2
	}
	if !force {
		return s
	}
	// s is ASCII here (mime left it as it was), so no character is
	// split between two encoded-words.
	const prefix, suffix, maxWord = "=?UTF-8?q?", "?=", 75
	var words []string
	var w strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		enc := string(c)
		switch {
		case c == ' ':
			enc = "_"
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("!*+-/", c) >= 0:
		default:
			enc = fmt.Sprintf("=%02X", c)
		}
		if len(prefix)+w.Len()+len(enc)+len(suffix) > maxWord {
			words = append(words, prefix+w.String()+suffix)
			w.Reset()
		}
		w.WriteString(enc)
	}
	if w.Len() > 0 {
		words = append(words, prefix+w.String()+suffix)
	}
	return strings.Join(words, " ")
}

// deliver hands raw to the server from the envelope sender from to the
// envelope recipients to, on one connection secured and authenticated
// as configured, which closes when ctx (bounded by the timeout) ends.
func (m *SMTPMailer) deliver(ctx context.Context, from string, to []string, raw []byte) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	c, err := m.dial(ctx)
	if err != nil {
		return m.smtpError(ctx, err)
	}
	defer c.Close()
	// SMTPUTF8 whenever the server offers it, as before (go-mail): an
	// internationalized address in the envelope (SendRaw's come from the
	// mail domain) is refused without it.
	var opts smtp.MailOptions
	opts.UTF8, _ = c.Extension("SMTPUTF8")
	if err := c.Mail(from, &opts); err != nil {
		return m.smtpError(ctx, err)
	}
	for _, rcpt := range to {
		if err := c.Rcpt(rcpt, nil); err != nil {
			return m.smtpError(ctx, err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return m.smtpError(ctx, err)
	}
	if _, err := w.Write(raw); err != nil {
		_ = w.Close()
		return m.smtpError(ctx, err)
	}
	if err := w.Close(); err != nil {
		return m.smtpError(ctx, err)
	}
	_ = c.Quit()
	return nil
}

// dial connects to the server (emersion/go-smtp's client), secures the
// connection as configured (a server without STARTTLS is refused unless
// plain text was asked for), greets it and authenticates. The connection
// closes when ctx ends, which unblocks any read or write.
func (m *SMTPMailer) dial(ctx context.Context) (*smtp.Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", m.cfg.Addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	tlsConfig := m.cfg.TLSConfig
	var c *smtp.Client
	switch m.cfg.Security {
	case SMTPImplicitTLS:
		c = smtp.NewClient(tls.Client(conn, tlsConfig))
	case SMTPPlaintext:
		c = smtp.NewClient(conn)
	default:
		if c, err = smtp.NewClientStartTLS(conn, tlsConfig); err != nil {
			stop()
			_ = conn.Close()
			return nil, err
		}
	}
	fail := func(err error) (*smtp.Client, error) {
		_ = c.Close()
		return nil, err
	}
	if err := c.Hello(m.cfg.HelloName); err != nil {
		return fail(err)
	}
	if m.cfg.Username != "" {
		var a sasl.Client
		if m.cfg.Auth == SMTPAuthXOAUTH2 {
			a = xoauth2{user: m.cfg.Username, token: m.cfg.Password}
		} else {
			// PLAIN only ever over TLS or to a loopback relay
			// (NewSMTPMailer checks).
			a = sasl.NewPlainClient("", m.cfg.Username, m.cfg.Password)
		}
		if err := c.Auth(a); err != nil {
			return fail(err)
		}
	}
	return c, nil
}

// xoauth2 is the XOAUTH2 SASL mechanism (Google Workspace, Microsoft
// 365): the user and an OAuth 2 access token in the initial response.
type xoauth2 struct{ user, token string }

func (x xoauth2) Start() (string, []byte, error) {
	return "XOAUTH2", []byte("user=" + x.user + "\x01auth=Bearer " + x.token + "\x01\x01"), nil
}

// Next answers the server's error challenge (a JSON status) with an
// empty response, after which the server fails the exchange.
func (x xoauth2) Next([]byte) ([]byte, error) { return []byte{}, nil }

var mailLinkPattern = regexp.MustCompile(`https?://[^\s<>"]+`)

// textToHTML renders a plain-text mail as simple HTML: paragraphs, line
// breaks and clickable links, everything escaped.
func textToHTML(text string) string {
	var b strings.Builder
	b.WriteString("<!doctype html><html><body style=\"font-family:sans-serif;line-height:1.5\">")
	for _, para := range strings.Split(strings.ReplaceAll(strings.TrimSpace(text), "\r\n", "\n"), "\n\n") {
		b.WriteString("<p>")
		for i, line := range strings.Split(para, "\n") {
			if i > 0 {
				b.WriteString("<br>")
			}
			last := 0
			for _, loc := range mailLinkPattern.FindAllStringIndex(line, -1) {
				b.WriteString(html.EscapeString(line[last:loc[0]]))
				u := html.EscapeString(line[loc[0]:loc[1]])
				b.WriteString(`<a href="` + u + `">` + u + `</a>`)
				last = loc[1]
			}
			b.WriteString(html.EscapeString(line[last:]))
		}
		b.WriteString("</p>")
	}
	b.WriteString("</body></html>")
	return b.String()
}
