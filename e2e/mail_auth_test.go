package e2e

import (
	"context"
	"net"
	"net/smtp"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mail/mailauth"
)

// mailAuthDNS is an in-memory DNS of TXT records (the tests never ask the
// internet); any other name does not exist.
type mailAuthDNS map[string][]string

func (d mailAuthDNS) LookupTXT(_ context.Context, name string) ([]string, error) {
	if v, ok := d[strings.TrimSuffix(strings.ToLower(name), ".")]; ok {
		return v, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}
func (mailAuthDNS) LookupMX(_ context.Context, name string) ([]*net.MX, error) {
	return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}
func (mailAuthDNS) LookupIPAddr(_ context.Context, name string) ([]net.IPAddr, error) {
	return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}
func (mailAuthDNS) LookupAddr(_ context.Context, addr string) ([]string, error) {
	return nil, &net.DNSError{Err: "no such host", Name: addr, IsNotFound: true}
}

// A whole server with mailauth.Check over crafted SPF and DMARC records:
// mail from a domain whose SPF allows the client (127.0.0.1) lands in the
// inbox with spf=pass and dmarc=pass recorded; mail claiming a domain whose
// SPF does not allow it and whose DMARC policy is reject lands in
// quarantine, even though alice allowed that sender.
func TestMailAuthSPFAndDMARCOverSMTP(t *testing.T) {
	dns := mailAuthDNS{
		"good.outside.test":        {"v=spf1 ip4:127.0.0.0/8 -all"},
		"_dmarc.good.outside.test": {"v=DMARC1; p=reject"},
		"bank.outside.test":        {"v=spf1 ip4:192.0.2.0/24 -all"},
		"_dmarc.bank.outside.test": {"v=DMARC1; p=reject"},
	}
	opts := enclavetest.Options{Config: enclave.Config{Mail: mail.Options{Domain: mailPageDomain, SMTPListen: "127.0.0.1:0",
		Authenticate: mailauth.Check(mailauth.Options{Resolver: dns})}}}
	enclavetest.Each(t, opts, func(t *testing.T, s *enclavetest.Server) {
		alice := s.CreateUser(t, "alice")
		ac := alice.MCP(t)
		mustCall[mail.Rule](t, ac, "mailRuleSet", map[string]any{"sender": "@bank.outside.test", "action": "allow"})
		to := "alice@" + mailPageDomain
		send := func(from, id, subject string) {
			t.Helper()
			raw := "From: " + from + "\r\nTo: " + to + "\r\nSubject: " + subject + "\r\nMessage-ID: <" + id + ">\r\n\r\nHello.\r\n"
			if err := smtp.SendMail(s.SMTPAddr(), nil, from, []string{to}, []byte(raw)); err != nil {
				t.Fatalf("send %s: %v", id, err)
			}
		}
		send("news@good.outside.test", "good-1@outside.test", "Genuine")
		send("alerts@bank.outside.test", "forged-1@outside.test", "Forged")

		inbox := mustCall[mail.ListOutput](t, ac, "mailList", map[string]any{})
		if len(inbox.Messages) != 1 || inbox.Messages[0].SubjectUntrusted != "Genuine" {
			t.Fatalf("inbox: %+v", inbox.Messages)
		}
		m := mustCall[mail.Message](t, ac, "mailRead", map[string]any{"messageId": inbox.Messages[0].ID})
		if m.AuthResults != "spf=pass smtp.mailfrom=good.outside.test; dkim=none; dmarc=pass header.from=good.outside.test" {
			t.Errorf("genuine results: %q", m.AuthResults)
		}
		q := mustCall[mail.ListOutput](t, ac, "mailList", map[string]any{"folder": "quarantine"})
		if len(q.Messages) != 1 || q.Messages[0].SubjectUntrusted != "Forged" {
			t.Fatalf("quarantine: %+v", q.Messages)
		}
		m = mustCall[mail.Message](t, ac, "mailRead", map[string]any{"messageId": q.Messages[0].ID})
		if m.AuthResults != "spf=fail smtp.mailfrom=bank.outside.test; dkim=none; dmarc=fail header.from=bank.outside.test policy=reject" {
			t.Errorf("forged results: %q", m.AuthResults)
		}
	})
}
