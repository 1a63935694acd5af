package mail_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// ParseRecipient resolves an RCPT TO address: a user's address, a tagged
// one, a reserved local part, or not ours.
func ExampleParseRecipient() {
	for _, addr := range []string{"alice@mail.example.com", "Alice+Receipts@mail.example.com", "postmaster@mail.example.com", "alice%other.test@mail.example.com"} {
		r, err := mail.ParseRecipient(addr, "mail.example.com", mail.DefaultReserved)
		fmt.Printf("%s → %+v %v\n", addr, r, err)
	}
	// Output:
	// alice@mail.example.com → {Local:alice Tag: System:false} <nil>
	// Alice+Receipts@mail.example.com → {Local:alice Tag:receipts System:false} <nil>
	// postmaster@mail.example.com → {Local:postmaster Tag: System:true} <nil>
	// alice%other.test@mail.example.com → {Local: Tag: System:false} mail: no such mailbox here
}

// Deliver stores a message once, however often it is delivered.
func TestMailExampleDeliver(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	e := newEnv(t, s, mail.Config{})
	e.user("alice")
	raw := []byte("From: bob@elsewhere.test\r\nSubject: Lunch?\r\nMessage-ID: <lunch@elsewhere.test>\r\n\r\nTomorrow at noon?\r\n")
	for range 2 {
		d, err := e.svc.Deliver(context.Background(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stored as %s, duplicate %v", d.MessageID, d.Duplicate)
	}
}

// ParseReport reads a delivery report arriving at a message's report
// address (bounces+<token>@D): a failed recipient is a bounce.
func ExampleParseReport() {
	raw := "From: MAILER-DAEMON@elsewhere.test\r\nMIME-Version: 1.0\r\n" +
		"Content-Type: multipart/report; report-type=delivery-status; boundary=\"R\"\r\n\r\n" +
		"--R\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; elsewhere.test\r\n\r\n" +
		"Final-Recipient: rfc822; carol@elsewhere.test\r\nAction: failed\r\nStatus: 5.1.1\r\n\r\n" +
		"--R\r\nContent-Type: text/rfc822-headers\r\n\r\nMessage-ID: <abc@mail.example.com>\r\n\r\n--R--\r\n"
	r, ok := mail.ParseReport([]byte(raw))
	fmt.Printf("%v %s %s (%s)\n", ok, r.Kind, r.MessageID, r.Detail)
	// Output:
	// true bounce abc@mail.example.com (carol@elsewhere.test 5.1.1)
}
