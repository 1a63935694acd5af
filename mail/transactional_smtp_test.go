package mail

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/http/httptest"
	netmail "net/mail"
	"strings"
	"sync"
	"testing"
)

// fakeSMTP is a minimal SMTP server on loopback that records what it is
// sent. It offers STARTTLS when tlsConfig is set and AUTH PLAIN after TLS.
type fakeSMTP struct {
	ln        net.Listener
	tlsConfig *tls.Config
	user      string
	pass      string
	hang      bool // never greet (to test cancellation)
	implicit  bool // speak TLS (tlsConfig) from the first byte
	utf8      bool // offer SMTPUTF8

	mu       sync.Mutex
	received []fakeMail
	wg       sync.WaitGroup
}

type fakeMail struct {
	From, To string
	// MailParams are the MAIL command's parameters (BODY=8BITMIME ...).
	MailParams string
	Data       string
	TLS        bool
	AuthUser   string
}

func startFakeSMTP(t *testing.T, f *fakeSMTP) *fakeSMTP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.ln = ln
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Go(func() { f.session(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		f.wg.Wait()
	})
	return f
}

func (f *fakeSMTP) addr() string { return f.ln.Addr().String() }

func (f *fakeSMTP) mails() []fakeMail {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeMail(nil), f.received...)
}

func (f *fakeSMTP) session(c net.Conn) {
	defer c.Close()
	if f.hang {
		_, _ = io.Copy(io.Discard, c) // until the client gives up
		return
	}
	var cur fakeMail
	if f.implicit {
		tc := tls.Server(c, f.tlsConfig)
		if err := tc.Handshake(); err != nil {
			return
		}
		c, cur.TLS = tc, true
	}
	r, w := bufio.NewReader(c), io.Writer(c)
	say := func(s string) { _, _ = io.WriteString(w, s+"\r\n") }
	say("220 fake ESMTP")
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO":
			exts := []string{"250-fake", "250-8BITMIME"}
			if f.tlsConfig != nil && !cur.TLS && !f.implicit {
				exts = append(exts, "250-STARTTLS")
			}
			if f.user != "" && cur.TLS {
				exts = append(exts, "250-AUTH PLAIN XOAUTH2")
			}
			if f.utf8 {
				exts = append(exts, "250-SMTPUTF8")
			}
			exts = append(exts, "250 SIZE 1000000")
			say(strings.Join(exts, "\r\n"))
		case "STARTTLS":
			say("220 go ahead")
			tc := tls.Server(c, f.tlsConfig)
			if err := tc.Handshake(); err != nil {
				return
			}
			c, r, w = tc, bufio.NewReader(tc), tc
			cur = fakeMail{TLS: true}
		case "AUTH":
			mech, resp, _ := strings.Cut(arg, " ")
			raw, _ := base64.StdEncoding.DecodeString(resp)
			parts := strings.Split(string(raw), "\x00")
			if mech == "XOAUTH2" {
				// user=U^Aauth=Bearer TOKEN^A^A
				if string(raw) != "user="+f.user+"\x01auth=Bearer "+f.pass+"\x01\x01" {
					say("535 authentication failed")
					continue
				}
				cur.AuthUser = f.user + " (xoauth2)"
				say("235 ok")
				continue
			}
			if mech != "PLAIN" || len(parts) != 3 || parts[1] != f.user || parts[2] != f.pass {
				say("535 authentication failed")
				continue
			}
			cur.AuthUser = parts[1]
			say("235 ok")
		case "MAIL":
			cur.From = strings.Trim(strings.TrimPrefix(arg, "FROM:"), "<>")
			if i := strings.Index(cur.From, ">"); i >= 0 {
				cur.From, cur.MailParams = cur.From[:i], strings.TrimSpace(cur.From[i+1:])
			}
			say("250 ok")
		case "RCPT":
			cur.To = strings.Trim(strings.TrimPrefix(arg, "TO:"), "<>")
			say("250 ok")
		case "DATA":
			say("354 end with .")
			var data strings.Builder
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
				data.WriteString(strings.TrimPrefix(l, "."))
			}
			cur.Data = data.String()
			f.mu.Lock()
			f.received = append(f.received, cur)
			f.mu.Unlock()
			cur = fakeMail{TLS: cur.TLS, AuthUser: cur.AuthUser}
			say("250 queued")
		case "QUIT":
			say("221 bye")
			return
		default:
			say("502 unknown")
		}
	}
}

// testTLS returns a server config with httptest's certificate (valid for
// 127.0.0.1) and a client config that trusts it.
func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.StartTLS()
	t.Cleanup(srv.Close)
	server = &tls.Config{Certificates: srv.TLS.Certificates}
	client = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	return server, client
}

func TestSMTPMailerDelivers(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	msg := TransactionalMessage{
		To:      "Zoë <zoe@example.com>",
		Subject: "Verify your address — enclave",
		Text:    "Hello Zoë,\n.\nopen https://enclave.example/verify-email?token=" + strings.Repeat("x", 90) + "\n",
	}
	tests := []struct {
		name     string
		server   *fakeSMTP
		cfg      SMTPConfig
		wantTLS  bool
		wantUser string
	}{
		{"plain text to a loopback relay", &fakeSMTP{}, SMTPConfig{Security: SMTPPlaintext}, false, ""},
		{"starttls with auth", &fakeSMTP{tlsConfig: serverTLS, user: "mailer", pass: "s3cret"},
			SMTPConfig{Username: "mailer", Password: "s3cret", TLSConfig: clientTLS}, true, "mailer"},
		{"implicit tls with auth", &fakeSMTP{tlsConfig: serverTLS, implicit: true, user: "mailer", pass: "s3cret"},
			SMTPConfig{Username: "mailer", Password: "s3cret", Security: SMTPImplicitTLS, TLSConfig: clientTLS}, true, "mailer"},
		{"starttls with xoauth2", &fakeSMTP{tlsConfig: serverTLS, user: "mailer@example.com", pass: "ya29.token"},
			SMTPConfig{Username: "mailer@example.com", Password: "ya29.token", Auth: SMTPAuthXOAUTH2, TLSConfig: clientTLS}, true, "mailer@example.com (xoauth2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startFakeSMTP(t, tt.server)
			tt.cfg.Addr = srv.addr()
			tt.cfg.From = "Enclave <noreply@enclave.example>"
			m, err := NewSMTPMailer(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Send(context.Background(), msg); err != nil {
				t.Fatal(err)
			}
			got := srv.mails()
			if len(got) != 1 {
				t.Fatalf("%d messages received, want 1", len(got))
			}
			g := got[0]
			if g.From != "noreply@enclave.example" || g.To != "zoe@example.com" || g.TLS != tt.wantTLS || g.AuthUser != tt.wantUser {
				t.Fatalf("envelope %+v", g)
			}
			parsed, err := netmail.ReadMessage(strings.NewReader(g.Data))
			if err != nil {
				t.Fatal(err)
			}
			subject, err := new(mime.WordDecoder).DecodeHeader(parsed.Header.Get("Subject"))
			if err != nil || subject != msg.Subject {
				t.Fatalf("subject %q (%v), want %q", subject, err, msg.Subject)
			}
			// multipart/alternative: the text as sent, and an HTML part
			// with the link clickable.
			mt, params, err := mime.ParseMediaType(parsed.Header.Get("Content-Type"))
			if err != nil || mt != "multipart/alternative" {
				t.Fatalf("content type %q (%v), want multipart/alternative", parsed.Header.Get("Content-Type"), err)
			}
			parts := map[string]string{}
			mr := multipart.NewReader(parsed.Body, params["boundary"])
			for {
				p, err := mr.NextRawPart()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
				var r io.Reader = p
				if strings.EqualFold(p.Header.Get("Content-Transfer-Encoding"), "quoted-printable") {
					r = quotedprintable.NewReader(p)
				}
				b, err := io.ReadAll(r)
				if err != nil {
					t.Fatal(err)
				}
				parts[ct] = string(b)
			}
			if got, want := strings.ReplaceAll(parts["text/plain"], "\r\n", "\n"), msg.Text; got != want {
				t.Fatalf("text part %q, want %q", got, want)
			}
			if h := parts["text/html"]; !strings.Contains(h, `<a href="https://enclave.example/verify-email?token=`) || !strings.Contains(h, "Hello Zoë") {
				t.Fatalf("html part %q", h)
			}
			for _, k := range []string{"Date", "Message-Id", "From", "To"} {
				if parsed.Header.Get(k) == "" {
					t.Errorf("header %s missing", k)
				}
			}
		})
	}
}

func TestSMTPMailerRefuses(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	_ = serverTLS
	t.Run("server without STARTTLS", func(t *testing.T) {
		srv := startFakeSMTP(t, &fakeSMTP{})
		m, err := NewSMTPMailer(SMTPConfig{Addr: srv.addr(), From: "noreply@enclave.example", TLSConfig: clientTLS})
		if err != nil {
			t.Fatal(err)
		}
		err = m.Send(context.Background(), TransactionalMessage{To: "a@example.com", Subject: "s", Text: "t"})
		if err == nil || !strings.Contains(err.Error(), "STARTTLS") {
			t.Fatalf("error %v, want a refusal for missing STARTTLS", err)
		}
		if len(srv.mails()) != 0 {
			t.Fatal("mail was sent in plain text")
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		srv := startFakeSMTP(t, &fakeSMTP{tlsConfig: serverTLS})
		m, err := NewSMTPMailer(SMTPConfig{Addr: srv.addr(), From: "noreply@enclave.example"})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Send(context.Background(), TransactionalMessage{To: "a@example.com", Subject: "s", Text: "t"}); err == nil {
			t.Fatal("sent over TLS with an untrusted certificate")
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		srv := startFakeSMTP(t, &fakeSMTP{tlsConfig: serverTLS, user: "u", pass: "right"})
		m, _ := NewSMTPMailer(SMTPConfig{Addr: srv.addr(), From: "noreply@enclave.example", TLSConfig: clientTLS, Username: "u", Password: "wrong-secret"})
		err := m.Send(context.Background(), TransactionalMessage{To: "a@example.com", Subject: "s", Text: "t"})
		if err == nil || strings.Contains(err.Error(), "wrong-secret") {
			t.Fatalf("error %v: want a failure that does not echo the password", err)
		}
	})
	t.Run("cancelled context", func(t *testing.T) {
		srv := startFakeSMTP(t, &fakeSMTP{hang: true})
		m, _ := NewSMTPMailer(SMTPConfig{Addr: srv.addr(), From: "noreply@enclave.example", Security: SMTPPlaintext})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Send(ctx, TransactionalMessage{To: "a@example.com", Subject: "s", Text: "t"}) }()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
	})
	t.Run("invalid messages", func(t *testing.T) {
		m, _ := NewSMTPMailer(SMTPConfig{Addr: "127.0.0.1:1", From: "noreply@enclave.example", Security: SMTPPlaintext})
		for _, msg := range []TransactionalMessage{
			{To: "not an address", Subject: "s", Text: "t"},
			{To: "a@example.com\r\nBcc: b@example.com", Subject: "s", Text: "t"},
			{To: "a@example.com", Subject: "s\r\nBcc: b@example.com", Text: "t"},
			{To: "a@example.com", Subject: "s", Text: "  "},
		} {
			if err := m.Send(context.Background(), msg); !errors.Is(err, ErrInvalidMessage) {
				t.Errorf("%+v: error %v, want ErrInvalidMessage", msg, err)
			}
		}
	})
	t.Run("plain text to a remote host", func(t *testing.T) {
		if _, err := NewSMTPMailer(SMTPConfig{Addr: "smtp.example.com:25", From: "a@example.com", Security: SMTPPlaintext}); err == nil {
			t.Fatal("accepted plain-text SMTP to a remote host")
		}
	})
}

func TestParseSMTPURL(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want SMTPConfig
	}{
		{"smtp://u%40x:p%2Fw@mail.example.com", SMTPConfig{Addr: "mail.example.com:587", Username: "u@x", Password: "p/w", Security: SMTPStartTLS, Auth: SMTPAuthPlain}},
		{"smtp://mail.example.com:2525?tls=starttls", SMTPConfig{Addr: "mail.example.com:2525", Security: SMTPStartTLS, Auth: SMTPAuthPlain}},
		{"smtp://u:p@mail.example.com?tls=tls", SMTPConfig{Addr: "mail.example.com:465", Username: "u", Password: "p", Security: SMTPImplicitTLS, Auth: SMTPAuthPlain}},
		{"smtps://mail.example.com", SMTPConfig{Addr: "mail.example.com:465", Security: SMTPImplicitTLS, Auth: SMTPAuthPlain}},
		{"smtp://127.0.0.1:25?tls=none", SMTPConfig{Addr: "127.0.0.1:25", Security: SMTPPlaintext, Auth: SMTPAuthPlain}},
		{"smtp://me%40example.com:tok@smtp.gmail.com:587?auth=xoauth2", SMTPConfig{Addr: "smtp.gmail.com:587", Username: "me@example.com", Password: "tok", Security: SMTPStartTLS, Auth: SMTPAuthXOAUTH2}},
	} {
		got, err := ParseSMTPURL(tc.raw)
		if tc.want == (SMTPConfig{}) {
			if err == nil {
				t.Errorf("%s: accepted", tc.raw)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v", tc.raw, got, err, tc.want)
		}
	}
	for _, bad := range []string{"http://mail.example.com", "smtp://", "smtp://h?tls=maybe", "smtp://h?auth=login", "smtp://h?from=x"} {
		if _, err := ParseSMTPURL(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
