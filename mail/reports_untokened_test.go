package mail_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/smtp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// testAuth stands in for the sender checks: a message's X-Test-Auth
// header is what they answer (the tests' mail is not signed).
func testAuth(_ context.Context, in mail.AuthInput) (string, bool) {
	for _, line := range bytes.Split(in.Raw, []byte("\r\n")) {
		if len(line) == 0 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("X-Test-Auth: ")); ok {
			return string(v), false
		}
	}
	return "dmarc=none", false
}

var reportSeq atomic.Int64

// plainDSN is a DSN without a VERP token: from, the checks' answer, the
// failed recipient and the returned Message-ID.
func plainDSN(from, auth, to, failed, msgID string) []byte {
	return []byte(fmt.Sprintf("From: %s\r\nX-Test-Auth: %s\r\nTo: %s\r\nSubject: Undelivered Mail\r\nMessage-ID: <%d.dsn@mx.test>\r\nMIME-Version: 1.0\r\n"+
		"Content-Type: multipart/report; report-type=delivery-status; boundary=\"R\"\r\n\r\n"+
		"--R\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n"+
		"--R\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.test\r\n\r\nFinal-Recipient: rfc822; %s\r\nAction: failed\r\nStatus: 5.1.1\r\n\r\n"+
		"--R\r\nContent-Type: text/rfc822-headers\r\n\r\nMessage-ID: <%s>\r\nSubject: x\r\n\r\n--R--\r\n", from, auth, to, reportSeq.Add(1), failed, msgID))
}

// plainARF is a feedback report without a VERP token.
func plainARF(from, auth, to, rcpt, msgID string) []byte {
	return []byte(fmt.Sprintf("From: %s\r\nX-Test-Auth: %s\r\nTo: %s\r\nSubject: Abuse report\r\nMessage-ID: <%s.arf@isp.test>\r\nMIME-Version: 1.0\r\n"+
		"Content-Type: multipart/report; report-type=feedback-report; boundary=\"F\"\r\n\r\n"+
		"--F\r\nContent-Type: text/plain\r\n\r\nThis is an abuse report.\r\n"+
		"--F\r\nContent-Type: message/feedback-report\r\n\r\nFeedback-Type: abuse\r\nUser-Agent: isp/1.0\r\nVersion: 1\r\nOriginal-Rcpt-To: %s\r\n\r\n"+
		"--F\r\nContent-Type: message/rfc822\r\n\r\nMessage-ID: <%s>\r\nSubject: x\r\n\r\nbody\r\n--F--\r\n", from, auth, to, msgID, rcpt, msgID))
}

// TestMailUntokenedReports: a report that reaches postmaster@D (or a
// user's address) without a VERP token counts against the message it
// names only when it comes from a role address of the failed recipient's
// domain whose DMARC passed, names a recipient of that message, and the
// message is one this server sent. Forged ones change nothing and are
// still stored where they were addressed.
func TestMailUntokenedReports(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		se := newSendEnv(t, s, mail.Options{Authenticate: testAuth})
		alice, bob, admin := se.user("alice"), se.user("bob"), se.user("root", "admin")
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- se.svc.Serve(ctx, ln) }()
		defer func() { cancel(); <-done }()
		addr := ln.Addr().String()

		sendTo := func(c capabilities.Caller, to string) (mail.SendOutput, string) {
			t.Helper()
			out, err := se.send(c, &asker{action: "accept"}, map[string]any{"to": []string{to}, "subject": "s", "text": "t"})
			if err != nil {
				t.Fatal(err)
			}
			se.flush()
			p, err := mail.Parse(se.relay.sent[len(se.relay.sent)-1].Raw)
			if err != nil {
				t.Fatal(err)
			}
			return out, p.MessageID
		}
		state := func(c capabilities.Caller, out mail.SendOutput) string {
			t.Helper()
			return must[mail.OutboundState](se.env, c, "mailSendStatus", map[string]any{"outboundId": out.OutboundID}).State
		}
		deliver := func(rcpt string, raw []byte) {
			t.Helper()
			if err := smtp.SendMail(addr, nil, "", []string{rcpt}, raw); err != nil {
				t.Fatalf("report to %s: %v", rcpt, err)
			}
		}
		postmaster := "postmaster@" + domain
		const pass = "spf=pass smtp.mailfrom=mx.gone.test; dmarc=pass header.from=mx.gone.test"

		out, mid := sendTo(alice, "carol@gone.test")
		bobOut, bobMid := sendTo(bob, "dave@gone.test")

		// Forgeries, each missing one condition; none counts.
		forged := []struct{ why, rcpt string }{}
		for _, f := range []struct {
			why  string
			raw  []byte
			rcpt string
		}{
			{"from an address its users can have, DMARC passing", plainDSN("eve@gone.test", "dmarc=pass header.from=gone.test", postmaster, "carol@gone.test", mid), postmaster},
			{"from the right role address, DMARC not passing", plainDSN("MAILER-DAEMON@mx.gone.test", "spf=pass smtp.mailfrom=mx.gone.test; dmarc=fail header.from=mx.gone.test", postmaster, "carol@gone.test", mid), postmaster},
			{"from a role address of another domain", plainDSN("MAILER-DAEMON@attacker.test", "dmarc=pass header.from=attacker.test", postmaster, "carol@gone.test", mid), postmaster},
			{"naming an address the message was not sent to", plainDSN("MAILER-DAEMON@mx.gone.test", pass, postmaster, "dave@gone.test", mid), postmaster},
			{"with the results of another domain's check", plainDSN("MAILER-DAEMON@mx.gone.test", "dmarc=pass header.from=attacker.test", postmaster, "carol@gone.test", mid), postmaster},
			{"to a user's address, as the attacker", plainDSN("eve@attacker.test", "dmarc=pass header.from=attacker.test", "alice@"+domain, "carol@gone.test", mid), "alice@" + domain},
			{"naming a Message-ID this server never sent", plainDSN("MAILER-DAEMON@mx.gone.test", pass, postmaster, "carol@gone.test", "not-ours@"+domain), postmaster},
		} {
			deliver(f.rcpt, f.raw)
			forged = append(forged, struct{ why, rcpt string }{f.why, f.rcpt})
			if st := state(alice, out); st != "sent" {
				t.Fatalf("a forged report (%s) set alice's message %s", f.why, st)
			}
		}
		if n := count(t, s, "mail_outbound_events"); n != 0 {
			t.Fatalf("%d report events after forgeries only", n)
		}
		// The forged reports are stored where they were addressed.
		sys := must[mail.ListOutput](se.env, admin, "adminSystemMailList", map[string]any{"mailbox": "postmaster"})
		if len(sys.Messages) != len(forged)-1 {
			t.Errorf("postmaster holds %d messages, want %d", len(sys.Messages), len(forged)-1)
		}

		// The recipient domain's mail system, DMARC passing: a bounce.
		// Delivered twice, it counts once.
		for range 2 {
			deliver(postmaster, plainDSN("MAILER-DAEMON@mx.gone.test", pass, postmaster, "Carol@Gone.test", mid))
		}
		if st := state(alice, out); st != "bounced" {
			t.Fatalf("after the recipient domain's bounce: %s", st)
		}
		if n := count(t, s, "mail_outbound_events"); n != 1 {
			t.Fatalf("%d events, want 1", n)
		}
		if st := state(bob, bobOut); st != "sent" {
			t.Fatalf("bob's message: %s", st)
		}
		// A complaint from the domain's abuse address, to bob's own
		// address: bob's message is complained about, and bob paused.
		deliver("bob@"+domain, plainARF("abuse@gone.test", "dmarc=pass header.from=gone.test", "bob@"+domain, "dave@gone.test", bobMid))
		if st := state(bob, bobOut); st != "complained" {
			t.Fatalf("after the complaint: %s", st)
		}
		if _, err := se.send(bob, &asker{action: "accept"}, map[string]any{"to": []string{"x@gone.test"}, "subject": "s", "text": "t"}); code(err) != capabilities.CodeConflict {
			t.Fatalf("bob after a complaint: %v, want a pause", err)
		}
		if _, err := se.send(alice, &asker{action: "accept"}, map[string]any{"to": []string{"x@gone.test"}, "subject": "s", "text": "t"}); err != nil {
			t.Fatalf("alice after one bounce: %v", err)
		}
	})
}

// TestParseReportRecipients: the addresses a report is about.
func TestParseReportRecipients(t *testing.T) {
	r, ok := mail.ParseReport(plainDSN("MAILER-DAEMON@mx.test", "", "x@y", "<Bob@Example.COM>", "m@d"))
	if !ok || r.Kind != mail.ReportBounce || strings.Join(r.Recipients, ",") != "bob@example.com" || r.MessageID != "m@d" {
		t.Errorf("DSN: %+v %v", r, ok)
	}
	r, ok = mail.ParseReport(plainARF("abuse@isp.test", "", "x@y", "rfc822; carol@isp.test", "m@d"))
	if !ok || r.Kind != mail.ReportComplaint || strings.Join(r.Recipients, ",") != "carol@isp.test" {
		t.Errorf("ARF: %+v %v", r, ok)
	}
}
