package e2e

import (
	"fmt"
	"net/smtp"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/mail"
)

const mailDomain = "mail.enclave.test"

func mailServer(t *testing.T, fn func(t *testing.T, s *enclavetest.Server)) {
	enclavetest.Each(t, enclavetest.Options{Config: enclave.Config{Mail: mail.Options{Domain: mailDomain, SMTPListen: "127.0.0.1:0"}}}, fn)
}

func mailMessage(id, subject, body string) []byte {
	return []byte(fmt.Sprintf("From: Carol <carol@outside.test>\r\nTo: alice@%s\r\nSubject: %s\r\nMessage-ID: <%s>\r\nDate: Mon, 07 Dec 2026 03:00:00 +0000\r\n\r\n%s\r\n", mailDomain, subject, id, body))
}

func mustCall[T any](t *testing.T, c *enclavetest.Client, name string, args any) T {
	t.Helper()
	res, err := c.Call(name, args)
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %s", name, err, res.Text)
	}
	var out T
	if err := res.Decode(&out); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// A real SMTP client (net/smtp) delivers to the listener of a real
// server; the owner reads the message over MCP and nobody else can; a
// retried delivery is stored once; postmaster@ lands in the system
// mailbox admins read; an unknown recipient is refused at RCPT.
func TestMailInboundOverSMTPAndMCP(t *testing.T) {
	mailServer(t, func(t *testing.T, s *enclavetest.Server) {
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		root := s.CreateUser(t, "dana", capabilities.RoleAdmin)
		addr := s.SMTPAddr()
		if addr == "" {
			t.Fatal("no SMTP listener")
		}
		raw := mailMessage("hello-1@outside.test", "Hello from outside", "Meet at the harbour at six.")
		for range 2 { // the second is a sender's retry
			if err := smtp.SendMail(addr, nil, "carol@outside.test", []string{"alice+travel@" + mailDomain}, raw); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
		ac := alice.MCP(t)
		list := mustCall[mail.ListOutput](t, ac, "mailList", map[string]any{})
		if len(list.Messages) != 1 || list.Messages[0].SubjectUntrusted != "Hello from outside" || list.Address != "alice@"+mailDomain {
			t.Fatalf("alice's list: %+v", list)
		}
		id := list.Messages[0].ID
		msg := mustCall[mail.Message](t, ac, "mailRead", map[string]any{"messageId": id})
		if !strings.Contains(msg.Text, "harbour") || msg.To != "alice+travel@"+mailDomain {
			t.Errorf("alice reads: %+v", msg)
		}
		if found := mustCall[mail.SearchOutput](t, ac, "mailSearch", map[string]any{"query": "harbour"}); len(found.Messages) != 1 {
			t.Errorf("alice's search: %+v", found)
		}

		bc := bob.MCP(t)
		if res, err := bc.Call("mailRead", map[string]any{"messageId": id}); err != nil || !res.IsError {
			t.Errorf("bob read alice's message: %v %+v", err, res)
		}
		if l := mustCall[mail.ListOutput](t, bc, "mailList", map[string]any{}); len(l.Messages) != 0 {
			t.Errorf("bob's list: %+v", l)
		}
		if f := mustCall[mail.SearchOutput](t, bc, "mailSearch", map[string]any{"query": "harbour"}); len(f.Messages) != 0 {
			t.Errorf("bob's search: %+v", f)
		}
		if res, err := bc.Call("adminSystemMailList", map[string]any{"mailbox": "postmaster"}); err == nil && !res.IsError {
			t.Errorf("bob listed a system mailbox: %+v", res)
		}

		if err := smtp.SendMail(addr, nil, "mailer-daemon@outside.test", []string{"postmaster@" + mailDomain}, mailMessage("pm-1@outside.test", "Report", "postmaster report")); err != nil {
			t.Fatalf("send to postmaster: %v", err)
		}
		rc := root.MCP(t)
		sys := mustCall[mail.ListOutput](t, rc, "adminSystemMailList", map[string]any{"mailbox": "postmaster"})
		if len(sys.Messages) != 1 || sys.Messages[0].SubjectUntrusted != "Report" {
			t.Fatalf("postmaster mailbox: %+v", sys)
		}
		if m := mustCall[mail.Message](t, rc, "adminSystemMailGet", map[string]any{"mailbox": "postmaster", "messageId": sys.Messages[0].ID}); !strings.Contains(m.Text, "postmaster report") {
			t.Errorf("postmaster message: %+v", m)
		}
		if l := mustCall[mail.ListOutput](t, rc, "mailList", map[string]any{}); len(l.Messages) != 0 {
			t.Errorf("system mail in the admin's own mailbox: %+v", l)
		}

		c, err := smtp.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Mail("carol@outside.test"); err != nil {
			t.Fatal(err)
		}
		if err := c.Rcpt("nobody@" + mailDomain); err == nil || !strings.HasPrefix(err.Error(), "550") {
			t.Errorf("unknown recipient: %v, want 550 at RCPT", err)
		}
		if err := c.Rcpt("alice@elsewhere.test"); err == nil || !strings.HasPrefix(err.Error(), "550") {
			t.Errorf("another domain: %v, want 550 at RCPT", err)
		}
	})
}
