package mail

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"html"
	"net"
	netmail "net/mail"
	"regexp"
	"strconv"
	"strings"

	gomail "github.com/wneessen/go-mail"
	"net/url"
	"time"
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
	// HelloName is the name sent in EHLO. Default "localhost".
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

// Send delivers msg to the server (through github.com/wneessen/go-mail),
// as a multipart/alternative message with a plain-text part and an HTML
// part (TransactionalMessage.HTML, or one made from the text). It fails when the
// context ends, the connection cannot be secured as configured, or the
// server refuses the message; the error never contains the password.
func (m *SMTPMailer) Send(ctx context.Context, msg TransactionalMessage) (err error) {
	to, err := msg.validate()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()

	gm := gomail.NewMsg(gomail.WithCharset(gomail.CharsetUTF8), gomail.WithEncoding(gomail.EncodingQP))
	if err := gm.From(m.from.String()); err != nil {
		return fmt.Errorf("%w: sender: %v", ErrInvalidMessage, err)
	}
	if err := gm.To(to.String()); err != nil {
		return fmt.Errorf("%w: recipient %q", ErrInvalidMessage, msg.To)
	}
	gm.Subject(msg.Subject)
	gm.SetDate()
	gm.SetMessageID()
	gm.SetGenHeader("Auto-Submitted", "auto-generated")
	gm.SetBodyString(gomail.TypeTextPlain, strings.ReplaceAll(msg.Text, "\r\n", "\n"))
	gm.AddAlternativeString(gomail.TypeTextHTML, cmp.Or(msg.HTML, textToHTML(msg.Text)))

	c, err := m.client(ctx)
	if err != nil {
		return err
	}
	if err := c.DialAndSendWithContext(ctx, gm); err != nil {
		if m.cfg.Password != "" {
			err = errors.New(strings.ReplaceAll(err.Error(), m.cfg.Password, "[redacted]"))
		}
		if cause := context.Cause(ctx); cause != nil {
			return fmt.Errorf("mail: smtp: %w (%w)", err, cause)
		}
		return fmt.Errorf("mail: smtp: %w", err)
	}
	return nil
}

// client is a go-mail client for the server, secured and authenticated as
// configured; a connection it dials closes when ctx ends.
func (m *SMTPMailer) client(ctx context.Context) (*gomail.Client, error) {
	host, portText, _ := net.SplitHostPort(m.cfg.Addr)
	port, _ := strconv.Atoi(portText)
	opts := []gomail.Option{
		gomail.WithPort(port),
		gomail.WithHELO(m.cfg.HelloName),
		gomail.WithTimeout(m.cfg.Timeout),
		gomail.WithoutNoop(),
		gomail.WithoutRset(), // one message per connection
		// Close the connection when ctx ends, which unblocks any read or
		// write (go-mail checks the context only between steps).
		gomail.WithDialContextFunc(func(dctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(dctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Send's context, not the dial's (which go-mail ends once
			// connected).
			context.AfterFunc(ctx, func() { _ = conn.Close() })
			return conn, nil
		}),
	}
	tlsConfig := m.cfg.TLSConfig
	if tlsConfig == nil {
		tlsConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	} else if tlsConfig.ServerName == "" {
		tlsConfig = tlsConfig.Clone()
		tlsConfig.ServerName = host
	}
	opts = append(opts, gomail.WithTLSConfig(tlsConfig))
	switch m.cfg.Security {
	case SMTPImplicitTLS:
		opts = append(opts, gomail.WithSSL())
	case SMTPPlaintext:
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	default:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	}
	if m.cfg.Username != "" {
		mech := gomail.SMTPAuthPlain
		if m.cfg.Security == SMTPPlaintext {
			// Only ever to a loopback relay (NewSMTPMailer checks).
			mech = gomail.SMTPAuthPlainNoEnc
		}
		if m.cfg.Auth == SMTPAuthXOAUTH2 {
			mech = gomail.SMTPAuthXOAUTH2
		}
		opts = append(opts, gomail.WithSMTPAuth(mech), gomail.WithUsername(m.cfg.Username), gomail.WithPassword(m.cfg.Password))
	}
	c, err := gomail.NewClient(host, opts...)
	if err != nil {
		return nil, fmt.Errorf("mail: smtp: %w", err)
	}
	return c, nil
}

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
