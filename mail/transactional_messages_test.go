package mail_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/workspaces"
)

// recordingSender records what AccountMail sends, and how.
type recordingSender struct {
	inTx, notices []mail.TransactionalMessage
	txs           []bun.IDB
}

func (r *recordingSender) SendInTx(_ context.Context, tx bun.IDB, msg mail.TransactionalMessage) error {
	r.inTx, r.txs = append(r.inTx, msg), append(r.txs, tx)
	return nil
}

func (r *recordingSender) SendNotice(_ context.Context, _ bun.IDB, msg mail.TransactionalMessage) {
	r.notices = append(r.notices, msg)
}

// Each account mail goes to the right address, by the right path (a link
// in its transaction, a notice on its own), with links under the base
// URL's path and the token query-escaped.
func TestAccountMail(t *testing.T) {
	ctx := t.Context()
	rec := &recordingSender{}
	am := mail.NewAccountMail(rec, nil, "Acme", "https://acme.example/tools/")
	u := accounts.User{Username: "ann", Email: "ann@example.com"}
	var tx bun.IDB = &bun.DB{}

	links := []struct {
		name, to, want string
		send           func() error
	}{
		{"verification", "ann@example.com", "https://acme.example/tools/verify-email?token=a%2Bb", func() error { return am.MailVerificationLink(ctx, tx, u, "a+b") }},
		{"email change", "new@example.com", "https://acme.example/tools/account/email/confirm?token=t1", func() error { return am.MailEmailChangeLink(ctx, tx, u, "new@example.com", "t1") }},
		{"release", "old@example.com", "https://acme.example/tools/account/email/release/confirm?token=t2", func() error { return am.MailEmailReleaseLink(ctx, tx, u, "old@example.com", "t2") }},
		{"setup", "ann@example.com", "https://acme.example/tools/password/setup?token=t3", func() error { return am.MailSetupLink(ctx, tx, u, "t3") }},
		{"username", "ann@example.com", "https://acme.example/tools/account\n", func() error {
			return am.MailUsernameChanged(ctx, tx, accounts.UsernameChange{User: u, Previous: "annie"})
		}},
		{"invitation", "bob@example.com", "https://acme.example/tools/invite?x", func() error {
			return am.MailWorkspaceInvitation(ctx, tx, workspaces.InvitationMail{To: "bob@example.com", WorkspaceName: "Lab", InvitedBy: "ann", Role: "member",
				URL: "https://acme.example/tools/invite?x", ExpiresAt: time.Unix(0, 0)})
		}},
		{"key", "ann@example.com", "https://acme.example/tools/account/security\n", func() error {
			return am.MailWorkspaceKeyCreated(ctx, tx, workspaces.KeyMail{To: "ann@example.com", Username: "ann", WorkspaceName: "Lab", KeyName: "ci", MaxRole: "member"})
		}},
		{"feedback", "ann@example.com", "https://acme.example/tools/account/feedback.", func() error {
			return am.MailFeedbackDecision(ctx, tx, "ann@example.com", "ann", "dismissed")
		}},
	}
	for i, l := range links {
		if err := l.send(); err != nil {
			t.Fatalf("%s: %v", l.name, err)
		}
		if len(rec.inTx) != i+1 || rec.txs[i] != tx {
			t.Fatalf("%s: not sent in the caller's transaction", l.name)
		}
		m := rec.inTx[i]
		if m.To != l.to || !strings.Contains(m.Text, l.want) || !strings.Contains(m.Subject+m.Text, "Acme") {
			t.Fatalf("%s: %+v, want to %s with %q", l.name, m, l.to, l.want)
		}
	}
	if setup := rec.inTx[3].Text; !strings.Contains(setup, accounts.PasswordSetupURL("https://acme.example/tools", "t3")) {
		t.Fatalf("setup link: %s", setup)
	}

	am.MailEmailTaken(ctx, "taken@example.com")
	am.MailEmailChangeRequested(ctx, u)
	am.MailEmailChanged(ctx, u, accounts.User{Username: "ann", Email: "new@example.com"})
	am.MailSignupAttempt(ctx, "ann@example.com")
	am.FactorChanged(ctx, u, accounts.FactorPasskeyAdded)
	if len(rec.notices) != 5 || len(rec.inTx) != len(links) {
		t.Fatalf("%d notices, %d in transactions", len(rec.notices), len(rec.inTx))
	}
	if n := rec.notices[4]; n.To != u.Email || !strings.Contains(n.Text, "A passkey was added") || !strings.Contains(n.Text, "https://acme.example/tools/account/security") {
		t.Fatalf("factor notice: %+v", n)
	}
	if n := rec.notices[2]; n.To != u.Email || !strings.Contains(n.Text, "now uses the address new@example.com") {
		t.Fatalf("email changed notice: %+v", n)
	}
	if r := am.ResetMessage(u, "r"); !strings.Contains(r.Text, "https://acme.example/tools/password-reset/confirm?token=r") {
		t.Fatalf("reset: %s", r.Text)
	}
}
