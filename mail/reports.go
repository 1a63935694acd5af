package mail

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	netmail "net/mail"
	"net/textproto"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// Delivery control (from the reference): one complaint, or five bounced
// messages, in a UTC day pause the user's outbound mail until an admin
// lifts it.
const (
	PauseBounces    = 5
	PauseComplaints = 1
)

// EventOutboundPaused is the admin event published when a user's outbound
// mail is paused.
const EventOutboundPaused = "user.email_outbound.paused"

// Report kinds.
const (
	ReportBounce    = "bounce"
	ReportComplaint = "complaint"
)

// Report is what a delivery report says about one outbound message.
type Report struct {
	// Kind is ReportBounce (an RFC 3464 DSN with a failed recipient) or
	// ReportComplaint (an RFC 5965 feedback report).
	Kind string
	// MessageID is the Message-ID of the original message, when the
	// report carries its headers.
	MessageID string
	// Detail is the failed recipient and status, or the feedback type.
	Detail string
	// Recipients are the addresses the report is about, lowercased: a
	// DSN's failed Final-Recipient and Original-Recipient, a feedback
	// report's Original-Rcpt-To.
	Recipients []string
}

// maxReportParts bounds the parts walked in one report.
const maxReportParts = 20

// ParseReport reads a multipart/report message: a delivery-status report
// with at least one recipient whose Action is "failed" is a bounce (a
// delay or success is no report at all), a feedback report a complaint.
// ok is false for anything else.
func ParseReport(raw []byte) (r Report, ok bool) {
	msg, err := netmail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return r, false
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/report" || params["boundary"] == "" {
		return r, false
	}
	want := strings.ToLower(params["report-type"])
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for range maxReportParts {
		p, err := mr.NextPart()
		if err != nil {
			break
		}
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		body, _ := io.ReadAll(io.LimitReader(p, 256<<10))
		switch {
		case ct == "message/delivery-status" && want == "delivery-status":
			if d, rcpts, failed := failedRecipient(body); failed {
				r.Kind, r.Detail, r.Recipients = ReportBounce, d, rcpts
			}
		case ct == "message/feedback-report" && want == "feedback-report":
			fields := readFields(body)
			ft := strings.ToLower(strings.TrimSpace(firstField(fields, "Feedback-Type")))
			if ft != "" {
				r.Kind, r.Detail = ReportComplaint, "feedback-type "+headerText(ft)
				for _, g := range fields {
					for _, v := range g.Values("Original-Rcpt-To") {
						r.Recipients = appendAddress(r.Recipients, v)
					}
				}
			}
		case ct == "message/rfc822" || ct == "text/rfc822-headers" || ct == "message/rfc822-headers":
			if m, err := netmail.ReadMessage(io.MultiReader(bytes.NewReader(body), strings.NewReader("\r\n\r\n"))); err == nil {
				r.MessageID = headerText(firstMsgID(m.Header.Get("Message-Id")))
			}
		}
	}
	return r, r.Kind != ""
}

// readFields reads the field groups of a delivery-status or feedback
// report body (blocks of header fields separated by blank lines).
func readFields(body []byte) []textproto.MIMEHeader {
	var out []textproto.MIMEHeader
	tr := textproto.NewReader(bufio.NewReader(bytes.NewReader(body)))
	for range 50 {
		h, err := tr.ReadMIMEHeader()
		if len(h) > 0 {
			out = append(out, h)
		}
		if err != nil {
			break
		}
	}
	return out
}

func firstField(groups []textproto.MIMEHeader, name string) string {
	for _, g := range groups {
		if v := g.Get(name); v != "" {
			return v
		}
	}
	return ""
}

// failedRecipient returns the detail of a DSN's first failed recipient
// and the addresses of every failed one.
func failedRecipient(body []byte) (detail string, rcpts []string, failed bool) {
	for _, g := range readFields(body) {
		if strings.EqualFold(strings.TrimSpace(g.Get("Action")), "failed") {
			rcpt := g.Get("Final-Recipient")
			if !failed {
				detail, failed = clip(headerText(strings.TrimSpace(typedAddress(rcpt))+" "+strings.TrimSpace(g.Get("Status"))), 300), true
			}
			rcpts = appendAddress(rcpts, rcpt)
			rcpts = appendAddress(rcpts, g.Get("Original-Recipient"))
		}
	}
	return detail, rcpts, failed
}

// typedAddress is the address of a DSN/ARF address field
// ("rfc822; bob@example.com"), the type prefix dropped.
func typedAddress(v string) string {
	if _, a, ok := strings.Cut(v, ";"); ok {
		return a
	}
	return v
}

// appendAddress appends the address of a DSN/ARF address field, bare and
// lowercased, when it reads as one (at most 50).
func appendAddress(list []string, v string) []string {
	a := strings.ToLower(strings.Trim(strings.TrimSpace(typedAddress(v)), "<>"))
	if a == "" || len(list) >= 50 || !strings.Contains(a, "@") || strings.ContainsAny(a, " \t\r\n,") {
		return list
	}
	return append(list, headerText(a))
}

// reportToken returns the VERP token of a report address
// (bounces+<token>@D) when it names a message this server sent.
func (s *Service) reportToken(ctx context.Context, addr string) (string, bool, error) {
	if s.opts.Domain == "" {
		return "", false, nil
	}
	rcpt, err := ParseRecipient(addr, s.opts.Domain, s.opts.Reserved)
	if err != nil || rcpt.Local != BounceLocal || !verpToken.MatchString(rcpt.Tag) {
		return "", false, nil
	}
	var n int
	if err := s.store.Reader.NewRaw("SELECT count(*) FROM mail_outbound WHERE verp_token = ?", rcpt.Tag).Scan(ctx, &n); err != nil {
		return "", false, fmt.Errorf("mail: look up a report address: %w", err)
	}
	return rcpt.Tag, n > 0, nil
}

// outboundRow is what a report needs of the message it is about.
type outboundRow struct {
	ID        int64  `bun:"id"`
	UserID    int64  `bun:"user_id"`
	HeaderMID string `bun:"header_message_id"`
}

// HandleReport applies a delivery report that arrived at the report
// address of the message with token: a bounce or complaint updates the
// message's delivery state and counts toward the owner's pause. A report
// that is not one, that names another Message-ID, or whose token names no
// message changes nothing: the token, 160 random bits bound to one
// message, is the only way a report reaches a message, so nobody can
// report against another user's mail. It reports whether the report
// counted.
func (s *Service) HandleReport(ctx context.Context, token string, raw []byte) (bool, error) {
	rep, ok := ParseReport(raw)
	if !ok || !verpToken.MatchString(token) {
		return false, nil
	}
	var row outboundRow
	err := s.store.DB.NewRaw("SELECT id, user_id, header_message_id FROM mail_outbound WHERE verp_token = ?", token).Scan(ctx, &row)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mail: find the reported message: %w", err)
	}
	if rep.MessageID != "" && !strings.EqualFold(rep.MessageID, row.HeaderMID) {
		return false, nil
	}
	return s.applyReport(ctx, row, rep)
}

// reporterLocals are the local parts a report without a VERP token must
// come from: the role addresses of a mail system, which its users cannot
// take (so a user of the recipient's own provider cannot pose as it).
var reporterLocals = map[string]bool{"mailer-daemon": true, "postmaster": true, "abuse": true}

// HandleUntokenedReport applies a delivery report that arrived at one of
// this server's mailboxes (postmaster@D, a user's own address) without a
// VERP token; the message is stored where it was addressed either way.
// authResults are the server's own sender checks of the message (what
// Options.Authenticate answered). Unlike a token, a Message-ID is no
// secret (every recipient sees it, replies and archives repeat it), so
// the report counts only when all of these hold:
//
//   - its returned headers carry the Message-ID of a message this server
//     sent (mail_outbound's own Message-ID, in the mail domain);
//   - it names, as a failed DSN recipient (Final-Recipient or
//     Original-Recipient) or a feedback report's Original-Rcpt-To, an
//     address that message was sent to;
//   - it comes from a role address (MAILER-DAEMON, postmaster, abuse) of
//     that recipient's domain or a subdomain of it, and that From domain
//     passed DMARC ("dmarc=pass header.from=…").
//
// So only the mail system of the recipient's domain, which could bounce
// the message for real, can make it count; a forger who knows a
// Message-ID and a recipient cannot. It reports whether the report
// counted.
func (s *Service) HandleUntokenedReport(ctx context.Context, raw []byte, authResults string) (bool, error) {
	if s.opts.Domain == "" {
		return false, nil
	}
	rep, ok := ParseReport(raw)
	if !ok || rep.MessageID == "" || len(rep.Recipients) == 0 ||
		!strings.HasSuffix(strings.ToLower(rep.MessageID), "@"+s.opts.Domain) {
		return false, nil
	}
	from, ok := reportSender(raw)
	if !ok {
		return false, nil
	}
	local, fromDomain, _ := strings.Cut(from, "@")
	if !reporterLocals[local] || !dmarcPassed(authResults, fromDomain) {
		return false, nil
	}
	var row struct {
		outboundRow
		Rcpts string `bun:"rcpts"`
	}
	err := s.store.DB.NewRaw("SELECT id, user_id, header_message_id, rcpts FROM mail_outbound WHERE header_message_id = ?", rep.MessageID).Scan(ctx, &row)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mail: find the reported message: %w", err)
	}
	sent := map[string]bool{}
	for _, a := range strings.Split(row.Rcpts, ",") {
		sent[strings.ToLower(strings.TrimSpace(a))] = true
	}
	for _, r := range rep.Recipients {
		_, rcptDomain, _ := strings.Cut(r, "@")
		if sent[r] && (fromDomain == rcptDomain || strings.HasSuffix(fromDomain, "."+rcptDomain)) {
			return s.applyReport(ctx, row.outboundRow, rep)
		}
	}
	return false, nil
}

// reportSender is a report's single From address, lowercased.
func reportSender(raw []byte) (string, bool) {
	msg, err := netmail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return "", false
	}
	l, err := msg.Header.AddressList("From")
	if err != nil || len(l) != 1 || len(msg.Header["From"]) != 1 {
		return "", false
	}
	a := strings.ToLower(l[0].Address)
	if strings.Count(a, "@") != 1 {
		return "", false
	}
	return a, true
}

// dmarcPassed reports whether results (the server's own sender checks)
// say DMARC passed for the From domain domain.
func dmarcPassed(results, domain string) bool {
	for _, clause := range strings.Split(results, ";") {
		f := strings.Fields(clause)
		if len(f) < 2 || f[0] != "dmarc=pass" {
			continue
		}
		for _, w := range f[1:] {
			if strings.EqualFold(w, "header.from="+domain) {
				return true
			}
		}
	}
	return false
}

// applyReport records a report against an outbound message: its delivery
// state, once per kind, and the owner's pause.
func (s *Service) applyReport(ctx context.Context, row outboundRow, rep Report) (bool, error) {
	now := s.now().UTC()
	counted := false
	var err error
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewRaw("INSERT INTO mail_outbound_events (user_id, outbound_id, kind, detail, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
			row.UserID, row.ID, rep.Kind, rep.Detail, now).Exec(ctx)
		if err != nil {
			return fmt.Errorf("mail: record the report: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // this message's report of this kind counted already
		}
		counted = true
		state := "bounced"
		if rep.Kind == ReportComplaint {
			state = "complained"
		}
		if _, err := tx.NewRaw("UPDATE mail_outbound SET state = ?, detail = ?, updated_at = ? WHERE id = ? AND state <> 'complained'",
			state, rep.Detail, now, row.ID).Exec(ctx); err != nil {
			return fmt.Errorf("mail: update the delivery state: %w", err)
		}
		return s.maybePause(ctx, tx, row.UserID, now)
	})
	return counted, err
}

// maybePause pauses the user's outbound mail when today's reports (since
// the last lift) reach a threshold, and publishes the admin event once.
func (s *Service) maybePause(ctx context.Context, tx bun.Tx, userID int64, now time.Time) error {
	since := now.Truncate(24 * time.Hour)
	var lifted sql.NullTime
	if err := tx.NewRaw("SELECT lifted_at FROM mail_outbound_pauses WHERE user_id = ?", userID).Scan(ctx, &lifted); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("mail: read outbound pause: %w", err)
	}
	if lifted.Valid && lifted.Time.After(since) {
		since = lifted.Time
	}
	var counts struct {
		Bounces    int `bun:"bounces"`
		Complaints int `bun:"complaints"`
	}
	if err := tx.NewRaw(`SELECT COALESCE(SUM(CASE WHEN kind = 'bounce' THEN 1 ELSE 0 END), 0) AS bounces,
			COALESCE(SUM(CASE WHEN kind = 'complaint' THEN 1 ELSE 0 END), 0) AS complaints
		FROM mail_outbound_events WHERE user_id = ? AND created_at >= ?`, userID, since).Scan(ctx, &counts); err != nil {
		return fmt.Errorf("mail: count reports: %w", err)
	}
	reason := ""
	switch {
	case counts.Complaints >= PauseComplaints:
		reason = "complaint"
	case counts.Bounces >= PauseBounces:
		reason = "bounces"
	default:
		return nil
	}
	res, err := tx.NewRaw(`INSERT INTO mail_outbound_pauses (user_id, reason, paused_at) VALUES (?, ?, ?)
		ON CONFLICT (user_id) DO UPDATE SET reason = EXCLUDED.reason, paused_at = EXCLUDED.paused_at, lifted_at = NULL
		WHERE mail_outbound_pauses.lifted_at IS NOT NULL`, userID, reason, now).Exec(ctx)
	if err != nil {
		return fmt.Errorf("mail: pause outbound mail: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 || s.publish == nil {
		return nil // paused already: the event went out then
	}
	var u struct {
		StableID string `bun:"stable_user_id"`
		Username string `bun:"username"`
	}
	if err := tx.NewRaw("SELECT stable_user_id, username FROM users WHERE id = ?", userID).Scan(ctx, &u); err != nil {
		return fmt.Errorf("mail: read the paused account: %w", err)
	}
	data := map[string]any{"userId": u.StableID, "username": u.Username, "email": s.Address(u.Username), "reason": reason, "occurredAt": now}
	if reason == "bounces" {
		data["bounceThreshold"] = PauseBounces
	}
	return s.publish(ctx, tx, EventOutboundPaused, data)
}

// OutboundState is the delivery state of one outbound message.
type OutboundState struct {
	OutboundID string    `json:"outboundId"`
	State      string    `json:"state" schema:"enum=queued|sent|bounced|complained"`
	Detail     string    `json:"detail,omitempty"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

// outboundState reads the state of the caller's outbound message.
func (s *Service) outboundState(ctx context.Context, userID int64, pub string) (OutboundState, error) {
	var st struct {
		State     string    `bun:"state"`
		Detail    string    `bun:"detail"`
		UpdatedAt time.Time `bun:"updated_at"`
	}
	err := s.store.Reader.NewRaw("SELECT state, detail, updated_at FROM mail_outbound WHERE user_id = ? AND public_id = ?", userID, pub).Scan(ctx, &st)
	if errors.Is(err, sql.ErrNoRows) {
		return OutboundState{}, notFound("outbound message", pub)
	}
	if err != nil {
		return OutboundState{}, fmt.Errorf("mail: read the delivery state: %w", err)
	}
	return OutboundState{OutboundID: pub, State: st.State, Detail: st.Detail, UpdatedAt: st.UpdatedAt.UTC()}, nil
}
