package web

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/smtp"
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
	from *mail.Address
}

var _ Mailer = (*SMTPMailer)(nil)

// NewSMTPMailer checks cfg and returns a mailer. It does not connect.
func NewSMTPMailer(cfg SMTPConfig) (*SMTPMailer, error) {
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil || host == "" {
		return nil, fmt.Errorf("web: smtp address %q: want host:port", cfg.Addr)
	}
	from, err := mail.ParseAddress(cfg.From)
	if err != nil {
		return nil, fmt.Errorf("web: smtp sender %q: %w", cfg.From, err)
	}
	switch cfg.Security {
	case SMTPStartTLS, SMTPImplicitTLS:
	case SMTPPlaintext:
		if !isLoopbackHost(host) {
			return nil, fmt.Errorf("web: smtp to %s without TLS: plain text is allowed only to a loopback relay", host)
		}
	default:
		return nil, fmt.Errorf("web: smtp security %d: unknown", cfg.Security)
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

// Send delivers msg to the server. It fails when the context ends, the
// connection cannot be secured as configured, or the server refuses the
// message; the error never contains the password.
func (m *SMTPMailer) Send(ctx context.Context, msg Message) (err error) {
	to, err := msg.validate()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()

	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", m.cfg.Addr)
	if err != nil {
		return fmt.Errorf("web: smtp connect: %w", err)
	}
	// Close the connection when ctx ends, which unblocks any read or write.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer func() {
		if !stop() && err != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
	}()
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if m.cfg.Security == SMTPImplicitTLS {
		tc := tls.Client(conn, m.cfg.TLSConfig)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("web: smtp tls: %w", err)
		}
		conn = tc
	}
	c, err := smtp.NewClient(conn, m.host)
	if err != nil {
		return fmt.Errorf("web: smtp greeting: %w", err)
	}
	defer c.Close()
	if err := c.Hello(m.cfg.HelloName); err != nil {
		return fmt.Errorf("web: smtp hello: %w", err)
	}
	if m.cfg.Security == SMTPStartTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return errors.New("web: smtp: the server does not offer STARTTLS")
		}
		if err := c.StartTLS(m.cfg.TLSConfig); err != nil {
			return fmt.Errorf("web: smtp starttls: %w", err)
		}
	}
	if m.cfg.Username != "" {
		if ok, _ := c.Extension("AUTH"); !ok {
			return errors.New("web: smtp: the server does not offer AUTH")
		}
		if err := c.Auth(smtp.PlainAuth("", m.cfg.Username, m.cfg.Password, m.host)); err != nil {
			return fmt.Errorf("web: smtp auth: %w", err)
		}
	}
	if err := c.Mail(m.from.Address); err != nil {
		return fmt.Errorf("web: smtp mail from: %w", err)
	}
	if err := c.Rcpt(to.Address); err != nil {
		return fmt.Errorf("web: smtp rcpt to: %w", err)
	}
	wc, err := c.Data()
	if err != nil {
		return fmt.Errorf("web: smtp data: %w", err)
	}
	if _, err := wc.Write(compose(m.from, to, msg, time.Now())); err != nil {
		return fmt.Errorf("web: smtp write message: %w", err)
	}
	if err := wc.Close(); err != nil {
		return fmt.Errorf("web: smtp end of data: %w", err)
	}
	if err := c.Quit(); err != nil {
		return fmt.Errorf("web: smtp quit: %w", err)
	}
	return nil
}
