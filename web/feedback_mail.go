package web

import (
	"context"

	"github.com/uptrace/bun"
)

// MailFeedbackDecision writes, inside tx, the mail telling a person that
// their platform feedback was resolved or dismissed: the decision, thanks,
// and an invitation to send more. It never carries the admin's note.
func (h *Handler) MailFeedbackDecision(ctx context.Context, tx bun.IDB, to, username, status string) error {
	decision := "has been resolved"
	if status == "dismissed" {
		decision = "was reviewed and closed without a change"
	}
	msg := Message{
		To:      to,
		Subject: "Your feedback on " + h.opts.SiteName,
		Text: "Hello " + username + ",\n\nThe feedback you sent about " + h.opts.SiteName + " " + decision + ".\n\n" +
			"Thank you for taking the time. You can send more at any time through your agent or at " + h.opts.BaseURL + "/account/feedback.\n",
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
