package e2e

import (
	"net/smtp"
	"strings"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/web"
)

// alice's agent sends mail over MCP: she is asked to confirm the exact
// message (elicitation), and it reaches a real SMTP server standing in for
// the outside world from alice@D with a VERP envelope sender; a declined
// message is never sent. Five real DSNs, delivered by SMTP to the
// server's listener, pause her outbound mail; a send is then refused with
// the reason; an admin lifts the pause. bob can neither read her delivery
// state nor count a bounce against her with a made-up report address.
func TestMailSendJourney(t *testing.T) {
	outside := startOutsideMail(t)
	relay, err := web.NewSMTPMailer(web.SMTPConfig{Addr: outside.addr, From: "noreply@" + mailDomain, Security: web.SMTPPlaintext})
	if err != nil {
		t.Fatal(err)
	}
	cfg := enclave.Config{Mail: mail.Options{Domain: mailDomain, SMTPListen: "127.0.0.1:0"}, Mailer: relay}
	enclavetest.Each(t, enclavetest.Options{Config: cfg}, func(t *testing.T, s *enclavetest.Server) {
		before := len(outside.userMail())
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		root := s.CreateUser(t, "dana", capabilities.RoleAdmin)
		accept := &mailConfirmer{action: mcpgo.ElicitationResponseActionAccept}
		agent := mailAgent(t, s.URL, alice.Token(t), accept)

		text, out, isErr := mailSendCall(t, agent, map[string]any{"to": []string{"carol@outside.test"}, "subject": "Harbour at six", "text": "See you at the harbour at six."})
		if isErr || out["status"] != "queued" {
			t.Fatalf("mailSend: %s %v", text, out)
		}
		if len(accept.shown) != 1 || !strings.Contains(accept.shown[0], "To: carol@outside.test") || !strings.Contains(accept.shown[0], "See you at the harbour at six.") {
			t.Fatalf("alice was shown %q", accept.shown)
		}
		got := outside.waitUserMail(t, before+1)[before]
		if !strings.HasPrefix(got.From, "bounces+") || !strings.HasSuffix(got.From, "@"+mailDomain) || len(got.To) != 1 || got.To[0] != "carol@outside.test" ||
			!strings.Contains(string(got.Raw), "From: alice@"+mailDomain) || !strings.Contains(string(got.Raw), "Subject: Harbour at six") {
			t.Fatalf("the outside world received %s -> %v:\n%s", got.From, got.To, got.Raw)
		}
		outboundID, _ := out["outboundId"].(string)

		// On the stateless protocol the question is an input-required
		// result; the answer comes with the call made again.
		modern := &mailConfirmer{action: mcpgo.ElicitationResponseActionAccept}
		if text, out, isErr := mailSendCall(t, mailAgentOn(t, s.URL, alice.Token(t), modern, "2026-07-28"), map[string]any{"to": []string{"dave@outside.test"}, "subject": "Stateless", "text": "Asked by input-required."}); isErr || out["status"] != "queued" || len(modern.shown) != 1 {
			t.Fatalf("mailSend on 2026-07-28: %s %v (asked %d)", text, out, len(modern.shown))
		}
		before++ // that message is on its way too
		outside.waitUserMail(t, before+1)

		// A declined message is never sent.
		decline := &mailConfirmer{action: mcpgo.ElicitationResponseActionDecline}
		if _, out, isErr := mailSendCall(t, mailAgent(t, s.URL, alice.Token(t), decline), map[string]any{"to": []string{"carol@outside.test"}, "subject": "Never", "text": "Not sent."}); isErr || out["status"] != "declined" {
			t.Fatalf("declined send: %v", out)
		}

		// bob: alice's delivery state is not his; a made-up report
		// address is refused at RCPT.
		bc := bob.MCP(t)
		if res, err := bc.Call("mailSendStatus", map[string]any{"outboundId": outboundID}); err != nil || !res.IsError {
			t.Fatalf("bob read alice's delivery state: %v %+v", err, res)
		}
		forged := "bounces+" + strings.Repeat("b", 32) + "@" + mailDomain
		if err := smtp.SendMail(s.SMTPAddr(), nil, "", []string{forged}, mailDSN(forged, "carol@outside.test", "x@"+mailDomain)); err == nil || !strings.HasPrefix(err.Error(), "550") {
			t.Fatalf("a made-up report address: %v", err)
		}

		// Five bounces pause alice.
		var sent []outsideMessage
		for i := range 5 {
			if text, out, isErr := mailSendCall(t, agent, map[string]any{"to": []string{"gone" + string(rune('a'+i)) + "@outside.test"}, "subject": "Hello", "text": "Are you there?"}); isErr {
				t.Fatalf("send %d: %s %v", i, text, out)
			}
		}
		sent = outside.waitUserMail(t, before+6)[before+1:]
		for _, m := range sent {
			p, err := mail.Parse(m.Raw)
			if err != nil {
				t.Fatal(err)
			}
			if err := smtp.SendMail(s.SMTPAddr(), nil, "", []string{m.From}, mailDSN(m.From, m.To[0], p.MessageID)); err != nil {
				t.Fatalf("deliver the DSN: %v", err)
			}
		}
		shown := len(accept.shown)
		text, _, isErr = mailSendCall(t, agent, map[string]any{"to": []string{"carol@outside.test"}, "subject": "Again", "text": "x"})
		if !isErr || !strings.Contains(text, "paused") || !strings.Contains(text, "bounced") || len(accept.shown) != shown {
			t.Fatalf("a send while paused: %q (asked %d times more)", text, len(accept.shown)-shown)
		}
		// bob is not paused, and cannot lift alice's pause.
		if res, err := bc.Call("adminMailOutboundResume", map[string]any{"username": "alice"}); err == nil && !res.IsError {
			t.Fatalf("bob lifted the pause: %v %+v", err, res)
		}
		lifted := mustCall[mail.ResumeOutput](t, root.MCP(t), "adminMailOutboundResume", map[string]any{"username": "alice"})
		if !lifted.Resumed {
			t.Fatalf("resume: %+v", lifted)
		}
		if text, out, isErr := mailSendCall(t, agent, map[string]any{"to": []string{"carol@outside.test"}, "subject": "Back", "text": "Resumed."}); isErr || out["status"] != "queued" {
			t.Fatalf("after the lift: %s %v", text, out)
		}
		outside.waitUserMail(t, before+7)
		time.Sleep(200 * time.Millisecond)
		for _, m := range outside.userMail()[before:] {
			if strings.Contains(string(m.Raw), "Subject: Never") {
				t.Fatal("the declined message was sent")
			}
		}
	})
}
