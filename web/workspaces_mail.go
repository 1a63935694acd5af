package web

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/workspaces"
)

// MailWorkspaceInvitation mails a workspace invitation link, through the
// outbox inside tx when there is one (so it is sent exactly when the
// invitation is recorded). It implements workspaces.Mailer.
func (h *Handler) MailWorkspaceInvitation(ctx context.Context, tx bun.IDB, m workspaces.InvitationMail) error {
	msg := Message{
		To:      m.To,
		Subject: m.InvitedBy + " invites you to " + m.WorkspaceName + " on " + h.opts.SiteName,
		Text: m.InvitedBy + " invites you to join the workspace \"" + m.WorkspaceName + "\" on " + h.opts.SiteName +
			" as " + string(m.Role) + ".\n\nOpen this link, signed in with this address, to accept:\n\n" + m.URL +
			"\n\nThe link works once and expires on " + m.ExpiresAt.UTC().Format(time.RFC1123) +
			". If you did not expect this, ignore this message.\n",
	}
	if h.opts.Outbox != nil && h.devMail == nil {
		return h.enqueueMail(ctx, tx, msg)
	}
	if _, err := msg.validate(); err != nil {
		return err
	}
	h.sendMail(ctx, msg)
	return nil
}

// MailWorkspaceKeyCreated tells an account that a workspace API key was
// made with it (workspaces.KeyMailer), like the other security notices,
// through the outbox inside tx when there is one.
func (h *Handler) MailWorkspaceKeyCreated(ctx context.Context, tx bun.IDB, m workspaces.KeyMail) error {
	msg := Message{
		To:      m.To,
		Subject: "A workspace API key was created on your " + h.opts.SiteName + " account",
		Text: "An API key named \"" + m.KeyName + "\" was created for the workspace \"" + m.WorkspaceName + "\" on your account " +
			m.Username + " on " + m.CreatedAt.UTC().Format(time.RFC1123) + ", with at most the role " + string(m.MaxRole) + ".\n\n" +
			"It acts as you in that workspace until it is revoked. Your keys are listed, with a button to revoke each, on:\n\n" +
			h.absURL(pathSecurity, nil) + "\n\n" +
			"If this was not you, change your password at once: it revokes every key, and signs out every browser and connected app.\n",
	}
	if h.opts.Outbox != nil && h.devMail == nil {
		return h.enqueueMail(ctx, tx, msg)
	}
	if _, err := msg.validate(); err != nil {
		return err
	}
	h.sendMail(ctx, msg)
	return nil
}

var (
	_ workspaces.Mailer    = (*Handler)(nil)
	_ workspaces.KeyMailer = (*Handler)(nil)
)
