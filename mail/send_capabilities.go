package mail

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
)

// StatusInput names an outbound message.
type StatusInput struct {
	OutboundID string `json:"outboundId" jsonschema:"the outboundId mailSend returned (out_…)"`
}

// ResumeInput is the input of adminMailOutboundResume.
type ResumeInput struct {
	Username string `json:"username" jsonschema:"the account whose outbound mail to resume"`
}

// ResumeOutput is the output of adminMailOutboundResume.
type ResumeOutput struct {
	Resumed bool   `json:"resumed" jsonschema:"false when the account's outbound mail was not paused"`
	Message string `json:"message"`
}

// SystemSendInput is the input of adminSystemMailSend.
type SystemSendInput struct {
	Mailbox string   `json:"mailbox" jsonschema:"the reserved local part to send from (postmaster, abuse, …)"`
	To      []string `json:"to" jsonschema:"the recipients: one to five plain addresses" schema:"minItems=1,maxItems=5"`
	Subject string   `json:"subject" jsonschema:"the subject: one line" schema:"minLength=1,maxLength=250"`
	Text    string   `json:"text" jsonschema:"the plain-text body"`
	HTML    string   `json:"html,omitempty" jsonschema:"an optional HTML alternative of the text"`
}

func (s *Service) sendCapabilities() []capabilities.Capability {
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[SendInput, SendOutput]{
			Name: "mailSend", Domain: "mail", Title: "Send an email",
			Description: "Sends an email from your own address (mailList shows it). The person is always asked to confirm the exact message first; " +
				"if they decline nothing is sent. inReplyTo (a msg_ id of your mailbox) makes it a reply in that thread; the sent copy goes to your sent folder. " +
				"Limited per day; paused by the platform after bounces or a spam complaint.",
			Annotations: &capabilities.Annotations{OpenWorld: true}, Requires: writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in SendInput) (SendOutput, error) {
				return s.send(ctx, call, in)
			},
		}),
		capabilities.Define(capabilities.Spec[StatusInput, OutboundState]{
			Name: "mailSendStatus", Domain: "mail", Title: "Delivery state of a sent email",
			Description: "Shows whether a message you sent is queued, sent, bounced or complained about.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true}, Requires: readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in StatusInput) (OutboundState, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return OutboundState{}, err
				}
				return s.outboundState(ctx, o.ID, in.OutboundID)
			},
		}),
		capabilities.Define(capabilities.Spec[ResumeInput, ResumeOutput]{
			Name: "adminMailOutboundResume", Domain: "admin", Title: "Resume a user's outbound mail",
			Description: "Lifts the pause the platform put on an account's outbound mail after a spam complaint or five bounces in a day. Review the account first. Admins only; audited.",
			Annotations: &capabilities.Annotations{Idempotent: true}, Requires: admin,
			Handler: func(ctx context.Context, call *capabilities.Call, in ResumeInput) (ResumeOutput, error) {
				return s.resume(ctx, call.Caller, in.Username)
			},
		}),
		capabilities.Define(capabilities.Spec[SystemSendInput, SendOutput]{
			Name: "adminSystemMailSend", Domain: "admin", Title: "Send from a system mailbox",
			Description: "Sends an email from one of the platform's reserved addresses (postmaster, abuse, …): it speaks for the platform, not for you. " +
				"You are asked to confirm the exact message first. Admins only; audited (recipients are not recorded).",
			Annotations: &capabilities.Annotations{OpenWorld: true}, Requires: admin,
			Handler: func(ctx context.Context, call *capabilities.Call, in SystemSendInput) (SendOutput, error) {
				return s.systemSend(ctx, call, in)
			},
		}),
	}
}

// resume lifts a user's outbound pause. The audit row names the account
// by its keyed hash and is written first: a resume that cannot be audited
// does not happen.
func (s *Service) resume(ctx context.Context, c capabilities.Caller, username string) (ResumeOutput, error) {
	var u struct {
		ID       int64  `bun:"id"`
		StableID string `bun:"stable_user_id"`
	}
	err := s.store.Reader.NewRaw("SELECT id, stable_user_id FROM users WHERE username = ?", strings.ToLower(strings.TrimSpace(username))).Scan(ctx, &u)
	if errors.Is(err, sql.ErrNoRows) {
		return ResumeOutput{}, notFound("user", username)
	}
	if err != nil {
		return ResumeOutput{}, fmt.Errorf("mail: look up the account: %w", err)
	}
	_, on, err := s.paused(ctx, s.store.Reader, u.ID)
	if err != nil {
		return ResumeOutput{}, err
	}
	if s.audit != nil {
		if err := s.audit.Record(ctx, audit.Event{Category: "mail", Action: "adminMailOutboundResume", Result: audit.ResultSuccess,
			Reason: fmt.Sprintf("user %s paused=%t", s.audit.HashUser(u.StableID), on), UserHash: s.audit.HashUser(c.UserID)}); err != nil {
			s.log.Warn("mail: auditing a resume failed", "err", err)
			return ResumeOutput{}, capabilities.Errorf(capabilities.CodeInternal, "the resume could not be audited, so it was not made; try again")
		}
	}
	res, err := s.store.DB.NewRaw("UPDATE mail_outbound_pauses SET lifted_at = ? WHERE user_id = ? AND lifted_at IS NULL", s.now().UTC(), u.ID).Exec(ctx)
	if err != nil {
		return ResumeOutput{}, fmt.Errorf("mail: lift the pause: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ResumeOutput{Resumed: false, Message: fmt.Sprintf("%s's outbound mail was not paused.", username)}, nil
	}
	return ResumeOutput{Resumed: true, Message: fmt.Sprintf("%s's outbound mail is resumed; only reports from now on count toward a new pause.", username)}, nil
}

// systemSend is adminSystemMailSend: a message from a reserved address,
// confirmed by the admin, audited without its recipients. It uses no
// user's mailbox, quota or pause.
func (s *Service) systemSend(ctx context.Context, call *capabilities.Call, in SystemSendInput) (SendOutput, error) {
	if s.opts.Domain == "" || s.outbox == nil {
		return SendOutput{}, errNoDomain
	}
	if _, err := s.systemBox(in.Mailbox); err != nil {
		return SendOutput{}, err
	}
	from := in.Mailbox + "@" + s.opts.Domain
	d, err := checkDraft(from, in.To, in.Subject, in.Text, in.HTML)
	if err != nil {
		return SendOutput{}, err
	}
	out := SendOutput{From: from, To: d.to}
	switch action, err := confirm(ctx, call, "Send this email from the platform's address "+from+"?", d); {
	case err != nil:
		return SendOutput{}, err
	case action == "decline":
		out.Status, out.Message = "declined", "Declined: nothing was sent."
		return out, nil
	case action == "cancel":
		out.Status, out.Message = "cancelled", "Dismissed: nothing was sent."
		return out, nil
	}
	if s.audit != nil {
		if err := s.audit.Record(ctx, audit.Event{Category: "mail", Action: "adminSystemMailSend", Result: audit.ResultSuccess,
			Reason: fmt.Sprintf("from=%s recipients=%d", in.Mailbox, len(d.to)), UserHash: s.audit.HashUser(call.Caller.UserID)}); err != nil {
			return SendOutput{}, capabilities.Errorf(capabilities.CodeInternal, "the send could not be audited, so it was not made; try again")
		}
	}
	now := s.now().UTC()
	msgID := strings.ToLower(idEncoding.EncodeToString(randomBytes(15))) + "@" + s.opts.Domain
	raw := compose(d, msgID, "", nil, now)
	payload, err := json.Marshal(Outgoing{From: from, To: d.to, Raw: raw})
	if err != nil {
		return SendOutput{}, err
	}
	if err := s.outbox.Add(ctx, s.store.DB, OutboundTopic, payload); err != nil {
		return SendOutput{}, fmt.Errorf("mail: queue the message: %w", err)
	}
	out.Status = "queued"
	out.Message = fmt.Sprintf("Confirmed; the message to %s is queued for delivery from %s.", strings.Join(d.to, ", "), from)
	return out, nil
}
