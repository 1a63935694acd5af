package mail_test

import (
	"context"
	"net"
	"net/smtp"
	"sync"
	"testing"

	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The SMTP listener hands the sender check the envelope (the client's
// address, its HELO name, MAIL FROM) with the message, so SPF can be
// checked; a failing check quarantines the message and its results are
// recorded.
func TestMailSMTPAuthSeesEnvelope(t *testing.T) {
	var mu sync.Mutex
	var seen []mail.AuthInput
	s := storagetest.Open(t, storage.SQLite)
	e := newEnv(t, s, mail.Config{Options: mail.Options{Authenticate: func(_ context.Context, in mail.AuthInput) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, in)
		return "spf=fail smtp.mailfrom=bank.test; dkim=none; dmarc=fail header.from=bank.test policy=reject", true
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

	c, err := smtp.Dial(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Hello("relay.outside.test"); err != nil {
		t.Fatal(err)
	}
	if err := c.Mail("alerts@bank.test"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("alice@" + domain); err != nil {
		t.Fatal(err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(fromMessage("spoof@x", "alerts@bank.test")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.Quit()

	mu.Lock()
	if len(seen) != 1 || !seen[0].RemoteIP.Equal(net.ParseIP("127.0.0.1")) || seen[0].Helo != "relay.outside.test" || seen[0].MailFrom != "alerts@bank.test" || len(seen[0].Raw) == 0 {
		t.Fatalf("the check saw %+v", seen)
	}
	mu.Unlock()
	q := must[mail.ListOutput](e, alice, "mailList", map[string]any{"folder": "quarantine"})
	if len(q.Messages) != 1 {
		t.Fatalf("quarantine: %+v", q)
	}
	if m := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": q.Messages[0].ID}); m.AuthResults != "spf=fail smtp.mailfrom=bank.test; dkim=none; dmarc=fail header.from=bank.test policy=reject" {
		t.Errorf("recorded %q", m.AuthResults)
	}
}
