package mail

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/workspaces"
)

// The pages of the web shell that links in transactional mail open
// (package web serves them at these paths, under the base URL).
const (
	LinkLogin          = "/login"
	LinkVerifyEmail    = "/verify-email"
	LinkResetConfirm   = "/password-reset/confirm"
	LinkAccount        = "/account"
	LinkConfirmEmail   = "/account/email/confirm"
	LinkConfirmRelease = "/account/email/release/confirm"
	LinkSecurity       = "/account/security"
	LinkFeedback       = "/account/feedback"
)

// TransactionalSender is what AccountMail sends through
// (*Transactional implements it).
type TransactionalSender interface {
	SendInTx(ctx context.Context, tx bun.IDB, msg TransactionalMessage) error
	SendNotice(ctx context.Context, db bun.IDB, msg TransactionalMessage)
}

// AccountMail writes the platform's mail about accounts (verification,
// reset and setup links, email and username changes, second-factor
// notices), workspaces (invitations, new API keys) and feedback
// decisions, and sends it through a TransactionalSender. It implements
// the mailer interfaces of package accounts (EmailChangeMailer,
// UsernameChangeMailer, EmailReleaseMailer, FactorNotifier, and the
// verification and setup-link functions) and package workspaces (Mailer,
// KeyMailer), so the server wires it to them directly.
//
// A message with a link that must exist exactly when its transaction
// commits is sent with SendInTx in that transaction; a notice that
// belongs to no transaction with SendNotice, its outbox row written in DB.
type AccountMail struct {
	send     TransactionalSender
	db       bun.IDB
	siteName string
	base     *url.URL
	baseText string
}

// NewAccountMail returns the account mail of the site siteName served at
// baseURL (http(s)://host[:port][/path], without a trailing slash: links
// are made under it), sending through send; notices' outbox rows go to db.
func NewAccountMail(send TransactionalSender, db bun.IDB, siteName, baseURL string) *AccountMail {
	baseURL = strings.TrimRight(baseURL, "/")
	base, err := url.Parse(baseURL)
	if err != nil {
		base = &url.URL{}
	}
	return &AccountMail{send: send, db: db, siteName: siteName, base: base, baseText: baseURL}
}

// link returns the public URL of path (which starts with "/").
func (a *AccountMail) link(path string, query url.Values) string {
	u := *a.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawQuery = query.Encode()
	return u.String()
}

func (a *AccountMail) notice(ctx context.Context, msg TransactionalMessage) {
	a.send.SendNotice(ctx, a.db, msg)
}

// VerificationMessage is the mail carrying an email-verification link.
func (a *AccountMail) VerificationMessage(email, token string) TransactionalMessage {
	return TransactionalMessage{
		To:      email,
		Subject: "Verify your email address for " + a.siteName,
		Text: "Open this link to verify your email address:\n\n" + a.link(LinkVerifyEmail, url.Values{"token": {token}}) +
			"\n\nThe link works once and expires in 24 hours. If you did not create an account, ignore this message.\n",
	}
}

// ResetMessage is the mail carrying u's password-reset link.
func (a *AccountMail) ResetMessage(u accounts.User, token string) TransactionalMessage {
	return TransactionalMessage{
		To:      u.Email,
		Subject: "Reset your password for " + a.siteName,
		Text: "Someone asked to reset the password of your account " + u.Username + ".\n\nOpen this link to choose a new password:\n\n" +
			a.link(LinkResetConfirm, url.Values{"token": {token}}) +
			"\n\nThe link works once and expires in one hour. Choosing a new password signs out every browser and connected app.\nIf you did not ask for this, ignore this message; your password stays as it is.\n",
	}
}

// MailVerificationLink mails u a link to verify the current address
// (accounts.AccountOptions.Verification), inside tx.
func (a *AccountMail) MailVerificationLink(ctx context.Context, tx bun.IDB, u accounts.User, token string) error {
	return a.send.SendInTx(ctx, tx, a.VerificationMessage(u.Email, token))
}

// MailSignupAttempt tells the owner of email, a registered address, that
// someone tried to open an account with it.
func (a *AccountMail) MailSignupAttempt(ctx context.Context, email string) {
	a.notice(ctx, TransactionalMessage{
		To:      email,
		Subject: "Someone tried to sign up for " + a.siteName + " with your address",
		Text: "Someone tried to create an account on " + a.siteName + " with this email address, which already belongs to an account.\n\n" +
			"No new account was created and yours is unchanged. If it was you, sign in instead:\n\n" + a.link(LinkLogin, nil) +
			"\n\nIf you forgot your password, reset it from the sign-in page. If it was not you, you can ignore this message.\n",
	})
}

// MailEmailChangeLink mails the confirmation link of an email change to
// the new address, inside tx (accounts.EmailChangeMailer).
func (a *AccountMail) MailEmailChangeLink(ctx context.Context, tx bun.IDB, u accounts.User, email, token string) error {
	return a.send.SendInTx(ctx, tx, TransactionalMessage{
		To:      email,
		Subject: "Confirm your new email address for " + a.siteName,
		Text: "Someone asked to move the account " + u.Username + " to this email address.\n\nOpen this link to confirm:\n\n" +
			a.link(LinkConfirmEmail, url.Values{"token": {token}}) +
			"\n\nThe link works once and expires in 24 hours. If you did not ask for this, ignore this message; nothing changes.\n",
	})
}

// MailEmailTaken tells the owner of address, which already belongs to an
// account, that someone tried to move another account to it.
func (a *AccountMail) MailEmailTaken(ctx context.Context, address string) {
	a.notice(ctx, TransactionalMessage{
		To:      address,
		Subject: "Someone tried to use your address on " + a.siteName,
		Text: "Someone asked to move another " + a.siteName + " account to this email address, which already belongs to an account.\n\n" +
			"Nothing was changed. If it was you, sign in to the account that uses this address instead. Otherwise you can ignore this message.\n",
	})
}

// MailEmailChangeRequested tells u's current address that a change was
// asked for.
func (a *AccountMail) MailEmailChangeRequested(ctx context.Context, u accounts.User) {
	a.notice(ctx, TransactionalMessage{
		To:      u.Email,
		Subject: "A change of your email address on " + a.siteName + " was requested",
		Text: "Someone signed in to your account " + u.Username + " asked to change its email address from this one.\n\n" +
			"The address changes only when the link sent to the new address is opened. If this was not you, change your password now: it signs out every browser and app.\n\n" +
			a.link(LinkAccount, nil) + "\n",
	})
}

// MailEmailChanged tells old, the former address of the account u, that
// the account now uses u.Email.
func (a *AccountMail) MailEmailChanged(ctx context.Context, old, u accounts.User) {
	a.notice(ctx, TransactionalMessage{
		To:      old.Email,
		Subject: "Your email address on " + a.siteName + " was changed",
		Text: "The account " + old.Username + " now uses the address " + u.Email + " instead of this one.\n\n" +
			"This address stays claimed by the account until you release it: on the account page, ask for a link to this address and open it. If you did not make this change, reset your password from the sign-in page at once.\n\n" +
			a.link(LinkAccount, nil) + "\n",
	})
}

// MailUsernameChanged tells the account that its username changed, inside
// tx (accounts.UsernameChangeMailer).
func (a *AccountMail) MailUsernameChanged(ctx context.Context, tx bun.IDB, c accounts.UsernameChange) error {
	held := ""
	if c.HeldUntil != nil {
		held = "Your previous username stays held for your account until " + c.HeldUntil.UTC().Format("2006-01-02") +
			": nobody else can take it, and you can take it back until then.\n\n"
	}
	return a.send.SendInTx(ctx, tx, TransactionalMessage{
		To:      c.User.Email,
		Subject: "Your username on " + a.siteName + " was changed",
		Text: "The username of your account changed from " + c.Previous + " to " + c.User.Username + ".\n\n" + held +
			"If you did not make this change, change your password now: it signs out every browser and connected app.\n\n" +
			a.link(LinkAccount, nil) + "\n",
	})
}

// MailEmailReleaseLink mails the link that releases email, a former
// address of u, inside tx (accounts.EmailReleaseMailer).
func (a *AccountMail) MailEmailReleaseLink(ctx context.Context, tx bun.IDB, u accounts.User, email, token string) error {
	return a.send.SendInTx(ctx, tx, TransactionalMessage{
		To:      email,
		Subject: "Release this address from your " + a.siteName + " account",
		Text: "The account " + u.Username + " used this address before and still claims it, so no other account can use it.\n\n" +
			"Open this link to release it:\n\n" + a.link(LinkConfirmRelease, url.Values{"token": {token}}) +
			"\n\nThe link works once and expires in " + hours(accounts.ReleaseEmailTTL) + ". If you did not ask for this, ignore this message; the address stays claimed.\n",
	})
}

// hours writes d in whole hours.
func hours(d time.Duration) string {
	n := int(d / time.Hour)
	if n == 1 {
		return "1 hour"
	}
	return strconv.Itoa(n) + " hours"
}

// MailSetupLink mails the one-time password-setup link of an account an
// admin created (accounts.AdminOptions.MailSetupLink), inside tx, the
// transaction that creates the account.
func (a *AccountMail) MailSetupLink(ctx context.Context, tx bun.IDB, u accounts.User, token string) error {
	return a.send.SendInTx(ctx, tx, TransactionalMessage{
		To:      u.Email,
		Subject: "Your new account on " + a.siteName,
		Text: "An administrator created the account " + u.Username + " for you on " + a.siteName + ".\n\nOpen this link to choose your password:\n\n" +
			accounts.PasswordSetupURL(a.baseText, token) +
			"\n\nThe link works once. If you did not expect this, ignore this message.\n",
	})
}

// FactorChanged mails the account about a change of its second factors
// (accounts.FactorNotifier).
func (a *AccountMail) FactorChanged(ctx context.Context, u accounts.User, change accounts.FactorChange) {
	what := map[accounts.FactorChange]string{
		accounts.FactorTOTPEnabled:             "An authenticator app was set up as a second factor",
		accounts.FactorTOTPDisabled:            "The authenticator app was turned off",
		accounts.FactorRecoveryCodesReset:      "New recovery codes were made (the old ones no longer work)",
		accounts.FactorPasskeyAdded:            "A passkey was added",
		accounts.FactorPasskeyRenamed:          "A passkey was renamed",
		accounts.FactorPasskeyRemoved:          "A passkey was removed",
		accounts.FactorsClearedByPasswordReset: "Your password was reset, which turned off the authenticator app and removed your passkeys and recovery codes",
	}[change]
	if what == "" {
		what = "The sign-in security of your account changed"
	}
	a.notice(ctx, TransactionalMessage{
		To:      u.Email,
		Subject: "Sign-in security changed on your " + a.siteName + " account",
		Text: what + " on your account " + u.Username + ".\n\n" +
			"If this was not you, reset your password at once: it signs out every browser and connected app.\n\n" +
			a.link(LinkSecurity, nil) + "\n",
	})
}

// MailWorkspaceInvitation mails a workspace invitation link inside tx, so
// it is sent exactly when the invitation is recorded (workspaces.Mailer).
func (a *AccountMail) MailWorkspaceInvitation(ctx context.Context, tx bun.IDB, m workspaces.InvitationMail) error {
	return a.send.SendInTx(ctx, tx, TransactionalMessage{
		To:      m.To,
		Subject: m.InvitedBy + " invites you to " + m.WorkspaceName + " on " + a.siteName,
		Text: m.InvitedBy + " invites you to join the workspace \"" + m.WorkspaceName + "\" on " + a.siteName +
			" as " + string(m.Role) + ".\n\nOpen this link, signed in with this address, to accept:\n\n" + m.URL +
			"\n\nThe link works once and expires on " + m.ExpiresAt.UTC().Format(time.RFC1123) +
			". If you did not expect this, ignore this message.\n",
	})
}

// MailWorkspaceKeyCreated tells an account that a workspace API key was
// made with it, inside tx (workspaces.KeyMailer).
func (a *AccountMail) MailWorkspaceKeyCreated(ctx context.Context, tx bun.IDB, m workspaces.KeyMail) error {
	return a.send.SendInTx(ctx, tx, TransactionalMessage{
		To:      m.To,
		Subject: "A workspace API key was created on your " + a.siteName + " account",
		Text: "An API key named \"" + m.KeyName + "\" was created for the workspace \"" + m.WorkspaceName + "\" on your account " +
			m.Username + " on " + m.CreatedAt.UTC().Format(time.RFC1123) + ", with at most the role " + string(m.MaxRole) + ".\n\n" +
			"It acts as you in that workspace until it is revoked. Your keys are listed, with a button to revoke each, on:\n\n" +
			a.link(LinkSecurity, nil) + "\n\n" +
			"If this was not you, change your password at once: it revokes every key, and signs out every browser and connected app.\n",
	})
}

// MailFeedbackDecision writes, inside tx, the mail telling a person that
// their platform feedback was resolved or dismissed: the decision, thanks,
// and an invitation to send more. It never carries the admin's note.
func (a *AccountMail) MailFeedbackDecision(ctx context.Context, tx bun.IDB, to, username, status string) error {
	decision := "has been resolved"
	if status == "dismissed" {
		decision = "was reviewed and closed without a change"
	}
	return a.send.SendInTx(ctx, tx, TransactionalMessage{
		To:      to,
		Subject: "Your feedback on " + a.siteName,
		Text: "Hello " + username + ",\n\nThe feedback you sent about " + a.siteName + " " + decision + ".\n\n" +
			"Thank you for taking the time. You can send more at any time through your agent or at " + a.baseText + LinkFeedback + ".\n",
	})
}

var (
	_ accounts.EmailChangeMailer    = (*AccountMail)(nil)
	_ accounts.UsernameChangeMailer = (*AccountMail)(nil)
	_ accounts.EmailReleaseMailer   = (*AccountMail)(nil)
	_ accounts.FactorNotifier       = (*AccountMail)(nil)
	_ workspaces.Mailer             = (*AccountMail)(nil)
	_ workspaces.KeyMailer          = (*AccountMail)(nil)
)
