package accounts

import (
	"context"
	"errors"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
)

// The email-change and email-verification links: their mail-token
// purposes and how long they work.
const (
	PurposeChangeEmail = "change_email"
	ChangeEmailTTL     = 24 * time.Hour
	PurposeVerifyEmail = "verify_email"
	VerifyEmailTTL     = 24 * time.Hour
)

// VerificationResendOutput is the output of accountVerificationResend.
type VerificationResendOutput struct {
	// Sent is false when the address is already verified.
	Sent bool `json:"sent"`
}

// VerificationMailer mails an email-verification link for u's current
// address. It runs inside the transaction that stores the token.
type VerificationMailer func(ctx context.Context, tx bun.IDB, u User, token string) error

// EmailChangeInput is the input of accountEmailChange.
type EmailChangeInput struct {
	Password string `json:"password" jsonschema:"the current password"`
	Email    string `json:"email" jsonschema:"the new email address"`
}

// EmailChangeOutput is the output of accountEmailChange. It is the same
// whether or not the new address belongs to another account.
type EmailChangeOutput struct {
	Requested bool `json:"requested"`
}

// EmailChangeMailer sends the mail of an email-change request.
// mail.AccountMail implements it (it composes the messages and links).
type EmailChangeMailer interface {
	// MailEmailChangeLink sends token's confirmation link to the new
	// address. It runs inside the transaction that stores the token
	// (write the message to the outbox with tx).
	MailEmailChangeLink(ctx context.Context, tx bun.IDB, u User, newEmail, token string) error
	// MailEmailTaken tells the owner of an address that already belongs to
	// an account that someone tried to move another account to it.
	MailEmailTaken(ctx context.Context, address string)
	// MailEmailChangeRequested tells the account's current address that a
	// change was asked for.
	MailEmailChangeRequested(ctx context.Context, u User)
}

// AccountOptions configure AccountCapabilities.
type AccountOptions struct {
	// EmailChange sends the mail of accountEmailChange; without it that
	// capability is not offered.
	EmailChange EmailChangeMailer
	// Verification sends the link of accountVerificationResend; without
	// it that capability is not offered.
	Verification VerificationMailer
	// UsernameChange tells the account of a change made with
	// accountUsernameChange; without it that capability is not offered.
	UsernameChange UsernameChangeMailer
	// EmailRelease mails the link of accountEmailClaimRelease; without it
	// that capability is not offered.
	EmailRelease EmailReleaseMailer
	// Audit, when set, records the outcome of every call of
	// accountUsernameChange and accountEmailClaimRelease.
	Audit AccountAudit
}

// AccountAudit records the outcome of an account action for the audit
// log: action names it ("username_change"), reason is "" on success and
// otherwise the failure's code (never the person's input).
type AccountAudit func(ctx context.Context, u User, action string, ok bool, reason string)

// UsernameChangeMailer tells an account that its username changed.
type UsernameChangeMailer interface {
	// MailUsernameChanged tells c.User's address of the change c. It
	// runs inside the changing transaction (write the message to the
	// outbox with tx); its error rolls the change back.
	MailUsernameChanged(ctx context.Context, tx bun.IDB, c UsernameChange) error
}

// UsernameChangeInput is the input of accountUsernameChange.
type UsernameChangeInput struct {
	Username string `json:"username" jsonschema:"the new username: 3 to 32 letters, digits and hyphens (stored lowercase), a letter or digit at both ends" schema:"minLength=1,maxLength=64"`
}

// UsernameChangeOutput is the output of accountUsernameChange.
type UsernameChangeOutput struct {
	Username string `json:"username"`
	Previous string `json:"previous"`
	Changed  bool   `json:"changed"`
	// HeldUntil: until then the previous username stays held for the
	// account (nobody else can take it; the account may take it back).
	HeldUntil *time.Time `json:"heldUntil,omitempty"`
	// NextChangeAt: the earliest time of the next change.
	NextChangeAt *time.Time `json:"nextChangeAt,omitempty"`
}

// EmailClaimReleaseInput is the input of accountEmailClaimRelease.
type EmailClaimReleaseInput struct {
	Email string `json:"email" jsonschema:"a former email address of the account, still claimed by it" schema:"minLength=1,maxLength=254"`
}

// EmailClaimReleaseOutput is the output of accountEmailClaimRelease.
type EmailClaimReleaseOutput struct {
	Requested bool `json:"requested"`
}

// auditReasonOf is the reason an AccountAudit records for err.
func auditReasonOf(err error) string {
	if err == nil {
		return ""
	}
	if c := CodeOf(err); c != "" {
		return string(c)
	}
	return "internal"
}

// PasswordChangeInput is the input of accountPasswordChange.
type PasswordChangeInput struct {
	Current string `json:"current" jsonschema:"the current password"`
	New     string `json:"new" jsonschema:"the new password"`
}

// PasswordChangeOutput is the output of accountPasswordChange.
type PasswordChangeOutput struct {
	Changed bool `json:"changed"`
}

// AccountCapabilities returns the capabilities a person uses on their own
// account: accountPasswordChange, and with their options
// accountEmailChange, accountVerificationResend, accountUsernameChange and
// accountEmailClaimRelease. They are session-only (Requirement.SessionOnly):
// never an agent's. They handle a credential or an address, and a username
// is one too (the account's public handle): a rename an agent was talked
// into could not be undone for the cooldown, so only the person makes it.
func (s *Service) AccountCapabilities(opts AccountOptions) []capabilities.Capability {
	own := capabilities.Requirement{
		Permissions: []capabilities.Permission{capabilities.UpdateUserOwn},
		SessionOnly: true, InteractiveOnly: true,
	}
	caps := []capabilities.Capability{
		capabilities.Define(capabilities.Spec[PasswordChangeInput, PasswordChangeOutput]{
			Name: "accountPasswordChange", Domain: "account", Title: "Change the password",
			Description: "Replaces the signed-in person's password after checking the current one. Every browser session and connected app issued before it stops working.",
			Annotations: &capabilities.Annotations{Destructive: true},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in PasswordChangeInput) (PasswordChangeOutput, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return PasswordChangeOutput{}, err
				}
				if _, err := s.Credentials.ChangePassword(ctx, u.ID, in.Current, in.New); err != nil {
					return PasswordChangeOutput{}, capabilityError(err)
				}
				return PasswordChangeOutput{Changed: true}, nil
			},
		}),
	}
	if m := opts.EmailChange; m != nil {
		caps = append(caps, capabilities.Define(capabilities.Spec[EmailChangeInput, EmailChangeOutput]{
			Name: "accountEmailChange", Domain: "account", Title: "Change the email address",
			Description: "Asks to move the signed-in person's account to a new email address, after checking the password. The address changes only when the link mailed to it is opened; the current address is told. The answer is the same whether or not the new address belongs to another account.",
			Annotations: &capabilities.Annotations{},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in EmailChangeInput) (EmailChangeOutput, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return EmailChangeOutput{}, err
				}
				if _, err := s.Credentials.VerifyPassword(ctx, u.ID, in.Password); err != nil {
					return EmailChangeOutput{}, capabilityError(err)
				}
				if err := u.CheckActive(); err != nil {
					return EmailChangeOutput{}, capabilityError(err)
				}
				if !u.EmailVerified() {
					return EmailChangeOutput{}, capabilityError(ErrEmailUnverified)
				}
				email, err := s.Identity.CheckEmailFree(ctx, u.ID, in.Email)
				switch {
				case errors.Is(err, ErrEmailTaken), errors.Is(err, ErrEmailClaimed):
					// Indistinguishable from success: the owner of the
					// address is told instead of being sent a link.
					m.MailEmailTaken(ctx, email)
				case err != nil:
					return EmailChangeOutput{}, capabilityError(err)
				case email == u.Email:
					// Nothing to change; answer like any other request.
				default:
					_, err := s.Identity.IssueMailToken(ctx, u.ID, PurposeChangeEmail, email, "", ChangeEmailTTL,
						func(ctx context.Context, tx bun.IDB, token string) error {
							return m.MailEmailChangeLink(ctx, tx, u, email, token)
						})
					if err != nil {
						return EmailChangeOutput{}, err
					}
				}
				m.MailEmailChangeRequested(ctx, u)
				return EmailChangeOutput{Requested: true}, nil
			},
		}))
	}
	if m := opts.Verification; m != nil {
		caps = append(caps, capabilities.Define(capabilities.Spec[struct{}, VerificationResendOutput]{
			Name: "accountVerificationResend", Domain: "account", Title: "Send a new verification link",
			Description: "Mails a new link to verify the signed-in user's current email address (earlier links stop working). Does nothing when the address is already verified.",
			Annotations: &capabilities.Annotations{Idempotent: true},
			Requires: capabilities.Requirement{
				Permissions:     []capabilities.Permission{capabilities.UpdateUserOwn},
				InteractiveOnly: true,
			},
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (VerificationResendOutput, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil || u.EmailVerified() {
					return VerificationResendOutput{}, err
				}
				_, err = s.Identity.IssueMailToken(ctx, u.ID, PurposeVerifyEmail, u.Email, "", VerifyEmailTTL,
					func(ctx context.Context, tx bun.IDB, token string) error { return m(ctx, tx, u, token) })
				if err != nil {
					return VerificationResendOutput{}, err
				}
				return VerificationResendOutput{Sent: true}, nil
			},
		}))
	}
	audited := func(ctx context.Context, u User, action string, err error) {
		if opts.Audit != nil && u.ID != 0 {
			opts.Audit(ctx, u, action, err == nil, auditReasonOf(err))
		}
	}
	if m := opts.UsernameChange; m != nil {
		caps = append(caps, capabilities.Define(capabilities.Spec[UsernameChangeInput, UsernameChangeOutput]{
			Name: "accountUsernameChange", Domain: "account", Title: "Change the username",
			Description: "Changes the signed-in person's username. The rules of sign-up apply (3 to 32 lowercase letters, digits and hyphens; reserved names and names in use or held for another account are refused, whatever their case). " +
				"The previous username stays held for the account for a while, so nobody else can take it; the account is told by mail, and changes are limited to one per cooldown period (the answer says when the next may be made).",
			Annotations: &capabilities.Annotations{Idempotent: true},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in UsernameChangeInput) (UsernameChangeOutput, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return UsernameChangeOutput{}, err
				}
				c, err := s.Identity.ChangeOwnUsername(ctx, u.ID, in.Username, func(ctx context.Context, tx bun.IDB, c UsernameChange) error {
					return m.MailUsernameChanged(ctx, tx, c)
				})
				audited(ctx, u, "username_change", err)
				if errors.Is(err, ErrUsernameCooldown) && c.NextChangeAt != nil {
					return UsernameChangeOutput{}, &capabilities.Error{Code: capabilities.CodeConflict, Err: err,
						Message: "You changed your username recently. You can change it again after " + c.NextChangeAt.UTC().Format("2006-01-02 15:04 UTC") + "."}
				}
				if err != nil {
					return UsernameChangeOutput{}, capabilityError(err)
				}
				return UsernameChangeOutput{Username: c.User.Username, Previous: c.Previous, Changed: c.Changed(), HeldUntil: c.HeldUntil, NextChangeAt: c.NextChangeAt}, nil
			},
		}))
	}
	if m := opts.EmailRelease; m != nil {
		caps = append(caps, capabilities.Define(capabilities.Spec[EmailClaimReleaseInput, EmailClaimReleaseOutput]{
			Name: "accountEmailClaimRelease", Domain: "account", Title: "Release a former email address",
			Description: "Mails a link to a former email address of the signed-in person's account, which the account still claims. Opening it proves the person still controls the address and releases it: it can then open an account again, verifying the address like any sign-up.",
			Annotations: &capabilities.Annotations{Idempotent: true},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in EmailClaimReleaseInput) (EmailClaimReleaseOutput, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return EmailClaimReleaseOutput{}, err
				}
				_, err = s.Identity.RequestEmailRelease(ctx, u.ID, in.Email, m.MailEmailReleaseLink)
				audited(ctx, u, "email_claim_release_request", err)
				if errors.Is(err, ErrNotFound) {
					return EmailClaimReleaseOutput{}, capabilities.Errorf(capabilities.CodeNotFound, "This is not a former address of your account.")
				}
				if err != nil {
					return EmailClaimReleaseOutput{}, capabilityError(err)
				}
				return EmailClaimReleaseOutput{Requested: true}, nil
			},
		}))
	}
	return caps
}

// callerUser loads the caller's own account.
func (s *core) callerUser(ctx context.Context, c capabilities.Caller) (User, error) {
	u, err := s.identity.UserByStableID(ctx, c.UserID)
	if errors.Is(err, ErrNotFound) {
		return u, capabilities.Errorf(capabilities.CodeNotFound, "no such account")
	}
	return u, err
}
