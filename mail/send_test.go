package mail_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/smtp"
	"strings"
	"sync"
	"testing"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// asker is a client that answers every elicitation with action, and
// remembers what it was shown.
type asker struct {
	action string
	asked  []string
}

func (a *asker) Progress(context.Context, float64, float64, string) error { return nil }
func (a *asker) Log(context.Context, capabilities.LogLevel, string, any) error {
	return nil
}
func (a *asker) Elicit(_ context.Context, r capabilities.ElicitRequest) (capabilities.ElicitResult, error) {
	a.asked = append(a.asked, r.Message)
	if a.action == "" {
		return capabilities.ElicitResult{}, capabilities.ErrUnsupported
	}
	return capabilities.ElicitResult{Action: a.action, Content: map[string]any{"send": true}}, nil
}
func (a *asker) Sample(context.Context, capabilities.SampleRequest) (capabilities.SampleResult, error) {
	return capabilities.SampleResult{}, capabilities.ErrUnsupported
}

// queue is an outbox that keeps what is queued; flush hands it to the
// service's handler.
type queue struct {
	mu   sync.Mutex
	rows [][]byte
}

func (q *queue) Add(_ context.Context, _ bun.IDB, topic string, payload []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.rows = append(q.rows, payload)
	return nil
}
func (q *queue) AddOwned(ctx context.Context, db bun.IDB, topic string, _ int64, payload []byte) error {
	return q.Add(ctx, db, topic, payload)
}

// relay is a RawSender that keeps what it was handed.
type relay struct {
	mu   sync.Mutex
	sent []mail.Outgoing
}

func (r *relay) SendRaw(_ context.Context, from string, to []string, raw []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, mail.Outgoing{From: from, To: to, Raw: raw})
	return nil
}

type sendEnv struct {
	*env
	q     *queue
	relay *relay

	mu     sync.Mutex // the SMTP listener's goroutines publish
	events []string
}

func (se *sendEnv) published() []string {
	se.mu.Lock()
	defer se.mu.Unlock()
	return append([]string(nil), se.events...)
}

func newSendEnv(t *testing.T, s *storage.Store, opts mail.Options) *sendEnv {
	se := &sendEnv{q: &queue{}, relay: &relay{}}
	se.env = newEnv(t, s, mail.Config{Options: opts, Outbox: se.q,
		Sender: func() mail.RawSender { return se.relay },
		Publish: func(_ context.Context, _ bun.IDB, typ string, data any) error {
			b, _ := json.Marshal(data)
			se.mu.Lock()
			se.events = append(se.events, typ+" "+string(b))
			se.mu.Unlock()
			return nil
		}})
	return se
}

func (se *sendEnv) send(c capabilities.Caller, a *asker, in map[string]any) (mail.SendOutput, error) {
	se.t.Helper()
	var out mail.SendOutput
	raw, _ := json.Marshal(in)
	res, err := se.reg.Invoke(capabilities.WithClient(se.t.Context(), a), c, "mailSend", raw)
	if err != nil {
		return out, err
	}
	b, _ := json.Marshal(res.Structured)
	_ = json.Unmarshal(b, &out)
	return out, nil
}

// flush runs the outbox handler over the queued rows.
func (se *sendEnv) flush() {
	se.t.Helper()
	se.q.mu.Lock()
	rows := se.q.rows
	se.q.rows = nil
	se.q.mu.Unlock()
	h := se.svc.OutboundHandler()
	for _, p := range rows {
		if err := h(se.t.Context(), p); err != nil {
			se.t.Fatal(err)
		}
	}
}

func TestMailSendConfirmAndQueue(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		se := newSendEnv(t, s, mail.Options{})
		alice, bob := se.user("alice"), se.user("bob")
		in := map[string]any{"to": []string{"carol@elsewhere.test"}, "subject": "Lunch?", "text": "Shall we meet at noon?"}

		// A client that cannot ask is refused, and nothing is queued.
		if _, err := se.send(alice, &asker{}, in); code(err) != capabilities.CodeUnsupported || !strings.Contains(err.Error(), "confirmation") {
			t.Fatalf("no elicitation: %v", err)
		}
		// Declined or cancelled: nothing is queued.
		for _, action := range []string{"decline", "cancel"} {
			out, err := se.send(alice, &asker{action: action}, in)
			if err != nil || out.Status == "queued" || out.OutboundID != "" {
				t.Fatalf("%s: %+v %v", action, out, err)
			}
		}
		if len(se.q.rows) != 0 {
			t.Fatalf("queued without confirmation: %d", len(se.q.rows))
		}

		a := &asker{action: "accept"}
		out, err := se.send(alice, a, in)
		if err != nil || out.Status != "queued" || out.From != "alice@"+domain {
			t.Fatalf("accepted: %+v %v", out, err)
		}
		if len(a.asked) != 1 || !strings.Contains(a.asked[0], "To: carol@elsewhere.test\nSubject: Lunch?\n") ||
			!strings.Contains(a.asked[0], "-----\nShall we meet at noon?\n----- end of the message -----") {
			t.Fatalf("the person was shown %q", a.asked)
		}
		se.flush()
		if len(se.relay.sent) != 1 {
			t.Fatalf("sent %d", len(se.relay.sent))
		}
		m := se.relay.sent[0]
		if !strings.HasPrefix(m.From, "bounces+") || !strings.HasSuffix(m.From, "@"+domain) || m.To[0] != "carol@elsewhere.test" ||
			!strings.Contains(string(m.Raw), "From: alice@"+domain+"\r\n") {
			t.Fatalf("envelope %s %v\n%s", m.From, m.To, m.Raw)
		}
		st := must[mail.OutboundState](se.env, alice, "mailSendStatus", map[string]any{"outboundId": out.OutboundID})
		if st.State != "sent" {
			t.Fatalf("state %+v", st)
		}
		// The sent copy is in alice's sent folder, and only hers.
		l := must[mail.ListOutput](se.env, alice, "mailList", map[string]any{"folder": "sent"})
		if len(l.Messages) != 1 || l.Messages[0].ID != out.MessageID {
			t.Fatalf("sent folder %+v", l)
		}
		if _, err := call[mail.Message](se.env, bob, "mailRead", map[string]any{"messageId": out.MessageID}); code(err) != capabilities.CodeNotFound {
			t.Fatalf("bob reads alice's sent mail: %v", err)
		}
		if _, err := call[mail.OutboundState](se.env, bob, "mailSendStatus", map[string]any{"outboundId": out.OutboundID}); code(err) != capabilities.CodeNotFound {
			t.Fatalf("bob reads alice's delivery state: %v", err)
		}
		// bob cannot reply into alice's thread.
		if _, err := se.send(bob, &asker{action: "accept"}, map[string]any{"to": []string{"x@elsewhere.test"}, "subject": "re", "text": "x", "inReplyTo": out.MessageID}); code(err) != capabilities.CodeNotFound {
			t.Fatalf("bob replies to alice's message: %v", err)
		}
	})
}

func TestMailSendReplyThreads(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		se := newSendEnv(t, s, mail.Options{})
		alice := se.user("alice")
		d, err := se.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: message("first@elsewhere.test", "Question", "", "hello?", nil)})
		if err != nil {
			t.Fatal(err)
		}
		out, err := se.send(alice, &asker{action: "accept"}, map[string]any{"to": []string{"sender@elsewhere.test"}, "subject": "Re: Question", "text": "Yes.", "inReplyTo": d.MessageID})
		if err != nil {
			t.Fatal(err)
		}
		th := must[mail.Thread](se.env, alice, "mailThread", map[string]any{"threadId": out.ThreadID})
		if len(th.Messages) != 2 {
			t.Fatalf("thread %+v", th)
		}
		se.flush()
		if raw := string(se.relay.sent[0].Raw); !strings.Contains(raw, "In-Reply-To: <first@elsewhere.test>") || !strings.Contains(raw, "References: <first@elsewhere.test>") {
			t.Fatalf("reply headers:\n%s", raw)
		}
	})
}

func TestMailSendRefusesInjection(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		se := newSendEnv(t, s, mail.Options{})
		alice := se.user("alice")
		a := &asker{action: "accept"}
		bad := []map[string]any{
			{"to": []string{"carol@elsewhere.test\r\nBcc: eve@evil.test"}, "subject": "x", "text": "x"},
			{"to": []string{"Carol <carol@elsewhere.test>"}, "subject": "x", "text": "x"},
			{"to": []string{"carol@elsewhere.test, eve@evil.test"}, "subject": "x", "text": "x"},
			{"to": []string{`"eve@evil.test"@elsewhere.test`}, "subject": "x", "text": "x"},
			{"to": []string{"eve%evil.test@elsewhere.test"}, "subject": "x", "text": "x"},
			{"to": []string{"@relay.test:eve@evil.test"}, "subject": "x", "text": "x"},
			{"to": []string{"a@b.test", "c@d.test", "e@f.test", "g@h.test", "i@j.test", "k@l.test"}, "subject": "x", "text": "x"},
			{"to": []string{"carol@elsewhere.test"}, "subject": "Hi\r\nBcc: eve@evil.test", "text": "x"},
			{"to": []string{"carol@elsewhere.test"}, "subject": "Hi\nthere", "text": "x"},
			{"to": []string{"carol@elsewhere.test"}, "subject": "Invoice \u202etxt.exe", "text": "x"},
			{"to": []string{"carol@elsewhere.test"}, "subject": "x", "text": strings.Repeat("x", mail.MaxSendTextBytes+1)},
			{"to": []string{"carol@elsewhere.test"}, "subject": "x", "text": " "},
		}
		for i, in := range bad {
			if _, err := se.send(alice, a, in); code(err) != capabilities.CodeInvalidInput {
				t.Errorf("case %d: %v, want invalid_input", i, err)
			}
		}
		if len(a.asked) != 0 || len(se.q.rows) != 0 {
			t.Fatalf("asked %d times, queued %d", len(a.asked), len(se.q.rows))
		}
	})
}

func TestMailSendQuota(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		m := &countingMeter{}
		se := &sendEnv{q: &queue{}, relay: &relay{}}
		se.env = newEnv(t, s, mail.Config{Options: mail.Options{SendsPerDay: 2}, Meter: m, Outbox: se.q})
		alice := se.user("alice")
		in := map[string]any{"to": []string{"carol@elsewhere.test"}, "subject": "x", "text": "x"}
		for range 2 {
			if _, err := se.send(alice, &asker{action: "accept"}, in); err != nil {
				t.Fatal(err)
			}
		}
		_, err := se.send(alice, &asker{action: "accept"}, in)
		if code(err) != capabilities.CodeQuotaExceeded || !strings.Contains(err.Error(), "mail_send") || !strings.Contains(err.Error(), "2 a UTC day") {
			t.Fatalf("third send: %v", err)
		}
		if len(se.q.rows) != 2 {
			t.Fatalf("queued %d", len(se.q.rows))
		}
	})
}

// dsn is an RFC 3464 delivery status notification for the message with
// Message-ID msgID.
func dsn(to, msgID, action string) []byte {
	return []byte(fmt.Sprintf("From: MAILER-DAEMON@elsewhere.test\r\nTo: %s\r\nSubject: Undelivered Mail\r\nMIME-Version: 1.0\r\n"+
		"Content-Type: multipart/report; report-type=delivery-status; boundary=\"R\"\r\n\r\n"+
		"--R\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n"+
		"--R\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; elsewhere.test\r\n\r\nFinal-Recipient: rfc822; nobody@elsewhere.test\r\nAction: %s\r\nStatus: 5.1.1\r\n\r\n"+
		"--R\r\nContent-Type: text/rfc822-headers\r\n\r\nMessage-ID: <%s>\r\nSubject: x\r\n\r\n--R--\r\n", to, action, msgID))
}

func arf(to, msgID string) []byte {
	return []byte(fmt.Sprintf("From: fbl@isp.test\r\nTo: %s\r\nSubject: Abuse report\r\nMIME-Version: 1.0\r\n"+
		"Content-Type: multipart/report; report-type=feedback-report; boundary=\"F\"\r\n\r\n"+
		"--F\r\nContent-Type: text/plain\r\n\r\nThis is an abuse report.\r\n"+
		"--F\r\nContent-Type: message/feedback-report\r\n\r\nFeedback-Type: abuse\r\nUser-Agent: isp/1.0\r\nVersion: 1\r\n\r\n"+
		"--F\r\nContent-Type: message/rfc822\r\n\r\nMessage-ID: <%s>\r\nSubject: x\r\n\r\nbody\r\n--F--\r\n", to, msgID))
}

func TestMailReportsPauseAndResume(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		se := newSendEnv(t, s, mail.Options{})
		alice, bob := se.user("alice"), se.user("bob")
		admin := se.user("root", "admin")
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- se.svc.Serve(ctx, ln) }()
		defer func() { cancel(); <-done }()
		addr := ln.Addr().String()

		sendOne := func(c capabilities.Caller, i int) (mail.SendOutput, mail.Outgoing) {
			t.Helper()
			out, err := se.send(c, &asker{action: "accept"}, map[string]any{"to": []string{fmt.Sprintf("r%d@elsewhere.test", i)}, "subject": "s", "text": "t"})
			if err != nil {
				t.Fatal(err)
			}
			se.flush()
			return out, se.relay.sent[len(se.relay.sent)-1]
		}
		msgID := func(raw []byte) string {
			p, err := mail.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			return p.MessageID
		}
		// Even an account named after the report addresses receives no
		// report, and plain bounces@ is no mailbox.
		se.user(mail.BounceLocal)
		for _, rcpt := range []string{mail.BounceLocal + "@" + domain, mail.BounceLocal + "+" + strings.Repeat("c", 32) + "@" + domain} {
			if err := smtp.SendMail(addr, nil, "", []string{rcpt}, dsn(rcpt, "x@"+domain, "failed")); err == nil || !strings.HasPrefix(err.Error(), "550") {
				t.Fatalf("report to %s: %v, want 550", rcpt, err)
			}
		}
		// bob's message, and a DSN forged by bob with a made-up token for
		// alice's message: refused at RCPT, nothing counts.
		_, bobMsg := sendOne(bob, 99)
		var aliceOut []mail.SendOutput
		for i := range 5 {
			out, m := sendOne(alice, i)
			aliceOut = append(aliceOut, out)
			if i == 0 {
				forged := "bounces+" + strings.Repeat("a", 32) + "@" + domain
				if err := smtp.SendMail(addr, nil, "", []string{forged}, dsn(forged, msgID(m.Raw), "failed")); err == nil {
					t.Fatal("a made-up report address was accepted")
				}
				// bob's own report address with alice's Message-ID does not count either.
				if err := smtp.SendMail(addr, nil, "", []string{bobMsg.From}, dsn(bobMsg.From, msgID(m.Raw), "failed")); err != nil {
					t.Fatal(err)
				}
				// A delay is no bounce.
				if err := smtp.SendMail(addr, nil, "", []string{m.From}, dsn(m.From, msgID(m.Raw), "delayed")); err != nil {
					t.Fatal(err)
				}
				if st := must[mail.OutboundState](se.env, alice, "mailSendStatus", map[string]any{"outboundId": out.OutboundID}); st.State != "sent" {
					t.Fatalf("after forged and delay reports: %+v", st)
				}
			}
			// The real bounce, delivered twice, counts once.
			for range 2 {
				if err := smtp.SendMail(addr, nil, "", []string{m.From}, dsn(m.From, msgID(m.Raw), "failed")); err != nil {
					t.Fatal(err)
				}
			}
			if i < 4 {
				if _, err := se.send(alice, &asker{action: "accept"}, map[string]any{"to": []string{"ok@elsewhere.test"}, "subject": "s", "text": "t"}); err != nil {
					t.Fatalf("paused after %d bounces: %v", i+1, err)
				}
				se.flush()
			}
		}
		if st := must[mail.OutboundState](se.env, alice, "mailSendStatus", map[string]any{"outboundId": aliceOut[0].OutboundID}); st.State != "bounced" || !strings.Contains(st.Detail, "5.1.1") {
			t.Fatalf("bounced state %+v", st)
		}
		a := &asker{action: "accept"}
		_, err = se.send(alice, a, map[string]any{"to": []string{"ok@elsewhere.test"}, "subject": "s", "text": "t"})
		if code(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "paused") || !strings.Contains(err.Error(), "administrator") || len(a.asked) != 0 {
			t.Fatalf("paused send: %v (asked %d)", err, len(a.asked))
		}
		if ev := se.published(); len(ev) != 1 || !strings.HasPrefix(ev[0], mail.EventOutboundPaused) || !strings.Contains(ev[0], `"reason":"bounces"`) {
			t.Fatalf("events %q", ev)
		}
		// bob is not paused.
		if _, err := se.send(bob, &asker{action: "accept"}, map[string]any{"to": []string{"ok@elsewhere.test"}, "subject": "s", "text": "t"}); err != nil {
			t.Fatalf("bob: %v", err)
		}
		// Only admins lift it.
		if _, err := call[mail.ResumeOutput](se.env, bob, "adminMailOutboundResume", map[string]any{"username": "alice"}); err == nil {
			t.Fatal("bob lifted alice's pause")
		}
		r := must[mail.ResumeOutput](se.env, admin, "adminMailOutboundResume", map[string]any{"username": "alice"})
		if !r.Resumed {
			t.Fatalf("resume %+v", r)
		}
		out, m := sendOne(alice, 10)
		if out.Status != "queued" {
			t.Fatalf("after resume %+v", out)
		}
		// One complaint pauses at once.
		if err := smtp.SendMail(addr, nil, "", []string{m.From}, arf(m.From, msgID(m.Raw))); err != nil {
			t.Fatal(err)
		}
		if st := must[mail.OutboundState](se.env, alice, "mailSendStatus", map[string]any{"outboundId": out.OutboundID}); st.State != "complained" {
			t.Fatalf("complained state %+v", st)
		}
		if _, err := se.send(alice, &asker{action: "accept"}, map[string]any{"to": []string{"ok@elsewhere.test"}, "subject": "s", "text": "t"}); code(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "spam") {
			t.Fatalf("after complaint: %v", err)
		}
		if ev := se.published(); len(ev) != 2 || !strings.Contains(ev[1], `"reason":"complaint"`) {
			t.Fatalf("events %q", ev)
		}
	})
}

func TestMailSystemSend(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		se := newSendEnv(t, s, mail.Options{})
		admin, alice := se.user("root", "admin"), se.user("alice")
		in := map[string]any{"mailbox": "postmaster", "to": []string{"carol@elsewhere.test"}, "subject": "Notice", "text": "Hello from the platform."}
		raw, _ := json.Marshal(in)
		if _, err := se.reg.Invoke(capabilities.WithClient(t.Context(), &asker{action: "accept"}), alice, "adminSystemMailSend", raw); err == nil {
			t.Fatal("a user sent from postmaster")
		}
		res, err := se.reg.Invoke(capabilities.WithClient(t.Context(), &asker{action: "accept"}), admin, "adminSystemMailSend", raw)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(res.Structured); !strings.Contains(string(b), `"status":"queued"`) {
			t.Fatalf("system send %s", b)
		}
		se.flush()
		if len(se.relay.sent) != 1 || se.relay.sent[0].From != "postmaster@"+domain || !strings.Contains(string(se.relay.sent[0].Raw), "From: postmaster@"+domain) {
			t.Fatalf("sent %+v", se.relay.sent)
		}
		in["mailbox"] = "alice"
		raw, _ = json.Marshal(in)
		if _, err := se.reg.Invoke(capabilities.WithClient(t.Context(), &asker{action: "accept"}), admin, "adminSystemMailSend", raw); code(err) != capabilities.CodeInvalidInput {
			t.Fatalf("send from a user's address as system: %v", err)
		}
	})
}

// Account deletion through the inventory removes alice's outbound
// records, reports, pause and sent copies (rows and blobs) and leaves
// bob's.
func TestMailOutboundAccountDeletion(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		se := newSendEnv(t, s, mail.Options{})
		alice, bob := se.user("alice"), se.user("bob")
		var bobOut mail.SendOutput
		for _, c := range []capabilities.Caller{alice, bob} {
			out, err := se.send(c, &asker{action: "accept"}, map[string]any{"to": []string{"carol@elsewhere.test"}, "subject": "s", "text": "t"})
			if err != nil {
				t.Fatal(err)
			}
			bobOut = out
		}
		se.flush()
		m := se.relay.sent[0]
		token := strings.TrimSuffix(strings.TrimPrefix(m.From, "bounces+"), "@"+domain)
		p, _ := mail.Parse(m.Raw)
		if ok, err := se.svc.HandleReport(t.Context(), token, arf(m.From, p.MessageID)); err != nil || !ok {
			t.Fatalf("complaint: %v %v", ok, err)
		}
		if n := count(t, s, "mail_outbound_pauses"); n != 1 {
			t.Fatalf("%d pauses", n)
		}
		inv := storage.NewInventory()
		if err := mail.RegisterInventory(inv); err != nil {
			t.Fatal(err)
		}
		o := storage.Owner{ID: alice.OwnerID, StableID: alice.UserID}
		for _, p := range inv.BlobPrefixes() {
			if _, err := storage.DeleteBlobs(t.Context(), s.Bucket, o, p); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.RunInTx(t.Context(), func(ctx context.Context, tx bun.Tx) error {
			_, err := inv.DeleteRows(ctx, tx, o)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{"mail_outbound", "mail_outbound_events", "mail_outbound_pauses", "mail_messages", "mail_threads"} {
			n, err := s.DB.NewSelect().TableExpr(table).Where("user_id = ?", alice.OwnerID).Count(t.Context())
			if err != nil || n != 0 {
				t.Errorf("%s: %d rows of alice left (%v)", table, n, err)
			}
		}
		if st := must[mail.OutboundState](se.env, bob, "mailSendStatus", map[string]any{"outboundId": bobOut.OutboundID}); st.State != "sent" {
			t.Errorf("bob's message: %+v", st)
		}
		if got := blobCount(t, s); got != 1 {
			t.Errorf("%d blobs left, want bob's sent copy", got)
		}
	})
}
