package mail_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/smtp"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

const domain = "mail.example.test"

type env struct {
	t     *testing.T
	store *storage.Store
	reg   *capabilities.Registry
	svc   *mail.Service
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func owners(_ context.Context, c capabilities.Caller) (capabilities.Owner, error) {
	if c.OwnerID == 0 {
		return capabilities.Owner{}, capabilities.Errorf(capabilities.CodeNotFound, "no such account")
	}
	return capabilities.Owner{ID: c.OwnerID, StableID: c.UserID}, nil
}

func newEnv(t *testing.T, s *storage.Store, cfg mail.Config) *env {
	t.Helper()
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quiet()})
	cfg.Store, cfg.Owners, cfg.Logger = s, owners, quiet()
	if cfg.Domain == "" {
		cfg.Domain = domain
	}
	svc, err := mail.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(svc.Capabilities()...); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, store: s, reg: reg, svc: svc}
}

func (e *env) user(name string, roles ...string) capabilities.Caller {
	e.t.Helper()
	return e.userTB(e.t, name, roles...)
}

func (e *env) userTB(t testing.TB, name string, roles ...string) capabilities.Caller {
	t.Helper()
	sum := sha256.Sum256([]byte(name))
	stable := hex.EncodeToString(sum[:])
	now := time.Now().UTC()
	var id int64
	err := e.store.DB.NewRaw("INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
		stable, name+"@example.com", name, now, now).Scan(context.Background(), &id)
	if err != nil {
		t.Fatal(err)
	}
	return capabilities.Caller{UserID: stable, OwnerID: id, Username: name, Roles: append([]string{"user"}, roles...),
		Permissions: []capabilities.Permission{capabilities.ReadUserOwn, capabilities.UpdateUserOwn},
		AllScopes:   true, State: capabilities.AccountActive, Interactive: true}
}

func call[T any](e *env, c capabilities.Caller, name string, in any) (T, error) {
	e.t.Helper()
	var out T
	raw, _ := json.Marshal(in)
	res, err := e.reg.Invoke(e.t.Context(), c, name, raw)
	if err != nil {
		return out, err
	}
	b, _ := json.Marshal(res.Structured)
	if err := json.Unmarshal(b, &out); err != nil {
		e.t.Fatalf("%s answered %s: %v", name, b, err)
	}
	return out, nil
}

func must[T any](e *env, c capabilities.Caller, name string, in any) T {
	e.t.Helper()
	out, err := call[T](e, c, name, in)
	if err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
	return out
}

func code(err error) capabilities.Code {
	var ce *capabilities.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return ""
}

// message builds a raw message with a text part, an HTML part and an
// attachment.
func message(id, subject, inReplyTo, body string, attachment []byte) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "From: Sender <sender@elsewhere.test>\r\nTo: alice@%s\r\nSubject: %s\r\nMessage-ID: <%s>\r\nDate: Mon, 07 Dec 2026 03:00:00 +0000\r\n", domain, subject, id)
	if inReplyTo != "" {
		fmt.Fprintf(&b, "In-Reply-To: <%s>\r\nReferences: <%s>\r\n", inReplyTo, inReplyTo)
	}
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"B1\"\r\n\r\n")
	b.WriteString("--B1\r\nContent-Type: multipart/alternative; boundary=\"B2\"\r\n\r\n")
	fmt.Fprintf(&b, "--B2\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n%s\r\n", body)
	fmt.Fprintf(&b, "--B2\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p onclick=\"steal()\">%s</p><script>alert(1)</script><img src=\"https://tracker.test/x.png\"><a href=\"javascript:alert(1)\">x</a>\r\n--B2--\r\n", body)
	if attachment != nil {
		fmt.Fprintf(&b, "--B1\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"../../etc/report.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\n%s\r\n", base64.StdEncoding.EncodeToString(attachment))
	}
	b.WriteString("--B1--\r\n")
	return []byte(b.String())
}

func TestMailDeliverAndRead(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice, bob := e.user("alice"), e.user("bob")
		att := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640,000 bytes: three pages
		raw := message("one@elsewhere.test", "Quarterly numbers", "", "The numbers for the quarter are attached.", att)
		got, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw})
		if err != nil || got.Duplicate || got.MessageID == "" {
			t.Fatalf("deliver: %+v %v", got, err)
		}
		// The same Message-ID to the same recipient is stored once, and a
		// tagged address of the same mailbox is a different recipient.
		again, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw})
		if err != nil || !again.Duplicate || again.MessageID != got.MessageID {
			t.Fatalf("retried delivery: %+v %v", again, err)
		}
		// A provider delivery id makes retries of different bytes one.
		p1, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "ALICE+News@" + strings.ToUpper(domain), Raw: message("two@elsewhere.test", "News", "", "news", nil), ProviderID: "prov-1"})
		if err != nil || p1.Duplicate {
			t.Fatalf("deliver with provider id: %+v %v", p1, err)
		}
		p2, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice+news@" + domain, Raw: message("two-b@elsewhere.test", "News", "", "news", nil), ProviderID: "prov-1"})
		if err != nil || !p2.Duplicate {
			t.Fatalf("provider retry: %+v %v", p2, err)
		}
		reply, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: message("three@elsewhere.test", "Re: Quarterly numbers", "one@elsewhere.test", "And the forecast.", nil)})
		if err != nil {
			t.Fatal(err)
		}

		list := must[mail.ListOutput](e, alice, "mailList", map[string]any{})
		if len(list.Messages) != 3 || list.Address != "alice@"+domain {
			t.Fatalf("list: %+v", list)
		}
		if list.Messages[0].ID != reply.MessageID {
			t.Errorf("newest first: %+v", list.Messages)
		}
		msg := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": got.MessageID})
		if msg.Text != "The numbers for the quarter are attached." || msg.SubjectUntrusted != "Quarterly numbers" || msg.ContentWarning == "" {
			t.Errorf("read: %+v", msg)
		}
		for _, bad := range []string{"script", "onclick", "javascript:", "tracker.test"} {
			if strings.Contains(msg.HTML, bad) {
				t.Errorf("sanitised HTML still holds %q: %s", bad, msg.HTML)
			}
		}
		if !strings.Contains(msg.HTML, "The numbers for the quarter") {
			t.Errorf("sanitised HTML lost the text: %s", msg.HTML)
		}
		if len(msg.Attachments) != 1 || msg.Attachments[0].Filename != "report.bin" || msg.Attachments[0].SizeBytes != int64(len(att)) {
			t.Fatalf("attachments: %+v", msg.Attachments)
		}
		// Paged base64 gives the attachment back byte for byte.
		var data []byte
		offset := int64(0)
		for pages := 0; ; pages++ {
			page := must[mail.AttachmentPage](e, alice, "mailAttachmentGet", map[string]any{"attachmentId": msg.Attachments[0].ID, "offset": offset})
			b, err := base64.StdEncoding.DecodeString(page.DataBase64)
			if err != nil {
				t.Fatal(err)
			}
			data = append(data, b...)
			if page.NextOffset == 0 {
				if pages != 2 {
					t.Errorf("%d pages, want 3", pages+1)
				}
				break
			}
			offset = page.NextOffset
		}
		if !bytes.Equal(data, att) {
			t.Errorf("attachment bytes differ (%d of %d)", len(data), len(att))
		}
		// The reply joined the first message's thread.
		th := must[mail.Thread](e, alice, "mailThread", map[string]any{"threadId": msg.ThreadID})
		if len(th.Messages) != 2 || th.Messages[1].ID != reply.MessageID {
			t.Errorf("thread: %+v", th)
		}
		found := must[mail.SearchOutput](e, alice, "mailSearch", map[string]any{"query": "forecast"})
		if len(found.Messages) != 1 || found.Messages[0].ID != reply.MessageID {
			t.Errorf("search forecast: %+v", found)
		}
		if _, err := call[mail.SearchOutput](e, alice, "mailSearch", map[string]any{"query": `"*" - ()`}); code(err) != capabilities.CodeInvalidInput {
			t.Errorf("a query of operators only: %v", err)
		}

		// Bob sees none of it, by any id, and finds nothing.
		if l := must[mail.ListOutput](e, bob, "mailList", map[string]any{}); len(l.Messages) != 0 {
			t.Errorf("bob's list: %+v", l)
		}
		if f := must[mail.SearchOutput](e, bob, "mailSearch", map[string]any{"query": "quarter"}); len(f.Messages) != 0 {
			t.Errorf("bob's search: %+v", f)
		}
		for name, in := range map[string]map[string]any{
			"mailRead":          {"messageId": got.MessageID},
			"mailThread":        {"threadId": msg.ThreadID},
			"mailAttachmentGet": {"attachmentId": msg.Attachments[0].ID},
			"mailDelete":        {"messageId": got.MessageID},
		} {
			if _, err := call[json.RawMessage](e, bob, name, in); code(err) != capabilities.CodeNotFound {
				t.Errorf("bob's %s of alice's mail: %v, want not found", name, err)
			}
		}
		if _, err := call[json.RawMessage](e, bob, "adminSystemMailList", map[string]any{"mailbox": "postmaster"}); err == nil {
			t.Error("a non-admin listed a system mailbox")
		}

		// Delete removes the message and its raw MIME (which holds the
		// attachment).
		before := blobCount(t, s)
		if d := must[mail.DeleteOutput](e, alice, "mailDelete", map[string]any{"messageId": got.MessageID}); !d.Deleted {
			t.Error("not deleted")
		}
		if after := blobCount(t, s); after != before-1 {
			t.Errorf("blobs %d → %d, want one fewer", before, after)
		}
		if _, err := call[mail.Message](e, alice, "mailRead", map[string]any{"messageId": got.MessageID}); code(err) != capabilities.CodeNotFound {
			t.Errorf("read after delete: %v", err)
		}
		if _, err := call[mail.AttachmentPage](e, alice, "mailAttachmentGet", map[string]any{"attachmentId": msg.Attachments[0].ID}); code(err) != capabilities.CodeNotFound {
			t.Errorf("attachment after delete: %v", err)
		}
	})
}

func blobCount(t *testing.T, s *storage.Store) int {
	t.Helper()
	n := 0
	it := s.Bucket.List(nil)
	for {
		_, err := it.Next(t.Context())
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
}

func TestMailSystemMailboxes(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		root := e.user("root", "admin")
		root.Roles = []string{"user", capabilities.RoleAdmin}
		alice := e.user("alice")
		d, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "Postmaster@" + domain, Raw: message("pm@elsewhere.test", "Delivery report", "", "hello postmaster", nil)})
		if err != nil || !d.System {
			t.Fatalf("postmaster: %+v %v", d, err)
		}
		l := must[mail.ListOutput](e, root, "adminSystemMailList", map[string]any{"mailbox": "postmaster"})
		if len(l.Messages) != 1 || l.Messages[0].ID != d.MessageID {
			t.Fatalf("system list: %+v", l)
		}
		m := must[mail.Message](e, root, "adminSystemMailGet", map[string]any{"mailbox": "postmaster", "messageId": d.MessageID})
		if m.Text != "hello postmaster" {
			t.Errorf("system read: %+v", m)
		}
		if _, err := call[mail.Message](e, root, "adminSystemMailGet", map[string]any{"mailbox": "abuse", "messageId": d.MessageID}); code(err) != capabilities.CodeNotFound {
			t.Errorf("a message read through another system mailbox: %v", err)
		}
		if _, err := call[mail.ListOutput](e, root, "adminSystemMailList", map[string]any{"mailbox": "alice"}); code(err) != capabilities.CodeInvalidInput {
			t.Errorf("a user's mailbox through the system capability: %v", err)
		}
		// Postmaster mail is nobody's: alice's mailbox stays empty.
		if l := must[mail.ListOutput](e, alice, "mailList", map[string]any{}); len(l.Messages) != 0 {
			t.Errorf("alice sees system mail: %+v", l)
		}
		// An admin's own mailbox capability does not reach system mail.
		if _, err := call[mail.Message](e, root, "mailRead", map[string]any{"messageId": d.MessageID}); code(err) != capabilities.CodeNotFound {
			t.Errorf("system mail through mailRead: %v", err)
		}
	})
}

func TestMailRecipients(t *testing.T) {
	reserved := mail.DefaultReserved
	for _, tc := range []struct {
		addr string
		want mail.Recipient
		ok   bool
	}{
		{"alice@" + domain, mail.Recipient{Local: "alice"}, true},
		{"Alice+Shop.2026@MAIL.example.test", mail.Recipient{Local: "alice", Tag: "shop.2026"}, true},
		{"postmaster@" + domain, mail.Recipient{Local: "postmaster", System: true}, true},
		{"abuse+x@" + domain, mail.Recipient{Local: "abuse", Tag: "x", System: true}, true},
		{"alice@other.test", mail.Recipient{}, false},
		{"alice@" + domain + ".evil.test", mail.Recipient{}, false},
		{`"alice"@` + domain, mail.Recipient{}, false},
		{`"alice@evil.test"@` + domain, mail.Recipient{}, false},
		{"alice%evil.test@" + domain, mail.Recipient{}, false},
		{"evil.test!alice@" + domain, mail.Recipient{}, false},
		{"@relay.test:alice@" + domain, mail.Recipient{}, false},
		{"alice@evil.test@" + domain, mail.Recipient{}, false},
		{"alice\r\nRCPT TO:<x@y>@" + domain, mail.Recipient{}, false},
		{"alice+@" + domain, mail.Recipient{}, false},
		{"+tag@" + domain, mail.Recipient{}, false},
		{"-alice@" + domain, mail.Recipient{}, false},
		{"al.ice@" + domain, mail.Recipient{}, false},
		{"@" + domain, mail.Recipient{}, false},
		{"alice", mail.Recipient{}, false},
	} {
		got, err := mail.ParseRecipient(tc.addr, domain, reserved)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseRecipient(%q) = %+v, %v; want %+v ok=%v", tc.addr, got, err, tc.want, tc.ok)
		}
	}
}

func TestMailQuota(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		m := &countingMeter{}
		e := newEnv(t, s, mail.Config{Options: mail.Options{ReceivesPerDay: 2}, Meter: m})
		e.user("alice")
		for i := range 3 {
			raw := message(fmt.Sprintf("q%d@elsewhere.test", i), "hi", "", "hi", nil)
			_, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw})
			if i < 2 && err != nil {
				t.Fatalf("delivery %d: %v", i, err)
			}
			if i == 2 && !errors.Is(err, mail.ErrOverQuota) {
				t.Fatalf("third delivery: %v, want over quota", err)
			}
		}
		// A retry of a stored message is not counted again.
		if _, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: message("q0@elsewhere.test", "hi", "", "hi", nil)}); err != nil {
			t.Errorf("retry of a stored message: %v", err)
		}
	})
}

type countingMeter struct{ n map[string]int64 }

func (m *countingMeter) AllowClass(_ context.Context, c capabilities.Caller, class string, limit int64) error {
	if m.n == nil {
		m.n = map[string]int64{}
	}
	k := c.UserID + class
	if m.n[k] >= limit {
		return capabilities.Errorf(capabilities.CodeQuotaExceeded, "over")
	}
	m.n[k]++
	return nil
}

// A real SMTP client (net/smtp) delivers to the listener: known
// recipients are accepted, unknown ones refused at RCPT with a permanent
// error, oversized messages refused.
func TestMailSMTPListener(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{Options: mail.Options{MaxMessageBytes: 64 << 10}})
		alice := e.user("alice")
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- e.svc.Serve(ctx, ln) }()
		defer func() { cancel(); <-done }()
		addr := ln.Addr().String()

		raw := message("smtp1@elsewhere.test", "Over the wire", "", "sent with net/smtp", nil)
		if err := smtp.SendMail(addr, nil, "sender@elsewhere.test", []string{"alice@" + domain}, raw); err != nil {
			t.Fatalf("send: %v", err)
		}
		if err := smtp.SendMail(addr, nil, "sender@elsewhere.test", []string{"alice@" + domain}, raw); err != nil {
			t.Fatalf("resend: %v", err)
		}
		l := must[mail.ListOutput](e, alice, "mailList", map[string]any{})
		if len(l.Messages) != 1 || l.Messages[0].SubjectUntrusted != "Over the wire" {
			t.Fatalf("list after SMTP: %+v", l)
		}

		c, err := smtp.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Mail("sender@elsewhere.test"); err != nil {
			t.Fatal(err)
		}
		for _, rcpt := range []string{"nobody@" + domain, "alice@elsewhere.test", "alice%elsewhere.test@" + domain, `"alice@elsewhere.test"@` + domain} {
			err := c.Rcpt(rcpt)
			if err == nil || !strings.HasPrefix(err.Error(), "550") {
				t.Errorf("RCPT %s: %v, want 550", rcpt, err)
			}
		}
		if err := c.Rcpt("alice@" + domain); err != nil {
			t.Fatalf("RCPT alice after refusals: %v", err)
		}
		w, err := c.Data()
		if err != nil {
			t.Fatal(err)
		}
		big := append(message("big@elsewhere.test", "big", "", "x", nil), bytes.Repeat([]byte(strings.Repeat("y", 78)+"\r\n"), 1000)...)
		_, _ = w.Write(big)
		err = w.Close()
		if err == nil || !strings.HasPrefix(err.Error(), "552") {
			t.Errorf("oversized message: %v, want 552", err)
		}
	})
}
