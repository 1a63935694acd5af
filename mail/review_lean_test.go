package mail

import (
	"context"
	"io"
	"mime"
	"mime/multipart"
	netmail "net/mail"
	"strings"
	"testing"
)

// Attacker review of the go-smtp client (#28).

// sendOne sends msg through a plain-text mailer to srv and returns the
// one message srv received.
func sendOne(t *testing.T, srv *fakeSMTP, msg TransactionalMessage) fakeMail {
	t.Helper()
	m, err := NewSMTPMailer(SMTPConfig{Addr: srv.addr(), From: "Enclave <noreply@enclave.example>", Security: SMTPPlaintext})
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
	return got[0]
}

// headerBlock is the header of a received message, one entry per line as
// written (folded lines are separate entries).
func headerBlock(t *testing.T, data string) []string {
	t.Helper()
	head, _, ok := strings.Cut(data, "\r\n\r\n")
	if !ok {
		t.Fatalf("no end of header in %q", data)
	}
	return strings.Split(head, "\r\n")
}

// A server offering SMTPUTF8 is asked for it, as go-mail did, so that
// outbound mail to or from an internationalized address (the envelope of
// SendRaw is the mail domain's) is not refused for lack of it.
func TestReviewSMTPUTF8WhenOffered(t *testing.T) {
	srv := startFakeSMTP(t, &fakeSMTP{utf8: true})
	m, err := NewSMTPMailer(SMTPConfig{Addr: srv.addr(), From: "noreply@enclave.example", Security: SMTPPlaintext})
	if err != nil {
		t.Fatal(err)
	}
	raw := []byte("From: bob@example.com\r\nTo: zoë@exämple.com\r\nSubject: hi\r\n\r\nhello\r\n")
	if err := m.SendRaw(context.Background(), "bob@example.com", []string{"zoë@exämple.com"}, raw); err != nil {
		t.Fatal(err)
	}
	got := srv.mails()
	if len(got) != 1 {
		t.Fatalf("%d messages received, want 1", len(got))
	}
	if !strings.Contains(got[0].MailParams, "SMTPUTF8") || got[0].To != "zoë@exämple.com" {
		t.Fatalf("MAIL parameters %q, recipient %q: want SMTPUTF8 asked for", got[0].MailParams, got[0].To)
	}

	// An account's address may be internationalized
	// (accounts.NormalizeEmail takes what net/mail parses).
	g := sendOne(t, startFakeSMTP(t, &fakeSMTP{utf8: true}), TransactionalMessage{To: "zoë@exämple.com", Subject: "s", Text: "t"})
	if !strings.Contains(g.MailParams, "SMTPUTF8") || g.To != "zoë@exämple.com" {
		t.Fatalf("MAIL parameters %q, recipient %q: want SMTPUTF8 asked for", g.MailParams, g.To)
	}

	// A server that does not offer it is not sent the parameter.
	plain := startFakeSMTP(t, &fakeSMTP{})
	g = sendOne(t, plain, TransactionalMessage{To: "a@example.com", Subject: "s", Text: "t"})
	if strings.Contains(g.MailParams, "SMTPUTF8") {
		t.Fatalf("MAIL parameters %q: SMTPUTF8 to a server that does not offer it", g.MailParams)
	}
}

// Header lines stay within RFC 5322's limits (998 octets, and 78 where
// there is a place to fold) however long the subject or the recipient's
// name is: an invitation's subject holds the inviter's name and the
// workspace's, both chosen by people. The subject still reads back as
// sent.
func TestReviewLongHeadersAreFolded(t *testing.T) {
	srv := startFakeSMTP(t, &fakeSMTP{})
	for _, tc := range []struct {
		name, to, subject string
		foldable          bool
	}{
		{"non-ASCII subject", "a@example.com", strings.Repeat("Zoë’s «workspace» ", 60), true},
		{"ASCII subject with spaces", "a@example.com", strings.Repeat("Alice invites you to a workspace ", 40), true},
		{"ASCII subject without spaces", "a@example.com", strings.Repeat("x", 1500), false},
		{"long non-ASCII name", strings.Repeat("Zoë ", 200) + "<zoe@example.com>", "s", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(srv.mails())
			m, err := NewSMTPMailer(SMTPConfig{Addr: srv.addr(), From: "noreply@enclave.example", Security: SMTPPlaintext})
			if err != nil {
				t.Fatal(err)
			}
			subject := strings.TrimSpace(tc.subject)
			if err := m.Send(context.Background(), TransactionalMessage{To: tc.to, Subject: subject, Text: "t"}); err != nil {
				t.Fatal(err)
			}
			got := srv.mails()[before]
			for _, l := range headerBlock(t, got.Data) {
				if len(l) > 998 || (tc.foldable && len(l) > 78) {
					t.Fatalf("header line of %d octets: %.120q…", len(l), l)
				}
			}
			parsed, err := netmail.ReadMessage(strings.NewReader(got.Data))
			if err != nil {
				t.Fatal(err)
			}
			if s, err := new(mime.WordDecoder).DecodeHeader(parsed.Header.Get("Subject")); err != nil || s != subject {
				t.Fatalf("subject reads back as %.80q (%v), want %.80q", s, err, subject)
			}
			to, err := parsed.Header.AddressList("To")
			want, _ := netmail.ParseAddress(tc.to)
			if err != nil || len(to) != 1 || to[0].Address != want.Address || to[0].Name != want.Name {
				t.Fatalf("To reads back as %v (%v), want %v", to, err, want)
			}
		})
	}
}

// Neither the subject nor the recipient's name can add a header or end
// the header early, whatever characters they hold; the envelope is the
// recipient's address alone, and a message of lines starting with a dot
// arrives whole.
func TestReviewHeaderInjection(t *testing.T) {
	srv := startFakeSMTP(t, &fakeSMTP{})
	for _, to := range []string{
		`"Eve\" <x@evil.example>, Bcc: y" <a@example.com>`,
		"=?UTF-8?q?Eve=0D=0ABcc:_y@evil.example?= <a@example.com>",
		"Zoë\u2028Bcc: y@evil.example <a@example.com>",
	} {
		before := len(srv.mails())
		m, _ := NewSMTPMailer(SMTPConfig{Addr: srv.addr(), From: "noreply@enclave.example", Security: SMTPPlaintext})
		msg := TransactionalMessage{To: to, Subject: "x\u0085Bcc: y@evil.example\u2028\tz", Text: ".\n..\n.x\n"}
		if err := m.Send(context.Background(), msg); err != nil {
			continue // refused: fine
		}
		got := srv.mails()[before]
		if got.To != "a@example.com" {
			t.Fatalf("envelope recipient %q", got.To)
		}
		parsed, err := netmail.ReadMessage(strings.NewReader(got.Data))
		if err != nil {
			t.Fatal(err)
		}
		if len(parsed.Header["Bcc"]) != 0 || len(parsed.Header["To"]) != 1 || len(parsed.Header["Subject"]) != 1 {
			t.Fatalf("headers %v", parsed.Header)
		}
		list, err := parsed.Header.AddressList("To")
		if err != nil || len(list) != 1 || list[0].Address != "a@example.com" {
			t.Fatalf("To %v (%v)", list, err)
		}
		if !strings.Contains(got.Data, "\r\n=2E\r\n") && !strings.Contains(got.Data, "\r\n.\r\n") {
			t.Fatalf("the body's lone dot line was lost: %q", got.Data)
		}
	}
}

// Every message gets its own Message-ID.
func TestReviewMessageIDsAreUnique(t *testing.T) {
	srv := startFakeSMTP(t, &fakeSMTP{})
	seen := map[string]bool{}
	for range 5 {
		before := len(srv.mails())
		m, _ := NewSMTPMailer(SMTPConfig{Addr: srv.addr(), From: "noreply@enclave.example", Security: SMTPPlaintext})
		if err := m.Send(context.Background(), TransactionalMessage{To: "a@example.com", Subject: "s", Text: "t"}); err != nil {
			t.Fatal(err)
		}
		parsed, err := netmail.ReadMessage(strings.NewReader(srv.mails()[before].Data))
		if err != nil {
			t.Fatal(err)
		}
		id := parsed.Header.Get("Message-Id")
		if id == "" || seen[id] || parsed.Header.Get("Date") == "" {
			t.Fatalf("Message-ID %q (seen before: %v), Date %q", id, seen[id], parsed.Header.Get("Date"))
		}
		seen[id] = true
	}
}

// Implicit TLS verifies the server's certificate like STARTTLS does:
// nothing (no AUTH, no message) goes to a server it does not trust.
func TestReviewImplicitTLSVerifiesCertificate(t *testing.T) {
	serverTLS, _ := testTLS(t)
	srv := startFakeSMTP(t, &fakeSMTP{tlsConfig: serverTLS, implicit: true, user: "u", pass: "p"})
	m, err := NewSMTPMailer(SMTPConfig{Addr: srv.addr(), From: "noreply@enclave.example", Security: SMTPImplicitTLS, Username: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(context.Background(), TransactionalMessage{To: "a@example.com", Subject: "s", Text: "t"}); err == nil || len(srv.mails()) != 0 {
		t.Fatalf("sent over implicit TLS to an untrusted certificate (%v)", err)
	}
}

// An HTML part given with CRLF line ends keeps its lines: each CRLF is
// one line break on the wire, not two (which a <pre> would show).
func TestReviewHTMLLineBreaks(t *testing.T) {
	srv := startFakeSMTP(t, &fakeSMTP{})
	html := "<pre>one\r\ntwo\nthree</pre>"
	g := sendOne(t, srv, TransactionalMessage{To: "a@example.com", Subject: "s", Text: "one\r\ntwo\nthree", HTML: html})
	parsed, err := netmail.ReadMessage(strings.NewReader(g.Data))
	if err != nil {
		t.Fatal(err)
	}
	_, params, _ := mime.ParseMediaType(parsed.Header.Get("Content-Type"))
	mr := multipart.NewReader(parsed.Body, params["boundary"])
	for {
		p, err := mr.NextPart() // decodes quoted-printable
		if err != nil {
			break
		}
		b, _ := io.ReadAll(p)
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		want := "one\r\ntwo\r\nthree"
		if ct == "text/html" {
			want = "<pre>one\r\ntwo\r\nthree</pre>"
		}
		if string(b) != want {
			t.Errorf("%s part %q, want %q", ct, b, want)
		}
	}
}
