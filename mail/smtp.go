package mail

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
)

// MaxRecipients bounds the recipients of one SMTP transaction.
const MaxRecipients = 50

// Defaults of the listener's connection bounds (Options).
const (
	DefaultMaxConnections      = 100
	DefaultMaxConnectionsPerIP = 10
	DefaultMaxSessionTime      = 15 * time.Minute
)

// SMTPServer returns the inbound SMTP server: it accepts mail for the
// mail domain's mailboxes only (unknown recipients are refused at RCPT
// with a permanent error), at most MaxMessageBytes per message, and offers
// STARTTLS when Options.TLS is set. Serve it with Serve.
func (s *Service) SMTPServer() *smtp.Server {
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &session{svc: s, conn: c, remote: c.Conn().RemoteAddr().String()}, nil
	}))
	srv.Domain = s.opts.Hostname
	srv.MaxMessageBytes = s.opts.MaxMessageBytes
	srv.MaxRecipients = MaxRecipients
	srv.MaxLineLength = 4000
	srv.ReadTimeout = 2 * time.Minute
	srv.WriteTimeout = time.Minute
	srv.TLSConfig = s.opts.TLS
	srv.ErrorLog = slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
	return srv
}

// Serve runs the SMTP listener on ln until ctx ends.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	srv := s.SMTPServer()
	errc := make(chan error, 1)
	ln = &limitListener{Listener: ln, total: s.opts.MaxConnections, perIP: s.opts.MaxConnectionsPerIP,
		lifetime: s.opts.MaxSessionTime, byIP: map[string]int{}}
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if errors.Is(err, smtp.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		<-errc
		return nil
	}
}

type session struct {
	svc    *Service
	conn   *smtp.Conn
	remote string
	from   string
	rcpts  []target
	// reports are the VERP tokens of report addresses (bounces+<token>@D)
	// among the recipients.
	reports []string
}

var (
	errNoMailbox = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "No such mailbox here"}
	errTooLarge  = &smtp.SMTPError{Code: 552, EnhancedCode: smtp.EnhancedCode{5, 3, 4}, Message: "Message too large"}
	errQuota     = &smtp.SMTPError{Code: 452, EnhancedCode: smtp.EnhancedCode{4, 2, 2}, Message: "Mailbox has received its daily limit of messages; try again later"}
	errMalformed = &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "Message could not be read as RFC 5322 mail"}
	errLongLine  = &smtp.SMTPError{Code: 500, EnhancedCode: smtp.EnhancedCode{5, 5, 2}, Message: "Line too long (RFC 5321 allows 1000 bytes)"}
	errTemporary = &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Temporary failure storing the message; try again later"}
)

func (ss *session) Reset()        { ss.from, ss.rcpts, ss.reports = "", nil, nil }
func (ss *session) Logout() error { return nil }

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	ss.from = headerText(from)
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if tok, ok, err := ss.svc.reportToken(ctx, to); err != nil {
		ss.svc.log.Warn("mail: resolving a recipient failed", "err", err)
		return errTemporary
	} else if ok {
		ss.reports = append(ss.reports, tok)
		return nil
	}
	t, err := ss.svc.resolve(ctx, to)
	if err != nil {
		if errors.Is(err, ErrNotOurs) {
			return errNoMailbox
		}
		ss.svc.log.Warn("mail: resolving a recipient failed", "err", err)
		return errTemporary
	}
	ss.rcpts = append(ss.rcpts, t)
	return nil
}

// Data stores the message for every recipient. A temporary failure for
// any of them answers 4xx: the sender retries the whole transaction, and
// the delivery ledger stores each recipient's copy once.
func (ss *session) Data(r io.Reader) error {
	// The message is read into a pooled buffer: nothing keeps its bytes
	// past Data (the blob write copies them, the parser copies what it
	// keeps), and a fresh buffer of ~100 KB grows through nine
	// allocations and copies per message.
	buf := dataBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledData {
			buf.Reset()
			dataBuffers.Put(buf)
		}
	}()
	return ss.data(r, buf)
}

// dataBuffers pools Data's buffers of at most maxPooledData bytes.
var dataBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledData = 1 << 20

func (ss *session) data(r io.Reader, buf *bytes.Buffer) error {
	if _, err := io.Copy(buf, r); err != nil {
		var se *smtp.SMTPError
		switch {
		case int64(buf.Len()) >= ss.svc.opts.MaxMessageBytes:
			return errTooLarge
		case errors.As(err, &se):
			return se
		case errors.Is(err, smtp.ErrTooLongLine):
			return errLongLine
		}
		ss.svc.log.Warn("mail: reading a message failed", "err", err)
		return errTemporary
	}
	if int64(buf.Len()) > ss.svc.opts.MaxMessageBytes {
		return errTooLarge
	}
	// Parse and check the sender's signatures once for all recipients:
	// per recipient, a message of MaxMessageBytes with MaxRecipients
	// recipients would cost fifty parses and fifty rounds of DKIM key
	// lookups.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A delivery report to a message's report address updates that
	// message; it is never stored in a mailbox.
	for _, tok := range ss.reports {
		if _, err := ss.svc.HandleReport(ctx, tok, buf.Bytes()); err != nil {
			ss.svc.log.Warn("mail: applying a delivery report failed", "err", err)
			return errTemporary
		}
	}
	if len(ss.rcpts) == 0 {
		return nil
	}
	parsed, err := Parse(buf.Bytes())
	if err != nil {
		return errMalformed
	}
	checked := ss.svc.authenticate(ctx, ss.authInput(buf.Bytes()))
	var first error
	for _, rcpt := range ss.rcpts {
		_, err := ss.svc.Deliver(ctx, Delivery{Recipient: rcpt.address, Raw: buf.Bytes(), parsed: &parsed, checked: &checked, rcpt: &rcpt})
		if err == nil {
			continue
		}
		var serr error
		switch {
		case errors.Is(err, ErrTooLarge):
			serr = errTooLarge
		case errors.Is(err, ErrMalformed):
			serr = errMalformed
		case errors.Is(err, ErrNotOurs):
			serr = errNoMailbox
		case errors.Is(err, ErrOverQuota):
			serr = errQuota
		default:
			ss.svc.log.Warn("mail: delivery failed", "err", err)
			serr = errTemporary
		}
		// A temporary failure wins: the retry is safe for every recipient.
		if first == nil || serr.(*smtp.SMTPError).Code/100 == 4 {
			first = serr
		}
	}
	// A delivery report without a VERP token (at postmaster@D, or a
	// user's address) is stored as addressed, and may also count against
	// the outbound message it names, under HandleUntokenedReport's rules.
	// Applying it again on a retry changes nothing (once per kind).
	if first == nil && isReport(buf.Bytes()) {
		if _, err := ss.svc.HandleUntokenedReport(ctx, buf.Bytes(), checked.results); err != nil {
			ss.svc.log.Warn("mail: applying a delivery report failed", "err", err)
			return errTemporary
		}
	}
	return first
}

// isReport is a cheap first look: does the header section name a
// multipart/report?
func isReport(raw []byte) bool {
	h := raw[:headerBytes(raw)]
	return bytes.Contains(bytes.ToLower(h), []byte("multipart/report"))
}

// authInput is the message raw with this session's envelope.
func (ss *session) authInput(raw []byte) AuthInput {
	in := AuthInput{Raw: raw, MailFrom: ss.from}
	if ss.conn != nil {
		in.Helo = ss.conn.Hostname()
	}
	if host, _, err := net.SplitHostPort(ss.remote); err == nil {
		in.RemoteIP = net.ParseIP(host)
	}
	return in
}

// limitListener bounds the connections served at once, in all and per
// client address, and how long each may last: without it a client opening
// connections (or trickling one byte per read timeout) holds memory and
// goroutines without end. A connection over a bound is answered 421 and
// closed at once.
type limitListener struct {
	net.Listener
	total, perIP int
	lifetime     time.Duration

	mu   sync.Mutex
	open int
	byIP map[string]int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := c.RemoteAddr().String()
		if host, _, err := net.SplitHostPort(ip); err == nil {
			ip = host
		}
		l.mu.Lock()
		ok := l.open < l.total && l.byIP[ip] < l.perIP
		if ok {
			l.open++
			l.byIP[ip]++
		}
		l.mu.Unlock()
		if !ok {
			go func() {
				_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				_, _ = io.WriteString(c, "421 4.7.0 Too many connections, try again later\r\n")
				_ = c.Close()
			}()
			continue
		}
		lc := &limitedConn{Conn: c}
		lc.release = func() {
			l.mu.Lock()
			l.open--
			if l.byIP[ip]--; l.byIP[ip] <= 0 {
				delete(l.byIP, ip)
			}
			l.mu.Unlock()
		}
		// The timer closes the network connection only: the server then
		// fails its read and closes lc, which releases the slot.
		lc.timer = time.AfterFunc(l.lifetime, func() { _ = c.Close() })
		return lc, nil
	}
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
	timer   *time.Timer
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.timer.Stop()
		c.release()
	})
	return err
}
