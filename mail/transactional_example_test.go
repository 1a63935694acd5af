package mail_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/mail"
)

// A development sender keeps the platform's mail (here a verification
// link written by AccountMail) instead of sending it; with an SMTPMailer
// and the server's outbox the same calls write an outbox row in the
// caller's transaction.
func ExampleAccountMail() {
	sender := mail.NewTransactional(mail.TransactionalConfig{Logger: slog.New(slog.DiscardHandler)})
	am := mail.NewAccountMail(sender, nil, "Acme", "https://acme.example")
	u := accounts.User{Username: "ann", Email: "ann@example.com"}
	if err := am.MailVerificationLink(context.Background(), nil, u, "t0k3n"); err != nil {
		fmt.Println(err)
		return
	}
	kept, _ := sender.DevMail().Last("ann@example.com")
	fmt.Println(kept.Subject)
	fmt.Println(strings.Contains(kept.Text, "https://acme.example/verify-email?token=t0k3n"))
	// Output:
	// Verify your email address for Acme
	// true
}
