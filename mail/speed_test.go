package mail_test

import (
	"context"
	"fmt"
	"net"
	"net/smtp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A new thread is made counting its first message; a reply counts in it;
// deleting both messages removes the thread, and not before.
func TestMailThreadCount(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice := e.user("alice")
		first, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: message("count-1@elsewhere.test", "Count", "", "first", nil)})
		if err != nil {
			t.Fatal(err)
		}
		count := func() (n int64, rows int) {
			t.Helper()
			var counts []int64
			if err := s.DB.NewRaw("SELECT message_count FROM mail_threads WHERE user_id = ?", alice.OwnerID).Scan(t.Context(), &counts); err != nil {
				t.Fatal(err)
			}
			for _, c := range counts {
				n += c
			}
			return n, len(counts)
		}
		if n, rows := count(); n != 1 || rows != 1 {
			t.Fatalf("after the first message: count %d in %d threads, want 1 in 1", n, rows)
		}
		reply, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: message("count-2@elsewhere.test", "Re: Count", "count-1@elsewhere.test", "second", nil)})
		if err != nil {
			t.Fatal(err)
		}
		if n, rows := count(); n != 2 || rows != 1 {
			t.Fatalf("after the reply: count %d in %d threads, want 2 in 1", n, rows)
		}
		must[mail.DeleteOutput](e, alice, "mailDelete", map[string]any{"messageId": reply.MessageID})
		if n, rows := count(); n != 1 || rows != 1 {
			t.Fatalf("after deleting the reply: count %d in %d threads, want 1 in 1", n, rows)
		}
		must[mail.DeleteOutput](e, alice, "mailDelete", map[string]any{"messageId": first.MessageID})
		if _, rows := count(); rows != 0 {
			t.Fatalf("after deleting both: %d threads, want none", rows)
		}
	})
}

// Over SMTP the recipient resolved at RCPT is checked again when the
// message is stored: an account suspended between RCPT and the end of
// DATA receives nothing (550), and nothing is stored for it.
func TestMailSMTPRecipientGoneAfterRcpt(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		gone := e.user("gone")
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- e.svc.Serve(ctx, ln) }()
		defer func() { cancel(); <-done }()
		c, err := smtp.Dial(ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Mail("sender@elsewhere.test"); err != nil {
			t.Fatal(err)
		}
		if err := c.Rcpt("gone@" + domain); err != nil {
			t.Fatalf("RCPT: %v", err)
		}
		if _, err := s.DB.ExecContext(t.Context(), "UPDATE users SET suspended_at = ? WHERE id = ?", time.Now().UTC(), gone.OwnerID); err != nil {
			t.Fatal(err)
		}
		w, err := c.Data()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(message("gone-1@elsewhere.test", "late", "", "too late", []byte("attached"))); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err == nil || !strings.HasPrefix(err.Error(), "550") {
			t.Fatalf("DATA for a suspended account: %v, want 550", err)
		}
		var n int
		if err := s.DB.NewRaw("SELECT count(*) FROM mail_messages WHERE user_id = ?", gone.OwnerID).Scan(t.Context(), &n); err != nil || n != 0 {
			t.Fatalf("%d messages stored (%v), want 0", n, err)
		}
	})
}

// Concurrent deliveries (committed in groups) are each stored once: ten
// messages each delivered twice at the same time give ten messages, each
// pair answered with one message id, one of the two a duplicate.
func TestMailConcurrentDeliveriesStoredOnce(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice := e.user("alice")
		const n = 10
		got := make([]mail.Delivered, 2*n)
		errs := make([]error, 2*n)
		var wg sync.WaitGroup
		for i := range 2 * n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				raw := message(fmt.Sprintf("concurrent-%d@elsewhere.test", i%n), "Concurrent", "", "same bytes twice", []byte("attached"))
				got[i], errs[i] = e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw})
			}()
		}
		wg.Wait()
		for i := range n {
			a, b := got[i], got[i+n]
			if errs[i] != nil || errs[i+n] != nil || a.MessageID == "" || a.MessageID != b.MessageID || a.Duplicate == b.Duplicate {
				t.Errorf("message %d: %+v %v / %+v %v", i, a, errs[i], b, errs[i+n])
			}
		}
		var stored int
		if err := s.DB.NewRaw("SELECT count(*) FROM mail_messages WHERE user_id = ?", alice.OwnerID).Scan(t.Context(), &stored); err != nil || stored != n {
			t.Fatalf("%d messages stored (%v), want %d", stored, err, n)
		}
	})
}
