package mail_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// TestMailReviewBoundBodiesBesideFormattedValues: the delivery INSERT
// formats most values into the statement and binds the bodies and headers
// as driver parameters ($1… on PostgreSQL, where pgx substitutes them
// client-side in simple-protocol mode; ?1… on SQLite). A sender's subject,
// addresses and Message-ID that spell placeholders, quotes, backslashes
// and comments are stored as written, and the bodies land in their own
// columns.
func TestMailReviewBoundBodiesBesideFormattedValues(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice := e.user("alice")
		subject := `$1 ?1 $2' ?3 -- '' \' $$x$$ /* -$1`
		raw := fmt.Sprintf("From: \"$2 ?2\" <a$1@elsewhere.test>\r\nTo: alice@%s\r\nSubject: %s\r\nMessage-ID: <$3?3'@x>\r\nContent-Type: multipart/alternative; boundary=B\r\n\r\n"+
			"--B\r\nContent-Type: text/plain\r\n\r\ntext body $1 '\r\n--B\r\nContent-Type: text/html\r\n\r\n<p>html body ?2</p>\r\n--B--\r\n", domain, subject)
		if _, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: []byte(raw)}); err != nil {
			t.Fatal(err)
		}
		l := must[mail.ListOutput](e, alice, "mailList", map[string]any{})
		if len(l.Messages) != 1 {
			t.Fatalf("messages: %+v", l.Messages)
		}
		m := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": l.Messages[0].ID})
		if m.SubjectUntrusted != subject || !strings.Contains(m.FromUntrusted, "a$1@elsewhere.test") ||
			strings.TrimSpace(m.Text) != "text body $1 '" || !strings.Contains(m.HTML, "html body ?2") {
			t.Fatalf("stored: subject %q from %q text %q html %q", m.SubjectUntrusted, m.FromUntrusted, m.Text, m.HTML)
		}
	})
}
