package mail_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// contentAsker answers every elicitation with a fixed action and content.
type contentAsker struct {
	asker
	content map[string]any
}

func (a *contentAsker) Elicit(_ context.Context, r capabilities.ElicitRequest) (capabilities.ElicitResult, error) {
	a.asked = append(a.asked, r.Message)
	return capabilities.ElicitResult{Action: a.action, Content: a.content}, nil
}

// sendVia is sendEnv.send through any client.
func sendVia(se *sendEnv, c capabilities.Caller, client capabilities.Client, in map[string]any) (mail.SendOutput, error) {
	se.t.Helper()
	var out mail.SendOutput
	raw, _ := json.Marshal(in)
	res, err := se.reg.Invoke(capabilities.WithClient(se.t.Context(), client), c, "mailSend", raw)
	if err != nil {
		return out, err
	}
	b, _ := json.Marshal(res.Structured)
	_ = json.Unmarshal(b, &out)
	return out, nil
}

// Review (#30): the HTML alternative is what most mail clients show, so
// the person must see it before confirming: an agent could otherwise send
// a harmless text for confirmation with any HTML beside it.
func TestMailSendReviewConfirmShowsHTML(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		se := newSendEnv(t, s, mail.Options{})
		alice := se.user("alice")
		a := &asker{action: "accept"}
		html := `<p>Please wire 9,800 EUR to IBAN XX00 EVIL 0000 today.</p>`
		if _, err := se.send(alice, a, map[string]any{"to": []string{"carol@elsewhere.test"}, "subject": "Lunch", "text": "See you at noon.", "html": html}); err != nil {
			t.Fatal(err)
		}
		if len(a.asked) != 1 || !strings.Contains(a.asked[0], html) {
			t.Fatalf("the person confirmed without seeing the HTML that is sent: %q", a.asked)
		}
	})
}

// Review (#30): a subject that is itself an RFC 2047 encoded word is shown
// to the person literally but decoded by every recipient into other
// text; what is sent (and the sent copy) must say what was confirmed.
func TestMailSendReviewEncodedWordSubject(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		se := newSendEnv(t, s, mail.Options{})
		alice := se.user("alice")
		subjects := []string{
			"=?utf-8?q?Your_invoice_is_paid?=",
			"=?utf-8?b?WW91ciBwYXNzd29yZCBleHBpcmVk?=",
			strings.Repeat("日本語", 80),
			"=?" + strings.Repeat("日本語", 80),
			"Re: =?iso-8859-1?q?Urgent?= call me" + strings.Repeat(" =?utf-8?q?x?=", 15),
		}
		for _, subject := range subjects {
			a := &asker{action: "accept"}
			out, err := se.send(alice, a, map[string]any{"to": []string{"carol@elsewhere.test"}, "subject": subject, "text": "hi"})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(a.asked[0], "Subject: "+subject+"\n") {
				t.Fatalf("confirmation %q", a.asked[0])
			}
			se.flush()
			sent := se.relay.sent[len(se.relay.sent)-1]
			p, err := mail.Parse(sent.Raw)
			if err != nil {
				t.Fatal(err)
			}
			if p.Subject != subject {
				t.Fatalf("confirmed subject %q, recipients read %q\n%s", subject, p.Subject, sent.Raw)
			}
			for _, line := range strings.Split(string(sent.Raw), "\r\n") {
				if len(line) > 998 {
					t.Fatalf("header line of %d bytes", len(line))
				}
			}
			m := must[mail.Message](se.env, alice, "mailRead", map[string]any{"messageId": out.MessageID})
			if m.SubjectUntrusted != subject {
				t.Fatalf("sent copy's subject %q, confirmed %q", m.SubjectUntrusted, subject)
			}
		}
	})
}

// Review (#30): the form asks for send=true; an "accept" that does not
// carry it (an empty form, send missing or not a boolean true) sends
// nothing.
func TestMailSendReviewAcceptNeedsSendTrue(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		se := newSendEnv(t, s, mail.Options{})
		alice := se.user("alice")
		in := map[string]any{"to": []string{"carol@elsewhere.test"}, "subject": "s", "text": "t"}
		for _, content := range []map[string]any{nil, {}, {"send": "true"}, {"send": false}, {"other": true}} {
			out, err := sendVia(se, alice, &contentAsker{asker: asker{action: "accept"}, content: content}, in)
			if err != nil || out.Status == "queued" || out.OutboundID != "" {
				t.Fatalf("accept with %v: %+v %v", content, out, err)
			}
		}
		if len(se.q.rows) != 0 {
			t.Fatalf("queued %d without send=true", len(se.q.rows))
		}
		out, err := sendVia(se, alice, &contentAsker{asker: asker{action: "accept"}, content: map[string]any{"send": true}}, in)
		if err != nil || out.Status != "queued" {
			t.Fatalf("accept with send=true: %+v %v", out, err)
		}
	})
}

// Review (#30): adminMailOutboundResume is audited with the account it
// lifts (as a keyed hash, never the username), and a resume that cannot
// be audited does not happen.
func TestMailReviewResumeAuditNamesAccount(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		log := audit.New(s, []byte("0123456789abcdef0123456789abcdef"), quiet())
		se := &sendEnv{q: &queue{}, relay: &relay{}}
		se.env = newEnv(t, s, mail.Config{Outbox: se.q, Sender: func() mail.RawSender { return se.relay }, Audit: log})
		alice, admin := se.user("alice"), se.user("root", "admin")
		if _, err := s.DB.NewRaw("INSERT INTO mail_outbound_pauses (user_id, reason, paused_at) VALUES (?, 'bounces', ?)", alice.OwnerID, time.Now().UTC()).Exec(t.Context()); err != nil {
			t.Fatal(err)
		}
		if r := must[mail.ResumeOutput](se.env, admin, "adminMailOutboundResume", map[string]any{"username": "alice"}); !r.Resumed {
			t.Fatalf("resume %+v", r)
		}
		page, err := log.Query(t.Context(), audit.Filter{Action: "adminMailOutboundResume"}, storage.PageRequest{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) != 1 || !strings.Contains(page.Items[0].Reason, log.HashUser(alice.UserID)) || strings.Contains(page.Items[0].Reason, "alice") ||
			page.Items[0].UserHash != log.HashUser(admin.UserID) {
			t.Fatalf("audit %+v", page.Items)
		}
		// An audit log that cannot be written: the pause stays.
		if _, err := s.DB.NewRaw("UPDATE mail_outbound_pauses SET lifted_at = NULL").Exec(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB.NewRaw("DROP TABLE audit_events").Exec(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := call[mail.ResumeOutput](se.env, admin, "adminMailOutboundResume", map[string]any{"username": "alice"}); err == nil {
			t.Fatal("an unaudited resume succeeded")
		}
		var lifted int
		if err := s.DB.NewRaw("SELECT count(*) FROM mail_outbound_pauses WHERE lifted_at IS NOT NULL").Scan(t.Context(), &lifted); err != nil || lifted != 0 {
			t.Fatalf("lifted without an audit row: %d %v", lifted, err)
		}
	})
}
