package mail_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"gocloud.dev/blob"
	"net"
	"net/smtp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// TestMailReviewConcurrentSameMessageIDKeepsOwnBlobs: deliveries racing
// with the same Message-ID but different bytes (an attacker who knows the
// Message-ID of a message about to arrive) are stored once, and the
// stored message's raw MIME and attachments are its own, never the bytes
// of a racing delivery that lost.
func TestMailReviewConcurrentSameMessageIDKeepsOwnBlobs(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice := e.user("alice")
		for round := range 6 {
			raceRound(t, e, alice, round)
		}
		// The losers' blobs are gone: only the winners' raw MIME remains
		// (one a round; the attachment is a byte range of it).
		var keys []string
		it := s.Bucket.List(nil)
		for {
			obj, err := it.Next(t.Context())
			if err != nil {
				break
			}
			keys = append(keys, obj.Key)
		}
		if len(keys) != 6 {
			t.Fatalf("blobs left after racing deliveries: %d, want 6: %v", len(keys), keys)
		}
	})
}

func raceRound(t *testing.T, e *env, alice capabilities.Caller, round int) {
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw := message(fmt.Sprintf("race%d@elsewhere.test", round), "race", "", fmt.Sprintf("variant-%d", i), []byte(fmt.Sprintf("payload-%d", i)))
			if _, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("deliver: %v", err)
	}
	l := must[mail.ListOutput](e, alice, "mailList", map[string]any{})
	if len(l.Messages) != round+1 {
		t.Fatalf("stored %d messages, want %d", len(l.Messages), round+1)
	}
	msg := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": l.Messages[0].ID})
	variant := strings.TrimPrefix(strings.TrimSpace(msg.Text), "variant-")
	if len(msg.Attachments) != 1 {
		t.Fatalf("attachments: %+v", msg.Attachments)
	}
	page := must[mail.AttachmentPage](e, alice, "mailAttachmentGet", map[string]any{"attachmentId": msg.Attachments[0].ID})
	data, _ := base64.StdEncoding.DecodeString(page.DataBase64)
	if string(data) != "payload-"+variant {
		t.Fatalf("message text is variant %s but its attachment holds %q: a losing delivery overwrote the stored blobs", variant, data)
	}
}

// greeting dials addr from the local address from (a 127.0.0.x) and
// returns the server's first line, or "" when the connection was closed
// without one.
func greeting(t *testing.T, addr, from string) (net.Conn, string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return c, line
}

// TestMailReviewSMTPConnectionLimits: a client cannot hold the listener's
// memory and goroutines without bound: connections over the per-address
// and total bounds are answered 421 and closed, a freed slot is served
// again, and a connection trickling commands is cut at MaxSessionTime.
func TestMailReviewSMTPConnectionLimits(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	e := newEnv(t, s, mail.Config{Options: mail.Options{MaxConnections: 3, MaxConnectionsPerIP: 2, MaxSessionTime: 2 * time.Second}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.svc.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	addr := ln.Addr().String()

	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 2 {
		c, line := greeting(t, addr, "127.0.0.1")
		held = append(held, c)
		if !strings.HasPrefix(line, "220") {
			t.Fatalf("connection within the bounds: %q, want 220", line)
		}
	}
	c, line := greeting(t, addr, "127.0.0.1")
	c.Close()
	if !strings.HasPrefix(line, "421") {
		t.Fatalf("third connection from one address: %q, want 421", line)
	}
	c, line = greeting(t, addr, "127.0.0.2")
	held = append(held, c)
	if !strings.HasPrefix(line, "220") {
		t.Fatalf("connection from another address: %q, want 220", line)
	}
	c, line = greeting(t, addr, "127.0.0.3")
	c.Close()
	if !strings.HasPrefix(line, "421") {
		t.Fatalf("connection over the total bound: %q, want 421", line)
	}

	// The held connections send nothing useful: MaxSessionTime cuts
	// them and their slots serve again.
	time.Sleep(3 * time.Second)
	c, line = greeting(t, addr, "127.0.0.1")
	defer c.Close()
	if !strings.HasPrefix(line, "220") {
		t.Fatalf("after the idle connections were cut: %q, want 220", line)
	}
	if _, err := held[0].Write([]byte("NOOP\r\n")); err == nil {
		_ = held[0].SetReadDeadline(time.Now().Add(2 * time.Second))
		if b, err := bufio.NewReader(held[0]).ReadString('\n'); err == nil && strings.HasPrefix(b, "250") {
			t.Fatalf("a connection older than MaxSessionTime still served: %q", b)
		}
	}
}

// TestMailReviewSMTPChecksOncePerTransaction: a message for many
// recipients is parsed and its DKIM signatures checked once, not once per
// recipient (fifty key lookups and parses of a 25 MiB message per
// transaction otherwise), and every recipient still gets the results.
func TestMailReviewSMTPChecksOncePerTransaction(t *testing.T) {
	var calls atomic.Int32
	s := storagetest.Open(t, storage.SQLite)
	e := newEnv(t, s, mail.Config{Options: mail.Options{Authenticate: func(context.Context, mail.AuthInput) (string, bool) {
		calls.Add(1)
		return "dkim=pass header.d=elsewhere.test", false
	}}})
	alice := e.user("alice")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.svc.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	var rcpts []string
	for i := range 8 {
		rcpts = append(rcpts, fmt.Sprintf("alice+t%d@%s", i, domain))
	}
	raw := message("many@elsewhere.test", "many", "", "to many", nil)
	if err := smtp.SendMail(ln.Addr().String(), nil, "sender@elsewhere.test", rcpts, raw); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("Authenticate ran %d times for one transaction, want 1", n)
	}
	l := must[mail.ListOutput](e, alice, "mailList", map[string]any{})
	if len(l.Messages) != len(rcpts) {
		t.Fatalf("stored %d copies, want %d", len(l.Messages), len(rcpts))
	}
	msg := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": l.Messages[0].ID})
	if msg.AuthResults != "dkim=pass header.d=elsewhere.test" {
		t.Fatalf("auth results: %q", msg.AuthResults)
	}
}

// TestMailReviewSearchSurvivesHugeBody: an outsider's message whose text
// body has a megabyte of distinct words does not break the recipient's
// search (PostgreSQL's tsvector holds at most 1 MB).
func TestMailReviewSearchSurvivesHugeBody(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice := e.user("alice")
		// Short distinct words cost the tsvector the most per byte of text.
		const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
		var body strings.Builder
		for i := 0; body.Len() < mail.MaxBodyBytes; i++ {
			w := []byte{alphabet[i%36], alphabet[i/36%36], alphabet[i/1296%36]}
			if i >= 36*36*36 {
				w = append(w, alphabet[i/46656%36])
			}
			body.Write(w)
			body.WriteByte(' ')
			if i%16 == 15 {
				body.WriteString("\r\n")
			}
		}
		big := message("huge@elsewhere.test", "huge", "", body.String(), nil)
		if _, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: big}); err != nil {
			t.Fatal(err)
		}
		small := message("small@elsewhere.test", "quarterly report", "", "the numbers", nil)
		if _, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: small}); err != nil {
			t.Fatal(err)
		}
		out, err := call[mail.SearchOutput](e, alice, "mailSearch", map[string]any{"query": "quarterly"})
		if err != nil {
			t.Fatalf("search after a huge message: %v", err)
		}
		if len(out.Messages) != 1 {
			t.Fatalf("search found %d messages, want 1", len(out.Messages))
		}
	})
}

// TestMailReviewRecipientLookalikes: Unicode letters that case-fold to
// ASCII ones (the long s, the Kelvin sign) do not make another domain or
// name ours, nor do a trailing dot or an IDN form of the domain.
func TestMailReviewRecipientLookalikes(t *testing.T) {
	const kdomain = "kmail.example.test"
	for _, addr := range []string{
		"alice@mail.example.te\u017ft",      // long s folds to s
		"alice@\u212amail.example.test",     // Kelvin sign folds to k
		"alice@mail.example.test.",          // trailing dot
		"alice@xn--mail-example.test",       // an IDN label
		"\u212aate@mail.example.test",       // Kelvin sign in the local part
		"alice\u200b@mail.example.test",     // zero-width space
		"alice@mail\uff0eexample\uff0etest", // fullwidth dots
	} {
		d := domain
		if strings.Contains(addr, "\u212amail") {
			d = kdomain
		}
		if r, err := mail.ParseRecipient(addr, d, mail.DefaultReserved); err == nil {
			t.Errorf("ParseRecipient(%q, %q) = %+v, want ErrNotOurs", addr, d, r)
		}
	}
}

// TestMailReviewAccountGoneDuringDelivery: an account marked for deletion
// (or suspended) between RCPT and the delivery's commit receives nothing,
// and the blobs already written for it are removed (the account's deletion
// would never see them).
func TestMailReviewAccountGoneDuringDelivery(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		for _, col := range []string{"deleting_at", "suspended_at"} {
			var e *env
			e = newEnv(t, s, mail.Config{Options: mail.Options{Authenticate: func(context.Context, mail.AuthInput) (string, bool) {
				// Runs after the blobs are written and before the commit.
				if _, err := s.DB.ExecContext(context.Background(), "UPDATE users SET "+col+" = ? WHERE username = ?", time.Now().UTC(), "gone"+col[:3]); err != nil {
					t.Error(err)
				}
				return "none", false
			}}})
			gone := e.user("gone" + col[:3])
			raw := message("late-"+col+"@elsewhere.test", "late", "", "too late", []byte("attached"))
			_, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "gone" + col[:3] + "@" + domain, Raw: raw})
			if !errors.Is(err, mail.ErrNotOurs) {
				t.Fatalf("%s: delivery to an account going away: %v, want ErrNotOurs", col, err)
			}
			var n int
			if err := s.DB.NewRaw("SELECT count(*) FROM mail_messages WHERE user_id = ?", gone.OwnerID).Scan(t.Context(), &n); err != nil || n != 0 {
				t.Fatalf("%s: %d messages stored (%v), want 0", col, n, err)
			}
			it := s.Bucket.List(&blob.ListOptions{Prefix: gone.UserID + "/"})
			if obj, err := it.Next(t.Context()); err == nil {
				t.Fatalf("%s: blob left behind: %s", col, obj.Key)
			}
		}
	})
}

// TestMailReviewParseBounds: a header section of megabytes (millions of
// addresses or message ids: seconds of CPU to parse) is refused as
// malformed, and a read walks at most MaxEntities MIME entities however
// many empty multiparts precede the body.
func TestMailReviewParseBounds(t *testing.T) {
	huge := "From: a@elsewhere.test\r\nTo: " + strings.Repeat("a@b.c, ", mail.MaxHeaderBytes/7+1) + "x@y.z\r\nSubject: s\r\n\r\nbody\r\n"
	if _, err := mail.Parse([]byte(huge)); !errors.Is(err, mail.ErrMalformed) {
		t.Fatalf("header section over MaxHeaderBytes: %v, want ErrMalformed", err)
	}
	bare := strings.Repeat("X-A: b\n", mail.MaxHeaderBytes/7+1) + "\nbody"
	if _, err := mail.Parse([]byte(bare)); !errors.Is(err, mail.ErrMalformed) {
		t.Fatalf("LF-only header section over MaxHeaderBytes: %v, want ErrMalformed", err)
	}
	ok := "From: a@elsewhere.test\r\nTo: " + strings.Repeat("a@b.c, ", 1000) + "x@y.z\r\nSubject: s\r\n\r\nbody\r\n\r\nmore\r\n"
	if p, err := mail.Parse([]byte(ok)); err != nil || !strings.Contains(p.Text, "more") {
		t.Fatalf("a message with a normal header section: %+v, %v", p.Text, err)
	}

	var b strings.Builder
	b.WriteString("From: a@elsewhere.test\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n")
	for range mail.MaxEntities + 10 {
		b.WriteString("--b\r\nContent-Type: multipart/mixed; boundary=c\r\n\r\n--c--\r\n")
	}
	b.WriteString("--b\r\nContent-Type: text/plain\r\n\r\nlate body\r\n--b--\r\n")
	p, err := mail.Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if p.Text != "" {
		t.Fatalf("walked past MaxEntities entities: text %q", p.Text)
	}
}

// TestMailReviewThreadsStayInTheirMailbox: a message to alice that replies
// to (or references) a message of bob's does not join bob's thread, and
// neither can open the other's thread, message or attachment by id.
func TestMailReviewThreadsStayInTheirMailbox(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice, bob := e.user("alice"), e.user("bob")
		bobs, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "bob@" + domain, Raw: message("orig@elsewhere.test", "bob's", "", "for bob", []byte("bob's file"))})
		if err != nil {
			t.Fatal(err)
		}
		alices, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: message("reply@elsewhere.test", "re", "orig@elsewhere.test", "for alice", nil)})
		if err != nil {
			t.Fatal(err)
		}
		bm := must[mail.Message](e, bob, "mailRead", map[string]any{"messageId": bobs.MessageID})
		am := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": alices.MessageID})
		if am.ThreadID == bm.ThreadID {
			t.Fatalf("alice's reply joined bob's thread %s", bm.ThreadID)
		}
		if th := must[mail.Thread](e, bob, "mailThread", map[string]any{"threadId": bm.ThreadID}); len(th.Messages) != 1 {
			t.Fatalf("bob's thread holds %d messages, want 1", len(th.Messages))
		}
		for name, in := range map[string]map[string]any{
			"mailThread":        {"threadId": bm.ThreadID},
			"mailRead":          {"messageId": bm.ID},
			"mailAttachmentGet": {"attachmentId": bm.Attachments[0].ID},
			"mailDelete":        {"messageId": bm.ID},
		} {
			if _, err := call[map[string]any](e, alice, name, in); code(err) != capabilities.CodeNotFound {
				t.Errorf("alice %s on bob's ids: %v, want not found", name, err)
			}
		}
		if out := must[mail.SearchOutput](e, alice, "mailSearch", map[string]any{"query": "bob"}); len(out.Messages) != 0 {
			t.Errorf("alice's search found bob's mail: %+v", out.Messages)
		}
	})
}
