package accounts_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// accountPasswordChange runs only for a web session, checks the current
// password, and changes only the caller's own password.
func TestAccountPasswordChangeCapability(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		reg := capabilities.NewRegistry(capabilities.Options{})
		if err := reg.Register(svc.AccountCapabilities(accounts.AccountOptions{})...); err != nil {
			t.Fatal(err)
		}
		ann, bob := signup(t, svc, "ann"), signup(t, svc, "bob")
		caller := func(u accounts.User, session bool) capabilities.Caller {
			c, err := svc.LoadCaller(ctx, u.StableID)
			if err != nil {
				t.Fatal(err)
			}
			c.AllScopes, c.Interactive, c.Session = true, true, session
			return c
		}
		const next = "a different long passphrase"
		args, _ := json.Marshal(accounts.PasswordChangeInput{Current: goodPassword, New: next})
		// An agent (token caller) neither sees nor calls it.
		if _, err := reg.Invoke(ctx, caller(ann, false), "accountPasswordChange", args); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("an agent changes the password: %v", err)
		}
		if slices.Contains(reg.VisibleNames(ctx, caller(ann, false)), "accountPasswordChange") {
			t.Fatal("an agent sees accountPasswordChange")
		}
		wrong, _ := json.Marshal(accounts.PasswordChangeInput{Current: "not the password", New: next})
		if _, err := reg.Invoke(ctx, caller(ann, true), "accountPasswordChange", wrong); !errors.Is(err, accounts.ErrInvalidCredentials) || capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("wrong current password: %v", err)
		}
		weak, _ := json.Marshal(accounts.PasswordChangeInput{Current: goodPassword, New: "short"})
		if _, err := reg.Invoke(ctx, caller(ann, true), "accountPasswordChange", weak); !errors.Is(err, accounts.ErrWeakPassword) || capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("weak password: %v", err)
		}
		if _, err := reg.Invoke(ctx, caller(ann, true), "accountPasswordChange", args); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Credentials.Login(ctx, "ann@example.com", next); err != nil {
			t.Fatalf("login with the new password: %v", err)
		}
		// Only the caller's own password changed.
		if _, err := svc.Credentials.Login(ctx, "bob@example.com", goodPassword); err != nil {
			t.Fatalf("bob's password changed: %v", err)
		}
		_ = bob
	})
}

// recordingChangeMail records the mail of email-change requests.
type recordingChangeMail struct {
	links     map[string]string // new address → token
	taken     []string
	requested []string
}

func (m *recordingChangeMail) MailEmailChangeLink(_ context.Context, _ bun.IDB, _ accounts.User, email, token string) error {
	m.links[email] = token
	return nil
}
func (m *recordingChangeMail) MailEmailTaken(_ context.Context, a string) {
	m.taken = append(m.taken, a)
}
func (m *recordingChangeMail) MailEmailChangeRequested(_ context.Context, u accounts.User) {
	m.requested = append(m.requested, u.Email)
}

// accountEmailChange: web sessions only, with the password, from a
// verified address; the answer is the same for a free and a taken address,
// and only a free one gets a link.
func TestAccountEmailChangeCapability(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		mail := &recordingChangeMail{links: map[string]string{}}
		reg := capabilities.NewRegistry(capabilities.Options{})
		if err := reg.Register(svc.AccountCapabilities(accounts.AccountOptions{EmailChange: mail})...); err != nil {
			t.Fatal(err)
		}
		ann, bob := signup(t, svc, "ann"), signup(t, svc, "bob")
		caller := func(u accounts.User, session bool) capabilities.Caller {
			c, err := svc.LoadCaller(ctx, u.StableID)
			if err != nil {
				t.Fatal(err)
			}
			c.AllScopes, c.Interactive, c.Session = true, true, session
			return c
		}
		call := func(c capabilities.Caller, password, email string) (string, error) {
			args, _ := json.Marshal(accounts.EmailChangeInput{Password: password, Email: email})
			res, err := reg.Invoke(ctx, c, "accountEmailChange", args)
			if err != nil {
				return "", err
			}
			b, _ := json.Marshal(res.Structured)
			return string(b), nil
		}
		if _, err := call(caller(ann, false), goodPassword, "ann.new@example.com"); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("an agent changes the email: %v", err)
		}
		if _, err := call(caller(ann, true), goodPassword, "ann.new@example.com"); !errors.Is(err, accounts.ErrEmailUnverified) {
			t.Fatalf("unverified: %v", err)
		}
		for _, u := range []accounts.User{ann, bob} {
			if _, err := svc.Identity.MarkEmailVerified(ctx, u.ID); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := call(caller(ann, true), "wrong password", "ann.new@example.com"); !errors.Is(err, accounts.ErrInvalidCredentials) {
			t.Fatalf("wrong password: %v", err)
		}
		if _, err := call(caller(ann, true), goodPassword, "not an address"); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("bad address: %v", err)
		}
		if len(mail.links)+len(mail.taken)+len(mail.requested) != 0 {
			t.Fatalf("refused requests sent mail: %+v", mail)
		}
		free, err := call(caller(ann, true), goodPassword, "Ann.New@example.com")
		if err != nil {
			t.Fatal(err)
		}
		taken, err := call(caller(ann, true), goodPassword, bob.Email)
		if err != nil {
			t.Fatal(err)
		}
		if free != taken {
			t.Fatalf("free %s and taken %s answer differently", free, taken)
		}
		token := mail.links["ann.new@example.com"]
		if len(mail.links) != 1 || token == "" || !slices.Equal(mail.taken, []string{bob.Email}) || !slices.Equal(mail.requested, []string{ann.Email, ann.Email}) {
			t.Fatalf("mail: %+v", mail)
		}
		if row, err := svc.Identity.PeekMailToken(ctx, token, accounts.PurposeChangeEmail); err != nil || row.UserID != ann.ID || row.Email != "ann.new@example.com" {
			t.Fatalf("link token: %+v %v", row, err)
		}
		if u, _ := svc.Identity.UserByID(ctx, ann.ID); u.Email != ann.Email {
			t.Fatalf("the address changed before the link was used: %s", u.Email)
		}
	})
}

// accountVerificationResend mails a fresh link for an unverified address
// (through the hook, in the token's transaction) and nothing for a
// verified one; a background caller cannot.
func TestAccountVerificationResendCapability(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		sent := map[string]string{}
		reg := capabilities.NewRegistry(capabilities.Options{})
		err := reg.Register(svc.AccountCapabilities(accounts.AccountOptions{
			Verification: func(_ context.Context, _ bun.IDB, u accounts.User, token string) error {
				sent[u.Email] = token
				return nil
			},
		})...)
		if err != nil {
			t.Fatal(err)
		}
		ann := signup(t, svc, "ann")
		c, err := svc.LoadCaller(ctx, ann.StableID)
		if err != nil {
			t.Fatal(err)
		}
		c.AllScopes = true
		if _, err := reg.Invoke(ctx, c, "accountVerificationResend", json.RawMessage(`{}`)); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("a background caller resends: %v", err)
		}
		c.Interactive = true
		res, err := reg.Invoke(ctx, c, "accountVerificationResend", json.RawMessage(`{}`))
		if err != nil || !res.Structured.(accounts.VerificationResendOutput).Sent {
			t.Fatalf("resend: %+v %v", res, err)
		}
		if row, err := svc.Identity.PeekMailToken(ctx, sent[ann.Email], accounts.PurposeVerifyEmail); err != nil || row.UserID != ann.ID {
			t.Fatalf("mailed token: %+v %v", row, err)
		}
		if _, err := svc.Identity.MarkEmailVerified(ctx, ann.ID); err != nil {
			t.Fatal(err)
		}
		delete(sent, ann.Email)
		res, err = reg.Invoke(ctx, c, "accountVerificationResend", json.RawMessage(`{}`))
		if err != nil || res.Structured.(accounts.VerificationResendOutput).Sent || len(sent) != 0 {
			t.Fatalf("resend for a verified address: %+v %v %v", res, err, sent)
		}
	})
}
